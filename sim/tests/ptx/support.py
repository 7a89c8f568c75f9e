"""Helpers of the PTX executor tests: run a PTX entry on a fresh simulator, read results."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
from gpuarray_sim import SimBackend

LEGACY = 1
FIXTURES = Path(__file__).with_name("fixtures")

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"


def fixture(name: str) -> str:
    """The text of ``sim/tests/ptx/fixtures/<name>.ptx``."""
    return (FIXTURES / f"{name}.ptx").read_text()


def backend() -> SimBackend:
    """A fresh simulator with its primary context current."""
    b = SimBackend()
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    return b


def upload(b: SimBackend, arr: np.ndarray) -> int:
    """A device copy of ``arr``; its address."""
    arr = np.ascontiguousarray(arr)
    d = b.mem_alloc(max(arr.nbytes, 1))
    if arr.nbytes:
        b.memcpy_htod_async(d, arr.ctypes.data, arr.nbytes, LEGACY)
    return d


def download(b: SimBackend, d: int, n: int, dtype) -> np.ndarray:
    """``n`` elements of ``dtype`` at device address ``d`` (synchronous)."""
    out = np.zeros(n, dtype)
    if out.nbytes:
        b.memcpy_dtoh_async(out.ctypes.data, d, out.nbytes, LEGACY)
    return out


def launch(b: SimBackend, ptx: str, name: str, params, grid=(1, 1, 1), block=(1, 1, 1),
           shared: int = 0, module: int | None = None) -> int:
    """Load ``ptx`` (unless ``module`` is given), launch entry ``name``, synchronise; the module."""
    if module is None:
        module = b.module_load_data(ptx.encode() + b"\0")
    f = b.module_get_function(module, name)
    b.launch_kernel(f, grid, block, shared, LEGACY, list(params))
    b.ctx_synchronize()
    return module


def u64(x: int) -> ctypes.c_uint64:
    return ctypes.c_uint64(x)
