"""Moving array data: host to device, device to host, device to device.

Works on raw layouts (pointer of element [0..0], shape, byte strides, dtype)
so the array class stays thin.  Rules:

- contiguous same-dtype cases are one driver copy (``cuMemcpy*Async``);
- anything else goes through a contiguous staging buffer and the copy kernel;
- device copies whose source and destination overlap are staged through a
  temporary, so ``a[1:] = a[:-1]`` gives NumPy's result;
- every temporary comes from the active memory manager.

Stream funnelling (:func:`on_stream`): an operation on stream ``s`` first makes
``s`` wait for the pending work of every array involved, and afterwards makes
each array's default stream wait for ``s``.  Synchronising on an array's
stream therefore always orders after all work on it (the CAI producer rule),
without blocking the host.  A closed default stream is waited for (its last
work) and then left alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from . import _graph, _kernels, _layout, _staging
from ._device import Device
from ._driver import checkpoint, get_backend
from ._kernels import _dtypes
from ._stream import Stream, order_after
from .interop import _core as _cap
from .memory import allocate, allocation_stream

#: dtypes the copy/cast kernels convert between (same-dtype copies and fills
#: work for any non-object dtype: the kernels move raw bytes).
KERNEL_DTYPES = frozenset(np.dtype(c if c != "b1" else "?") for c in _dtypes.CAST_CODES)


@contextlib.contextmanager
def on_stream(s: Stream, *streams: Stream) -> Iterator[Stream]:
    """Run a block on ``s``, funnelled with the default streams of the arrays involved.

    Temporaries allocated in the block are published as used on ``s``, so a
    stream-ordered memory manager allocates and frees them there.
    """
    others = [t for t in dict.fromkeys(streams) if t != s]
    for t in others:
        order_after(s, t)
    with allocation_stream(s):
        yield s
    for t in others:
        if not t.closed:  # a closed stream runs nothing more: nothing to order
            order_after(t, s)


def device_copy(device: Device, s: Stream, dst_ptr: int, dst_strides, dst_dtype,
                src_ptr: int, src_strides, src_dtype, shape) -> None:
    """Copy (and cast) ``src`` into ``dst`` on stream ``s``; both of ``shape``.

    ``src_strides`` may contain 0 (broadcast).  Overlapping ranges are staged.
    """
    shape = tuple(shape)
    if 0 in shape:
        return
    dst_dtype, src_dtype = np.dtype(dst_dtype), np.dtype(src_dtype)
    if _graph._unlaunched:
        _graph.check_graph_memory(s, "a device copy", dst_ptr, src_ptr)
    with device.activate():
        if _layout.overlaps_exact(dst_ptr, shape, dst_strides, dst_dtype.itemsize,
                                  src_ptr, shape, src_strides, src_dtype.itemsize):
            tmp_strides = _layout.c_strides(shape, src_dtype.itemsize)
            n = int(np.prod(shape)) * src_dtype.itemsize
            tmp = allocate(n, device)
            _kernels.copy(tmp.device_pointer, tmp_strides, src_dtype, src_ptr, src_strides,
                          src_dtype, shape, s.handle)
            src_ptr, src_strides = tmp.device_pointer, tmp_strides  # tmp lives to the end
        _kernels.copy(dst_ptr, dst_strides, dst_dtype, src_ptr, src_strides, src_dtype,
                      shape, s.handle)


def device_fill(device: Device, s: Stream, dst_ptr: int, dst_strides, dtype, shape, value) -> None:
    """Fill a device layout with ``value`` (already a NumPy scalar of ``dtype``)."""
    if 0 in tuple(shape):
        return
    dtype = np.dtype(dtype)
    if _graph._unlaunched:
        _graph.check_graph_memory(s, "a fill", dst_ptr)
    with device.activate():
        _kernels.fill(dst_ptr, dst_strides, dtype, shape, value, s.handle)


def _pageable_and_large(device: Device, host_ptr: int, nbytes: int) -> bool:
    limit = _staging.staging_threshold()
    if not limit or nbytes < limit:
        return False
    with device.activate():
        return get_backend().pointer_info(host_ptr).memory_type == 0


def upload(device: Device, s: Stream, dst_ptr: int, host: np.ndarray, nbytes: int) -> None:
    """One contiguous host buffer to the device: through the staging ring when
    it is large pageable memory, else one driver copy."""
    addr = _cap.host_address(host)
    if _graph._unlaunched:
        _graph.check_graph_memory(s, "an upload", dst_ptr)
    if checkpoint().capturing:
        _graph.keep(s, host)  # a capture's launches re-read it
    if _pageable_and_large(device, addr, nbytes) and not _capturing(device, s):
        _staging.htod(device, s, dst_ptr, host)
        return
    with device.activate():
        get_backend().memcpy_htod_async(dst_ptr, addr, nbytes, s.handle)


def htod(device: Device, s: Stream, dst_ptr: int, dst_shape, dst_strides, dst_dtype,
         host: np.ndarray) -> None:
    """Copy host array ``host`` (already of ``dst_shape``; any layout, any dtype) to the device."""
    dst_dtype = np.dtype(dst_dtype)
    shape = tuple(dst_shape)
    if 0 in shape:
        return
    nbytes = int(np.prod(shape)) * dst_dtype.itemsize
    c = _layout.is_c_contiguous(shape, dst_strides, dst_dtype.itemsize)
    f = not c and _layout.is_f_contiguous(shape, dst_strides, dst_dtype.itemsize)
    if (c or f) and host.dtype == dst_dtype and (
            host.flags.c_contiguous if c else host.flags.f_contiguous):
        upload(device, s, dst_ptr, host, nbytes)
        return
    # Make a contiguous host copy in the destination dtype, upload it, and
    # scatter it into the destination layout on the device.
    staged = np.ascontiguousarray(host, dtype=dst_dtype)  # NumPy casting rules, on the host
    tmp = allocate(staged.nbytes, device)
    upload(device, s, tmp.device_pointer, staged, staged.nbytes)
    device_copy(device, s, dst_ptr, dst_strides, dst_dtype, tmp.device_pointer,
                _layout.c_strides(shape, staged.dtype.itemsize), staged.dtype, shape)


def dtoh(device: Device, s: Stream, out: np.ndarray, src_ptr: int, src_strides, src_dtype,
         sync: bool) -> None:
    """Copy a device layout into host array ``out`` (same shape, any layout and dtype)."""
    src_dtype = np.dtype(src_dtype)
    shape = out.shape
    if 0 in shape:
        return
    b = get_backend()
    c = _layout.is_c_contiguous(shape, src_strides, src_dtype.itemsize)
    f = not c and _layout.is_f_contiguous(shape, src_strides, src_dtype.itemsize)
    simple = out.dtype == src_dtype and ((c and out.flags.c_contiguous) or (f and out.flags.f_contiguous))
    if _graph._unlaunched:
        _graph.check_graph_memory(s, "a download", src_ptr)
    if checkpoint().capturing:
        _graph.keep(s, out)  # a capture's launches rewrite it
    if simple:
        addr = _cap.host_address(out)
        if _pageable_and_large(device, addr, out.nbytes) and not _capturing(device, s):
            _staging.dtoh(device, s, out, src_ptr)  # complete on return
            return
        with device.activate():
            b.memcpy_dtoh_async(addr, src_ptr, out.nbytes, s.handle)
            if sync:
                b.stream_synchronize(s.handle)
        return
    # Gather into a contiguous device buffer (casting on the device when the
    # kernels can), then one copy down, then a host-side assignment.
    tmp_dtype = out.dtype if (out.dtype in KERNEL_DTYPES and src_dtype in KERNEL_DTYPES) else src_dtype
    tmp_strides = _layout.c_strides(shape, tmp_dtype.itemsize)
    n = int(np.prod(shape)) * tmp_dtype.itemsize
    tmp = allocate(n, device)
    device_copy(device, s, tmp.device_pointer, tmp_strides, tmp_dtype, src_ptr, src_strides,
                src_dtype, shape)
    if out.flags.c_contiguous and out.dtype == tmp_dtype:
        with device.activate():
            b.memcpy_dtoh_async(_cap.host_address(out), tmp.device_pointer, n, s.handle)
            b.stream_synchronize(s.handle)  # tmp must outlive the copy; out must be complete
        return
    host = np.empty(shape, dtype=tmp_dtype)
    with device.activate():
        b.memcpy_dtoh_async(_cap.host_address(host), tmp.device_pointer, n, s.handle)
        b.stream_synchronize(s.handle)
    out[...] = host


def _capturing(device: Device, s: Stream) -> bool:
    """Whether ``s`` captures: the staging ring's host waits are no way to copy then
    (one driver copy is made, which the capture checkpoint judges)."""
    with device.activate():
        return checkpoint().is_capturing(s.handle)
