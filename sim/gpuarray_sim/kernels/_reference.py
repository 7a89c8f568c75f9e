"""Reference implementations of the kernels: the oracle of their host build.

The simulator runs the CUDA source of ``kernels/`` compiled for the host
(:mod:`._host`); these NumPy implementations are what its differential test
compares that build against, what declares each launch's byte extents
(``accesses``, for the race detector and the host build's grants), and what
the simulator runs instead where no C++ compiler exists or
``GPUARRAY_SIM_KERNELS=reference``.

One :class:`gpuarray._driver._base.SimKernel` per :class:`KernelSpec`: it
reads the same ``ctypes`` parameter block as the CUDA kernel and performs the
same effect on memory with NumPy, through the simulator's bounds-checked
``mem.read``/``mem.write`` over each operand's byte extent (negative strides:
the extent starts before the pointer).  Fields the CUDA variant ignores are
ignored here too (variant ``d`` never reads the destination strides, ``c``
neither operand's strides), so a host-side mistake shows up in the simulator
as it would on a GPU.  Conversions are NumPy's ``astype``; for NaN, inf and
out-of-range float -> integer NumPy's result is platform-dependent and the
CUDA code's may differ (see ``kernels/ga_common.cuh``).

The launch configuration is checked (the CUDA kernels assume it): 256
threads for copy and fill, 32 x 8 for transpose, a 1-D grid, no dynamic
shared memory.  A wrong one raises ``CudaError(CUDA_ERROR_LAUNCH_FAILED)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpuarray._kernels import _dtypes
from gpuarray._kernels._specs import BLOCK, TILE, TILE_ROWS, KernelSpec, params_type, transpose_word
from gpuarray.errors import CudaError

__all__ = ["reference_kernel", "CopyReference", "FillReference", "TransposeReference"]


def _extent(shape, strides, itemsize: int) -> tuple[int, int]:
    """(offset of the lowest byte, number of bytes) of a strided footprint ((0, 0) if empty)."""
    if any(n <= 0 for n in shape):
        return 0, 0
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True)) + itemsize
    return lo, hi - lo


def _contig(shape, itemsize: int) -> tuple[int, ...]:
    out, acc = [], itemsize
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


class _Operand:
    """A strided view of simulated memory: read its extent, edit, write it back."""

    def __init__(self, ptr: int, shape, strides, dtype: np.dtype) -> None:
        self.ptr, self.shape, self.strides, self.dtype = int(ptr), tuple(shape), tuple(strides), dtype
        self.lo, self.nbytes = _extent(self.shape, self.strides, dtype.itemsize)

    def access(self, write: bool) -> tuple[int, int, bool]:
        return (self.ptr + self.lo, self.nbytes, write)

    def load(self, mem) -> tuple[np.ndarray, np.ndarray]:
        buf = np.asarray(mem.read(self.ptr + self.lo, self.nbytes), dtype=np.uint8)
        if not buf.flags.writeable:
            buf = buf.copy()
        view = np.ndarray(self.shape, self.dtype, buffer=buf, offset=-self.lo, strides=self.strides)
        return buf, view

    def store(self, mem, buf: np.ndarray) -> None:
        mem.write(self.ptr + self.lo, buf)


def _astype(values: np.ndarray, dcode: str, scode: str) -> np.ndarray:
    """``values.astype(dst)`` as the kernels define it, without warnings."""
    if dcode == scode:
        return values
    dt = _dtypes.code_dtype(dcode)
    with np.errstate(all="ignore"):
        if scode in ("c8", "c16") and dcode not in ("c8", "c16"):
            if dcode == "b1":
                return values != 0
            values = values.real  # NumPy's complex -> real, minus the ComplexWarning
        return values.astype(dt)


def _check_config(spec: KernelSpec, grid, block, shared_mem: int) -> None:
    want = (TILE, TILE_ROWS, 1) if spec.family == "transpose" else (BLOCK, 1, 1)
    if tuple(block) != want or tuple(grid)[1:] != (1, 1) or grid[0] < 1 or shared_mem != 0:
        raise CudaError(719, "cuLaunchKernel",
                        f"{spec.symbol} assumes block {want}, a 1-D grid and no dynamic "
                        f"shared memory; launched with grid {tuple(grid)} block {tuple(block)} "
                        f"shared {shared_mem}")


class _Reference:
    def __init__(self, spec: KernelSpec) -> None:
        self.spec = spec
        self.param_types = (params_type(spec.family, spec.ndim, spec.index),)

    def __repr__(self) -> str:
        return f"<reference kernel {self.spec.symbol}>"

    def operands(self, p) -> tuple[_Operand, _Operand | None]:
        raise NotImplementedError

    def accesses(self, params: Sequence[Any]) -> list[tuple[int, int, bool]]:
        """Byte ranges the launch touches: source extent (read), destination extent (write)."""
        dst, src = self.operands(params[0])
        out = [dst.access(True)]
        if src is not None:
            out.insert(0, src.access(False))
        return out


class CopyReference(_Reference):
    """Reference of ``ga_copy__*`` (every variant)."""

    def operands(self, p):
        s = self.spec
        nd = s.ndim
        shape: tuple[int, ...] = tuple(p.shape[:nd])
        dsz = _dtypes.code_itemsize(s.dst)
        ssz = _dtypes.code_itemsize(s.src)
        if s.variant == "c":
            shape = (int(p.n),)
            dst_strides: tuple[int, ...] = (dsz,)
            src_strides: tuple[int, ...] = (ssz,)
        else:
            src_strides = tuple(p.src_strides[:nd])
            dst_strides = _contig(shape, dsz) if s.variant == "d" else tuple(p.dst_strides[:nd])
            if math.prod(shape) != p.n:
                raise CudaError(719, "cuLaunchKernel",
                                f"{s.symbol}: n={p.n} but shape {shape} has {math.prod(shape)} elements")
        return (_Operand(p.dst, shape, dst_strides, _dtypes.code_dtype(s.dst)),
                _Operand(p.src, shape, src_strides, _dtypes.code_dtype(s.src)))

    def run(self, mem, grid, block, shared_mem, params) -> None:
        """Copy (and convert) every element, as the CUDA kernel does."""
        _check_config(self.spec, grid, block, shared_mem)
        dst, src = self.operands(params[0])
        if params[0].n <= 0:
            return
        _, sview = src.load(mem)
        values = _astype(sview, self.spec.dst, self.spec.src)
        dbuf, dview = dst.load(mem)
        dview[...] = values
        dst.store(mem, dbuf)


class TransposeReference(_Reference):
    """Reference of ``ga_transpose__*`` (both variants).

    The word variant (``w``) moves the same elements; like the CUDA kernel on
    a GPU, it fails with ``CUDA_ERROR_MISALIGNED_ADDRESS`` (716) when a
    pointer, pitch or batch stride is not a multiple of its word, which the
    planner must have ruled out.
    """

    def operands(self, p):
        s = self.spec
        dsz = _dtypes.code_itemsize(s.dst)
        ssz = _dtypes.code_itemsize(s.src)
        shape = (int(p.batch), int(p.rows), int(p.cols))
        return (_Operand(p.dst, shape, (p.dst_bstride, p.dst_pitch, dsz), _dtypes.code_dtype(s.dst)),
                _Operand(p.src, shape, (p.src_bstride, ssz, p.src_pitch), _dtypes.code_dtype(s.src)))

    def run(self, mem, grid, block, shared_mem, params) -> None:
        """Copy (and convert) every element of the batched transpose."""
        _check_config(self.spec, grid, block, shared_mem)
        p = params[0]
        if p.batch <= 0 or p.rows <= 0 or p.cols <= 0:
            return
        if self.spec.variant == "w":
            word = transpose_word(self.spec)
            fields: tuple[str, ...] = ("dst", "src", "dst_pitch", "src_pitch")
            if p.batch > 1:  # batch 0 only adds 0 * stride
                fields += ("dst_bstride", "src_bstride")
            bad = [f"{f}={getattr(p, f):#x}" for f in fields if getattr(p, f) % word]
            if bad:
                raise CudaError(716, "cuLaunchKernel",
                                f"{self.spec.symbol} moves {word}-byte words: misaligned "
                                + ", ".join(bad))
        dst, src = self.operands(p)
        _, sview = src.load(mem)
        values = _astype(sview, self.spec.dst, self.spec.src)
        dbuf, dview = dst.load(mem)
        dview[...] = values
        dst.store(mem, dbuf)


class FillReference(_Reference):
    """Reference of ``ga_fill__*``."""

    def operands(self, p):
        s = self.spec
        size = _dtypes.code_itemsize(s.dst)
        if s.variant == "c":
            shape, strides = (int(p.n),), (size,)
        else:
            shape, strides = tuple(p.shape[:s.ndim]), tuple(p.strides[:s.ndim])
        return _Operand(p.dst, shape, strides, _dtypes.code_dtype(s.dst)), None

    def run(self, mem, grid, block, shared_mem, params) -> None:
        """Store the pattern into every element."""
        _check_config(self.spec, grid, block, shared_mem)
        p = params[0]
        if p.n <= 0:
            return
        dst, _ = self.operands(p)
        size = dst.dtype.itemsize
        pattern = (int(p.pat_lo).to_bytes(8, "little") + int(p.pat_hi).to_bytes(8, "little"))[:size]
        dbuf, dview = dst.load(mem)
        dview[...] = np.frombuffer(pattern, dtype=dst.dtype)[0]
        dst.store(mem, dbuf)


_CLASSES = {"copy": CopyReference, "fill": FillReference, "transpose": TransposeReference}


def reference_kernel(spec: KernelSpec):
    """The simulator reference implementation of ``spec``."""
    return _CLASSES[spec.family](spec)
