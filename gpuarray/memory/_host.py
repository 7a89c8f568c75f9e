"""Page-locked host arrays: ``pinned_array``, ``mapped_array`` and ``pinned``.

The arrays are ordinary NumPy arrays whose buffer is page-locked memory from
the active memory manager; the buffer object keeps the manager's
``PinnedMemory`` alive, so the memory is released when the last NumPy view of
it dies.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import Any, Literal, cast

import numpy as np

from ._manager import host_alloc, host_pin
from ._pointer import PinnedMemory

__all__ = ["pinned_array", "mapped_array", "pinned", "host_array_over"]

_Order = Literal["K", "A", "C", "F"]


def host_array_over(mem: PinnedMemory, shape, dtype, strides=None, order: str = "C") -> np.ndarray:
    """A NumPy array over page-locked memory ``mem`` that keeps ``mem`` alive."""
    buf = (ctypes.c_uint8 * max(mem.size, 1)).from_address(mem.host_pointer)
    # The ctypes buffer is the array's base: it owns mem.  ctypes instances
    # take new attributes, which typeshed cannot declare.
    buf._gpuarray_memory = mem  # type: ignore[attr-defined]
    # A ctypes array exports the buffer protocol; NumPy's stub lists only
    # some buffer types.  NumPy validates ``order`` (public API: a str).
    return np.ndarray(shape, dtype=dtype, buffer=buf,  # type: ignore[arg-type]
                      strides=strides, order=cast(_Order, order))


def _nbytes(shape, dtype, strides) -> tuple[tuple[int, ...], np.dtype, int]:
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any((not isinstance(n, (int, np.integer))) or n < 0 for n in shape):
        raise ValueError(f"shape {shape!r} must be non-negative integers")
    if strides is None:
        return shape, dtype, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(strides) != len(shape):
        raise ValueError(f"strides {strides!r} do not match shape {shape!r}")
    if any(s < 0 for s in strides):
        raise ValueError(f"strides {strides!r} must be non-negative for a new array")
    if 0 in shape:
        return shape, dtype, 0
    return shape, dtype, sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + dtype.itemsize


def pinned_array(shape, dtype=np.float64, strides=None, order: str = "C") -> np.ndarray:
    """Allocate a NumPy array in page-locked host memory.

    Copies between it and the device are asynchronous and fast.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : data-type, default float64
    strides : tuple of int, optional
        Byte strides.
    order : {"C", "F"}

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> h = gpuarray.pinned_array((2, 3), dtype=np.float32)   # doctest: +SKIP
    """
    shape, dtype, nbytes = _nbytes(shape, dtype, strides)
    mem = host_alloc(nbytes)
    return host_array_over(mem, shape, dtype, strides, order)


def mapped_array(shape, dtype=np.float64, strides=None, order: str = "C", portable: bool = False,
                 wc: bool = False) -> np.ndarray:
    """Allocate a NumPy array in page-locked host memory mapped into the device.

    Kernels can read and write it through its device address
    (``gpuarray.asarray(h)`` gives a zero-copy device view).

    Parameters
    ----------
    shape : int or tuple of int
    dtype : data-type, default float64
    strides : tuple of int, optional
    order : {"C", "F"}
    portable : bool
        Pinned for every context.
    wc : bool
        Write-combined (fast for the device to read, slow for the host to read).

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> h = gpuarray.mapped_array(16, dtype=np.int32)   # doctest: +SKIP
    """
    shape, dtype, nbytes = _nbytes(shape, dtype, strides)
    mem = host_alloc(nbytes, mapped=True, portable=portable, wc=wc)
    return host_array_over(mem, shape, dtype, strides, order)


@contextlib.contextmanager
def pinned(*arrays: Any) -> Iterator[None]:
    """Page-lock the memory of NumPy arrays for the duration of the block.

    Parameters
    ----------
    *arrays : numpy.ndarray
        Each must own or view host memory; read-only arrays are allowed.

    Raises
    ------
    TypeError
        If an argument is not a NumPy array.

    Examples
    --------
    >>> h = np.zeros(1 << 20)
    >>> with gpuarray.pinned(h):            # doctest: +SKIP
    ...     d = gpuarray.to_device(h)        # asynchronous copy
    """
    pins = []
    try:
        for a in arrays:
            if not isinstance(a, np.ndarray):
                raise TypeError(f"pinned() takes NumPy arrays, got {type(a).__name__}")
            if a.nbytes == 0:
                continue
            # np.byte_bounds is NumPy 1.x only; mypy checks against NumPy 2's stubs.
            lo, hi = np.lib.array_utils.byte_bounds(a) if hasattr(np.lib, "array_utils") \
                else np.byte_bounds(a)  # type: ignore[attr-defined]
            pins.append(host_pin(a, lo, hi - lo))
        yield
    finally:
        for p in pins:
            p.free()
