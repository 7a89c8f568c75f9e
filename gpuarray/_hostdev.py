"""Host arrays that are also device arrays: mapped and managed memory (Numba's host API).

One concern: NumPy arrays over memory the device can address directly --
page-locked host memory mapped into the device (``mapped_array``,
``mapped``) and managed (unified) memory (``managed_array``) -- and the
``*_like`` host allocators.  As in Numba, ``mapped_array`` and
``managed_array`` return NumPy *subclasses* (:class:`MappedNDArray`,
:class:`ManagedNDArray`) that also export ``__cuda_array_interface__``, so
they can be passed straight to a ``@cuda.jit`` kernel or to
:func:`gpuarray.asarray`; ``np.asarray(h)`` (or ``h.view(np.ndarray)``) is the
plain NumPy form, and :func:`gpuarray.memory.mapped_array` allocates a plain
NumPy array directly.  Views (slices, transposes) keep the device address;
arrays NumPy computes into new memory (``h + 1``) are plain host memory and
export no interface.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import _config, _layout
from ._array import DeviceNDArray
from ._device import get_device
from ._stream import Stream, as_stream
from .interop import _dlpack_capsule as _cap
from .interop._cai_desc import make_cai
from .memory import MemoryPointer, host_pin
from .memory._host import _nbytes, host_array_over
from .memory._managed import managed_alloc
from .memory._manager import host_alloc

__all__ = ["MappedNDArray", "ManagedNDArray", "mapped_array", "managed_array", "mapped",
           "mapped_array_like", "pinned_array_like"]


class _HostDeviceArray(np.ndarray):
    """A NumPy array over memory with a device address; exports the CUDA Array Interface."""

    _gpu_memory: Any = None  # the PinnedMemory/ManagedMemory holding the buffer
    _gpu_stream: Stream | None = None
    _dlpack_kind = 3

    def __array_finalize__(self, obj: Any) -> None:
        self._gpu_memory = getattr(obj, "_gpu_memory", None)
        self._gpu_stream = getattr(obj, "_gpu_stream", None)

    def _device_address(self) -> int | None:
        """Device address of element [0, ...], or None when the data is not in the memory."""
        mem = self._gpu_memory
        if mem is None:
            return None
        host = self.__array_interface__["data"][0]
        if self.size:
            lo, hi = _layout.extent(self.shape, self.strides, self.itemsize)
            if host + lo < mem.host_pointer or host + hi > mem.host_pointer + mem.size:
                return None  # NumPy made new memory (a ufunc result, a copy)
        return host - mem.host_pointer + getattr(mem, "device_address", mem.host_pointer)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA Array Interface v3 of the device view of this host memory.

        ``stream`` is the array's stream (the library default stream unless
        one was given at allocation): 1 legacy, 2 per-thread, else the handle.
        """
        ptr = self._device_address()
        if ptr is None:
            raise AttributeError(f"this {type(self).__name__} is not in device-accessible memory "
                                 "(NumPy made it in new host memory)")
        stream = None
        if _config.get().cai_export_stream:
            s = self._gpu_stream
            stream = s.cai_value if s is not None else (2 if _config.get().per_thread_default_stream else 1)
        return make_cai(ptr=ptr if self.size else 0, shape=self.shape, byte_strides=self.strides,
                        dtype=self.dtype, readonly=not self.flags.writeable, stream_value=stream,
                        c_contiguous=self.flags.c_contiguous)

    @property
    def device_ctypes_pointer(self) -> Any:
        """The device address of element [0, ...] as ``ctypes.c_void_p`` (Numba's attribute)."""
        import ctypes

        return ctypes.c_void_p(self._device_address() or None)

    @property
    def gpu_data(self) -> MemoryPointer:
        """The memory as a :class:`~gpuarray.MemoryPointer` that keeps it allocated."""
        return self._gpu_memory.own()

    def device_view(self) -> DeviceNDArray:
        """A zero-copy :class:`~gpuarray.DeviceNDArray` over the same memory.

        Returns
        -------
        DeviceNDArray

        Raises
        ------
        ValueError
            If the array is not in device-accessible memory.
        """
        ptr = self._device_address()
        if ptr is None:
            raise ValueError(f"this {type(self).__name__} is not in device-accessible memory")
        dev = self._gpu_memory.context if self._gpu_memory.context is not None else get_device()
        lo, hi = _layout.extent(self.shape, self.strides, self.itemsize)
        mem = MemoryPointer(dev, ptr + lo, hi - lo, owner=self)
        arr = DeviceNDArray._make(self.shape, self.strides, self.dtype, ptr, mem,
                                  as_stream(self._gpu_stream, dev), not self.flags.writeable, dev)
        arr._dl = self._dlpack_kind
        return arr


