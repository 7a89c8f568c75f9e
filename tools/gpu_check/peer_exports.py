#!/usr/bin/env python3
"""What the peer libraries export, as the GPU run's log records it (``peer-exports`` step).

An interop failure on a GPU is either gpuarray's or the peer's; this step
writes down the peer's side so the log can tell which.  For each peer present
(CuPy, PyTorch, JAX, numba-cuda) and a few dtypes and layouts it prints, one
line each, without consuming anything:

- ``cai``: the ``__cuda_array_interface__`` dict, plus the first bytes at its
  ``data`` pointer copied to the host with the driver (``cuMemcpyDtoH`` after
  synchronising the context), and the peer's own pointer where it has one;
- ``dlpack``: the fields of an unconsumed ``__dlpack__(max_version=(1, 0))``
  capsule (name, version, device, dtype, shape, strides in elements,
  byte_offset, data), the capsule then dropped unconsumed (its deleter runs).

Used on the GPU machine only (``tools/gpu_check/run.py``); standard library,
NumPy and gpuarray.  Exit status 0 unless gpuarray itself cannot start: a
peer that fails is printed as such.
"""

from __future__ import annotations

import ctypes
import importlib
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_api = ctypes.pythonapi
_GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", _api))
_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))

DTYPES = ("bool", "uint8", "int16", "float16", "int32", "float32", "int64", "float64",
          "complex128")
HOST = np.array([[85, 64, 51, 27], [31, 5, 8, 2], [18, 81, 65, 91]])


def capsule_fields(cap: Any) -> dict:
    """The fields of an unconsumed DLPack capsule."""
    from gpuarray.interop import _dlpack_capsule as dl

    name = _GetName(cap)
    cls = dl.DLManagedTensorVersioned if name == b"dltensor_versioned" else dl.DLManagedTensor
    m = cls.from_address(_GetPointer(cap, name))
    t = m.dl_tensor
    out = {"name": name.decode(), "device": (t.device.device_type, t.device.device_id),
           "dtype": (t.dtype.code, t.dtype.bits, t.dtype.lanes), "ndim": t.ndim,
           "shape": tuple(t.shape[:t.ndim]) if t.shape else None,
           "strides": tuple(t.strides[:t.ndim]) if t.strides else None,
           "byte_offset": t.byte_offset, "data": hex(t.data or 0)}
    if name == b"dltensor_versioned":
        out["version"] = (m.version.major, m.version.minor)
        out["flags"] = m.flags
    return out


def device_bytes(ptr: int, n: int, stream: Any) -> str:
    """``n`` bytes at device address ``ptr``: read on the legacy stream first (ordered only
    after the export's ``stream``, as a consumer does), then after a context sync (after
    all work); both when they differ -- the producer's data was not ready for the first."""
    from gpuarray._driver import get_backend

    b = get_backend()
    first, last = np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    if isinstance(stream, int) and stream > 2:
        b.stream_synchronize(stream)
    b.memcpy_dtoh_async(first.ctypes.data, ptr, n, 1)
    b.stream_synchronize(1)
    b.ctx_synchronize()
    b.memcpy_dtoh_async(last.ctypes.data, ptr, n, 1)
    b.ctx_synchronize()
    if (first == last).all():
        return last.tobytes().hex(" ")
    return f"{first.tobytes().hex(' ')} (consumer's read), {last.tobytes().hex(' ')} (after all work)"


def _peers() -> dict[str, Any]:
    """name -> (make(host array) -> peer array, pointer(peer array) -> int or None)."""
    out: dict[str, Any] = {}
    try:
        cp = importlib.import_module("cupy")
        cp.cuda.runtime.getDeviceCount()
        out["cupy"] = (cp.asarray, lambda x: x.data.ptr)
    except Exception as e:
        print(f"peer-exports: cupy: not usable ({type(e).__name__}: {e})")
    try:
        torch = importlib.import_module("torch")
        if torch.cuda.is_available():
            out["torch"] = (lambda h: torch.from_numpy(np.ascontiguousarray(h)).cuda(),
                            lambda x: x.data_ptr())
    except Exception as e:
        print(f"peer-exports: torch: not usable ({type(e).__name__}: {e})")
    try:
        jax = importlib.import_module("jax")
        gpu = jax.devices("gpu")[0]
        print(f"peer-exports: jax {jax.__version__}, x64 "
              f"{'enabled' if jax.config.jax_enable_x64 else 'disabled'}")
        out["jax"] = (lambda h: jax.device_put(np.ascontiguousarray(h), gpu),
                      lambda x: x.unsafe_buffer_pointer())
    except Exception as e:
        print(f"peer-exports: jax: not usable ({type(e).__name__}: {e})")
    return out


def layouts(x: Any) -> dict[str, Any]:
    out = {"contiguous": x}
    for name, fn in (("reversed", lambda a: a[::-1]), ("transposed", lambda a: a.T),
                     ("columns", lambda a: a[:, ::2])):
        try:
            out[name] = fn(x)
        except Exception as e:
            out[name] = e
    return out


def report(peer: str, make: Any, pointer: Any) -> None:
    for dtype in DTYPES:
        try:
            x = make(HOST.astype(dtype))
        except Exception as e:
            print(f"{peer} {dtype}: cannot make ({type(e).__name__}: {e})")
            continue
        for layout, v in layouts(x).items():
            head = f"{peer} {dtype} {layout}"
            if isinstance(v, Exception):
                print(f"{head}: no such view ({type(v).__name__})")
                continue
            try:
                cai = dict(v.__cuda_array_interface__)
                ptr = int(cai["data"][0])
                own = pointer(v)
                item = np.dtype(cai["typestr"]).itemsize
                # a dense export: its first bytes; a strided view: its first element only
                n = min(16, item * int(np.prod(cai["shape"]))) if cai.get("strides") is None else item
                print(f"{head} cai: {cai}; peer pointer {hex(own) if own is not None else None}; "
                      f"bytes at data: {device_bytes(ptr, n, cai.get('stream')) if ptr and n else '-'}")
            except Exception as e:
                print(f"{head} cai: {type(e).__name__}: {e}")
            try:
                cap = v.__dlpack__(max_version=(1, 0))
                print(f"{head} dlpack: {capsule_fields(cap)}")
                del cap
            except Exception as e:
                print(f"{head} dlpack: {type(e).__name__}: {e}")


def main() -> int:
    import gpuarray

    gpuarray.to_device(np.zeros(1)).copy_to_host()  # the context exists and is current
    for peer, (make, pointer) in _peers().items():
        try:
            report(peer, make, pointer)
        except Exception:
            print(f"peer-exports: {peer} failed:\n{traceback.format_exc()}")
    print("peer-exports: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
