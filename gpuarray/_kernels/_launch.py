"""The kernels layer's entry points: strided copy (with conversion) and fill.

:func:`copy` and :func:`fill` plan the operation (:mod:`._plan`), then issue
the driver calls and kernel launches, in order, on ``stream`` in the calling
thread's current context.  Launch configuration: 256 threads per block (32 x
8 for transposes, whatever their tile), a 1-D grid of at most
``8 * multiprocessor_count`` blocks (``MAX_GRID`` at most; transposes: at
most one block per tile) with grid-stride loops in the kernels.  Nothing here
allocates memory and nothing synchronises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._driver import get_backend
from . import _plan
from ._specs import BLOCK, TILE, TILE_ROWS, UNROLL, divider, params_type, transpose_tile

__all__ = ["copy", "fill", "execute"]

#: Resident blocks per multiprocessor the grid is sized for.
BLOCKS_PER_SM = 8


def copy(dst_ptr: int, dst_strides: Sequence[int], dst_dtype, src_ptr: int,
         src_strides: Sequence[int], src_dtype, shape: Sequence[int], stream: int) -> None:
    """Copy a strided device array into another, converting the dtype like ``astype``.

    Parameters
    ----------
    dst_ptr : int
        Device address of the destination's element ``[0, ..., 0]``.
    dst_strides : sequence of int
        Destination byte strides (any sign, no zero stride on a dimension
        longer than 1).
    dst_dtype : dtype-like
        Destination dtype.
    src_ptr : int
        Device address of the source's element ``[0, ..., 0]``.
    src_strides : sequence of int
        Source byte strides (any sign; 0 broadcasts).
    src_dtype : dtype-like
        Source dtype.  Equal dtypes (any dtype, also structured) are moved as
        bytes; otherwise both must be among bool, int8-64, uint8-64,
        float16/32/64, complex64/128 (NumPy ``astype``, unsafe casting).
    shape : sequence of int
        Common shape; a size of 0 issues nothing.
    stream : int
        Stream handle (0/1 legacy, 2 per-thread, or a handle) of the current
        context.

    Raises
    ------
    TypeError
        Unsupported conversion, or an object dtype.
    ValueError
        Strides not matching ``shape``, or a zero destination stride.
    NvrtcError
        A kernel failed to compile.

    Notes
    -----
    Source and destination must not overlap in memory (the caller stages
    overlapping copies through a temporary).  Asynchronous: the work is
    ordered on ``stream`` only.

    Conversions equal NumPy's ``astype`` except where NumPy's own result is
    platform-dependent: NaN, infinities and values outside the range of the
    intermediate integer in float -> integer casts (the device saturates,
    NaN gives 0, then wraps to the target width), and NaN payloads.  Negative
    floats to unsigned integers wrap as on x86-64 (``-1.0`` -> 255).

    Examples
    --------
    Copy a float64 C-order matrix into a float32 Fortran-order one::

        copy(d_ptr, (4, 4 * 3), "float32", s_ptr, (8 * 4, 8), "float64", (3, 4), stream=0)
    """
    ops = _plan.plan_copy(dst_ptr, dst_strides, dst_dtype, src_ptr, src_strides, src_dtype, shape)
    if ops:
        execute(ops, stream)


def fill(dst_ptr: int, dst_strides: Sequence[int], dtype, shape: Sequence[int], value,
         stream: int) -> None:
    """Set every element of a strided device array to ``value``.

    Parameters
    ----------
    dst_ptr : int
        Device address of element ``[0, ..., 0]``.
    dst_strides : sequence of int
        Byte strides (any sign, no zero stride on a dimension longer than 1).
    dtype : dtype-like
        Element dtype (any non-object dtype).
    shape : sequence of int
        Shape; a size of 0 issues nothing (``value`` is still validated).
    value : object
        Converted as NumPy assignment does (``a[...] = value``).
    stream : int
        Stream handle of the current context.

    Raises
    ------
    TypeError, ValueError, OverflowError
        As NumPy assignment of ``value`` to ``dtype``; ``ValueError`` also for
        strides not matching ``shape`` or a zero stride.

    Examples
    --------
    ::

        fill(ptr, (8,), "float64", (1000,), 1.5, stream=0)   # fill kernel
        fill(ptr, (4,), "float32", (1000,), 0, stream=0)     # cuMemsetD8Async
    """
    ops = _plan.plan_fill(dst_ptr, dst_strides, dtype, shape, value)
    if ops:
        execute(ops, stream)


def execute(ops: Sequence[object], stream: int, backend=None) -> None:
    """Issue planned operations on ``stream`` of the current context.

    Parameters
    ----------
    ops : sequence
        From :func:`gpuarray._kernels._plan.plan_copy` / ``plan_fill``.
    stream : int
    backend : Backend, optional
        Defaults to :func:`gpuarray._driver.get_backend`.
    """
    b = backend if backend is not None else get_backend()
    for op in ops:
        if isinstance(op, _plan.Memcpy):
            b.memcpy_dtod_async(op.dst, op.src, op.nbytes, stream)
        elif isinstance(op, _plan.Memset):
            fn = {8: b.memset_d8_async, 16: b.memset_d16_async, 32: b.memset_d32_async}[op.bits]
            fn(op.dst, op.value, op.words, stream)
        elif isinstance(op, _plan.Memcpy2D):
            b.memcpy_2d_async(op.dst, op.dst_pitch, True, op.src, op.src_pitch, True,
                              op.width, op.height, stream)
        elif isinstance(op, _plan.Launch):
            _launch(b, op, stream)
        else:
            raise TypeError(f"not a planned operation: {op!r}")


def params_for(op: _plan.Launch):
    """The ctypes parameter block of a planned launch (dividers included)."""
    s = op.spec
    ptype = params_type(s.family, s.ndim, s.index)
    p = ptype()
    f = op.fields
    if s.family == "transpose":
        p.dst, p.src = f["dst"], f["src"]
        for name in ("rows", "cols", "batch", "dst_pitch", "src_pitch", "dst_bstride",
                     "src_bstride"):
            setattr(p, name, f[name])
        return p
    nd = s.ndim
    shape = f["shape"]
    p.dst = f["dst"]
    p.n = op.n
    p.shape[:nd] = list(shape)
    if s.family == "copy":
        p.src = f["src"]
        p.dst_strides[:nd] = list(f["dst_strides"])
        p.src_strides[:nd] = list(f["src_strides"])
    else:
        p.strides[:nd] = list(f["strides"])
        p.pat_lo, p.pat_hi = f["pat_lo"], f["pat_hi"]
    if s.index == "i32":
        for k, d in enumerate(shape):
            p.magic[k], p.shift[k] = divider(d)
    return p


def grid_for(op: _plan.Launch, sms: int) -> tuple[int, int, int]:
    """The 1-D grid of a planned launch on a device with ``sms`` multiprocessors."""
    cap = min(_plan.MAX_GRID, BLOCKS_PER_SM * sms)
    s = op.spec
    if s.family == "transpose":
        f = op.fields
        t = transpose_tile(s)
        work = f["batch"] * (-(-f["rows"] // t)) * (-(-f["cols"] // t))
    else:
        per_block = BLOCK * (4 if s.variant == "c" else UNROLL)
        work = -(-op.n // per_block)
    return (max(1, min(cap, work)), 1, 1)


#: The loader's ``get_kernel``, bound by the first launch: ``import gpuarray`` loads neither
#: the kernel cache nor NVRTC's wrapper, pathlib or hashlib (memcpy/memset never need them).
_get_kernel: Any = None


def _launch(b, op: _plan.Launch, stream: int) -> None:
    global _get_kernel
    if _get_kernel is None:
        from ._loader import get_kernel as _get_kernel
    func, info = _get_kernel(op.spec, b)
    grid = grid_for(op, info.sms)
    block = (TILE, TILE_ROWS, 1) if op.spec.family == "transpose" else (BLOCK, 1, 1)
    b.launch_kernel(func, grid, block, 0, stream, [params_for(op)])