class MappedNDArray(_HostDeviceArray):
    """A NumPy array in page-locked host memory mapped into the device (Numba's ``MappedNDArray``).

    Made by :func:`mapped_array` and :func:`mapped_array_like`.  Host code
    uses it as any NumPy array; device code reads it through
    ``__cuda_array_interface__`` (its device address), or through
    :meth:`device_view`.  ``np.asarray(h)`` is the plain NumPy array.

    Parameters
    ----------
    shape, dtype, buffer, offset, strides, order
        As :class:`numpy.ndarray`'s; not for direct use (NumPy constructs
        instances for views): allocate with the functions above.

    Examples
    --------
    >>> h = gpuarray.mapped_array(3, dtype=np.int32)
    >>> gpuarray.is_cuda_array(h), type(np.asarray(h)).__name__
    (True, 'ndarray')
    """


class ManagedNDArray(_HostDeviceArray):
    """A NumPy array in managed (unified) memory (Numba's ``ManagedNDArray``).

    Made by :func:`managed_array`.  Host and device read and write the same
    addresses; its DLPack device is ``(13, 0)`` (kDLCUDAManaged) when viewed
    as a device array.  Synchronise the device before the host reads what a
    kernel wrote.

    Parameters
    ----------
    shape, dtype, buffer, offset, strides, order
        As :class:`numpy.ndarray`'s; not for direct use (NumPy constructs
        instances for views): allocate with the functions above.

    Examples
    --------
    >>> m = gpuarray.managed_array(4, dtype=np.float32)
    >>> gpuarray.asarray(m).__dlpack_device__()
    (13, 0)
    """

    _dlpack_kind = 13


def _wrap(cls: type, mem: Any, shape, dtype, strides, order: str, stream: Any) -> Any:
    host = host_array_over(mem, shape, dtype, strides, order)
    out: Any = host.view(cls)
    out._gpu_memory = mem
    out._gpu_stream = None if stream is None or (isinstance(stream, int) and stream == 0) \
        else as_stream(stream)
    return out


def mapped_array(shape, dtype=np.float64, strides=None, order: str = "C", stream: Any = None,
                 portable: bool = False, wc: bool = False) -> MappedNDArray:
    """Allocate a host array in page-locked memory mapped into the device (Numba's signature).

    Parameters
    ----------
    shape : int or tuple of int
    dtype : data-type, default float64
    strides : tuple of int, optional
        Byte strides.
    order : {"C", "F"}
    stream : Stream, optional
        The stream its ``__cuda_array_interface__`` names (default: the
        library default stream).
    portable : bool
        Page-locked for every context.
    wc : bool
        Write-combined (fast for the device to read, slow for the host to read).

    Returns
    -------
    MappedNDArray
        A NumPy array that is also a device array; ``np.asarray(h)`` is the
        plain NumPy form.

    Examples
    --------
    >>> h = gpuarray.mapped_array(4, dtype=np.int32); h[:] = 7
    >>> gpuarray.asarray(h).copy_to_host()      # a zero-copy device view
    array([7, 7, 7, 7], dtype=int32)
    """
    shape, dtype, nbytes = _nbytes(shape, dtype, strides)
    mem = host_alloc(nbytes, mapped=True, portable=portable, wc=wc)
    return _wrap(MappedNDArray, mem, shape, dtype, strides, order, stream)


def managed_array(shape, dtype=np.float64, strides=None, order: str = "C", stream: Any = None,
                  attach_global: bool = True) -> ManagedNDArray:
    """Allocate a host array in managed (unified) memory (``cuMemAllocManaged``).

    Host and device use the same addresses; the memory is freed when the
    last view of it dies.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : data-type, default float64
    strides : tuple of int, optional
        Byte strides.
    order : {"C", "F"}
    stream : Stream, optional
        The stream its ``__cuda_array_interface__`` names.
    attach_global : bool, default True
        Accessible from any stream (``CU_MEM_ATTACH_GLOBAL``); False attaches
        it to the host (``CU_MEM_ATTACH_HOST``).

    Returns
    -------
    ManagedNDArray

    Raises
    ------
    CudaOutOfMemoryError
        When the device has no room.

    Examples
    --------
    >>> m = gpuarray.managed_array(3, dtype=np.int64); m[:] = [1, 2, 3]
    >>> d = gpuarray.asarray(m); d[0] = 10; gpuarray.synchronize()
    >>> m
    ManagedNDArray([10,  2,  3])
    """
    shape, dtype, nbytes = _nbytes(shape, dtype, strides)
    mem = managed_alloc(nbytes, attach_global=attach_global)
    return _wrap(ManagedNDArray, mem, shape, dtype, strides, order, stream)


