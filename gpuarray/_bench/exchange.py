"""Benchmark rows for the DLPack C exchange table (issue 24), for ``host.compare``.

Two uses of the table, each timed in one process against its alternative:

* a tvm-ffi call (``testing.nop``, the C consumer the table is for) with 3
  gpuarray arrays, against the same call with 3 PyTorch CPU tensors (their
  table) and 3 NumPy arrays (their C ``__dlpack__``), and against 3 ints
  (what the call costs with no tensors at all);
* gpuarray importing a PyTorch tensor through PyTorch's table, against the
  same import through ``__dlpack__`` (the table ignored): the import alone
  (``host_array_from_dlpack``, the step ``to_device`` and ``asarray`` take
  for a CPU tensor) and ``from_dlpack`` (which, for a CPU tensor, also
  copies it to the device).

The same tensors are used on both sides of the import rows: two subclasses
of ``torch.Tensor`` with PyTorch's ``__torch_function__`` dispatch off, one
that inherits the table and one that hides it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .host import SHAPE, Case

__all__ = ["exchange_cases", "missing"]


def _tvm_ffi() -> tuple[Any, str]:
    try:
        import tvm_ffi
    except Exception as e:  # ImportError, or a broken installation
        return None, f"apache-tvm-ffi is not installed ({type(e).__name__}: {e})"
    return tvm_ffi, ""


def missing(torch: Any) -> list[str]:
    """Why rows of :func:`exchange_cases` are absent (empty when all are there)."""
    import gpuarray

    why = []
    if not hasattr(gpuarray.DeviceNDArray, "__dlpack_c_exchange_api__"):
        why.append("gpuarray publishes no exchange table (the ctypes DLPack core is in use)")
    tvm_ffi, reason = _tvm_ffi()
    if tvm_ffi is None:
        why.append(f"tvm-ffi rows: {reason}")
    if torch is None:
        why.append("PyTorch rows: PyTorch is not installed")
    return why


def exchange_cases(torch: Any) -> list[Case]:
    """``(case, peer note, goal, goal's peer, {library: op})`` rows of the exchange table.

    Rows whose libraries are missing are left out (:func:`missing` says why).
    """
    import gpuarray
    from gpuarray.interop._dlpack import host_array_from_dlpack
    from gpuarray.interop._dlpack_capsule import exchange_api_of

    if exchange_api_of(gpuarray.DeviceNDArray) is None:
        return []
    cases: list[Case] = []
    stream = gpuarray.legacy_default_stream()
    arrays = [gpuarray.zeros(SHAPE, np.float32, stream=stream) for _ in range(3)]
    tensors = [torch.zeros(SHAPE) for _ in range(3)] if torch is not None else None
    nds = [np.zeros(SHAPE, np.float32) for _ in range(3)]
    tvm_ffi, _ = _tvm_ffi()
    if tvm_ffi is not None:
        nop = tvm_ffi.get_global_func("testing.nop")
        a, b, c = arrays
        n0, n1, n2 = nds
        ops = {"gpuarray": lambda: nop(a, b, c), "numpy": lambda: nop(n0, n1, n2)}
        if tensors is not None:
            t0, t1, t2 = tensors
            ops["torch"] = lambda: nop(t0, t1, t2)
        cases.append((
            "tvm-ffi nop(3 arrays)",
            "64x64 float32 arrays of each library through its C exchange table (NumPy: its C "
            "__dlpack__); for gpuarray's (CUDA device memory) tvm-ffi also sets and restores "
            "its stream around the call, which it skips for CPU tensors",
            1.0, "torch", ops))
        cases.append((
            "tvm-ffi nop(3 arrays) over nop(1, 2, 3)",
            "raw: the same tvm-ffi call with 3 ints", None, "raw",
            {"gpuarray": lambda: nop(a, b, c), "raw": lambda: nop(1, 2, 3)}))
    if torch is not None and exchange_api_of(torch.Tensor) is not None:
        off = torch._C._disabled_torch_function_impl

        class WithTable(torch.Tensor):
            __torch_function__ = off

        class NoTable(torch.Tensor):
            __torch_function__ = off
            __dlpack_c_exchange_api__ = None  # gpuarray takes __dlpack__

        base = torch.zeros(SHAPE)
        tab, dlp = base.as_subclass(WithTable), base.as_subclass(NoTable)
        note = ("PyTorch CPU column: gpuarray's same import of the same tensor through "
                "PyTorch's __dlpack__ (its exchange table hidden)")
        cases.append((
            "import a torch CPU tensor (table vs __dlpack__)",
            note + "; host_array_from_dlpack, the zero-copy step of to_device/asarray", 0.5,
            "torch", {"gpuarray": lambda: host_array_from_dlpack(tab),
                      "torch": lambda: host_array_from_dlpack(dlp)}))
        cases.append((
            "from_dlpack(torch CPU tensor) (table vs __dlpack__)",
            note + "; a CPU tensor is copied to the device, which both sides pay", None, "torch",
            {"gpuarray": lambda: gpuarray.from_dlpack(tab),
             "torch": lambda: gpuarray.from_dlpack(dlp)}))
    return cases