def _like(ary: Any) -> tuple[tuple[int, ...], np.dtype, tuple[int, ...] | None, str]:
    """Shape, dtype, strides and order of a new contiguous array laid out like ``ary``."""
    shape = tuple(ary.shape)
    dtype = np.dtype(ary.dtype)
    flags = ary.flags
    c = flags["C_CONTIGUOUS"]
    f = flags["F_CONTIGUOUS"]
    if c or f or len(shape) <= 1:
        return shape, dtype, None, "F" if f and not c else "C"
    # Keep the axis order of a non-contiguous array, densely (NumPy's order="K").
    axes = sorted(range(len(shape)), key=lambda i: -abs(ary.strides[i]))
    strides = [0] * len(shape)
    step = dtype.itemsize
    for i in reversed(axes):
        strides[i] = step
        step *= shape[i]
    return shape, dtype, tuple(strides), "C"


def mapped_array_like(ary: Any, stream: Any = None, portable: bool = False,
                      wc: bool = False) -> MappedNDArray:
    """A mapped host array with the shape, dtype and layout order of ``ary``.

    Parameters
    ----------
    ary : array_like
        Host or device array.
    stream : Stream, optional
    portable, wc : bool
        As for :func:`mapped_array`.

    Returns
    -------
    MappedNDArray

    Examples
    --------
    >>> gpuarray.mapped_array_like(np.zeros((2, 3), order="F")).flags.f_contiguous
    True
    """
    shape, dtype, strides, order = _like(ary)
    return mapped_array(shape, dtype, strides, order, stream, portable, wc)


def pinned_array_like(ary: Any) -> np.ndarray:
    """A page-locked host array with the shape, dtype and layout order of ``ary``.

    Parameters
    ----------
    ary : array_like
        Host or device array.

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> gpuarray.pinned_array_like(gpuarray.zeros((2, 2), dtype=np.int8)).dtype
    dtype('int8')
    """
    from .memory import pinned_array

    shape, dtype, strides, order = _like(ary)
    return pinned_array(shape, dtype, strides, order)


@contextlib.contextmanager
def mapped(*arrays: Any, stream: Any = None) -> Iterator[Any]:
    """Map NumPy arrays into the device for the duration of the block (Numba's ``mapped``).

    The arrays' memory is page-locked and mapped; the block receives
    zero-copy device views (one array, or a list for several).  Leaving the
    block unmaps the memory after the device's queued work on it.

    Parameters
    ----------
    *arrays : numpy.ndarray
    stream : Stream, optional
        Default stream of the device views.

    Yields
    ------
    DeviceNDArray or list of DeviceNDArray

    Raises
    ------
    TypeError
        If an argument is not a NumPy array.

    Examples
    --------
    >>> h = np.arange(4.0)
    >>> with gpuarray.mapped(h) as d:
    ...     d[1:3] = 0
    ...     gpuarray.synchronize()
    >>> h
    array([0., 0., 0., 3.])
    """
    pins: list[Any] = []
    views: list[DeviceNDArray] = []
    try:
        for a in arrays:
            if not isinstance(a, np.ndarray):
                raise TypeError(f"mapped() takes NumPy arrays, got {type(a).__name__}")
            dev = get_device()
            if a.size == 0:
                views.append(DeviceNDArray._make(a.shape, a.strides, a.dtype, 0,
                                                 MemoryPointer(dev, 0, 0), as_stream(stream, dev),
                                                 not a.flags.writeable, dev))
                continue
            lo, hi = _layout.extent(a.shape, a.strides, a.itemsize)
            start = _cap.host_address(a) + lo
            pm = host_pin(a, start, hi - lo, mapped=True)
            pins.append(pm)
            ptr = getattr(pm, "device_address", pm.device_pointer) - lo  # a MappedMemory
            v = DeviceNDArray._make(a.shape, a.strides, a.dtype, ptr, pm, as_stream(stream, dev),
                                    not a.flags.writeable, dev)
            v._dl = 3
            views.append(v)
        yield views[0] if len(views) == 1 else views
    finally:
        # Work queued on the views, on any stream (a kernel on the caller's own
        # stream too), must finish before the memory is unmapped: wait for the device.
        for dev in {v.device.id: v.device for v in views if v.size}.values():
            dev.synchronize()
        for pm in pins:
            pm.free()
