"""The same operation in each library: arrays, views, copies, all on the legacy default stream.

``impl`` is one of ``gpuarray``, ``cupy``, ``torch``, ``numba``; a peer that
cannot run skips the test with the reason (``_harness.peer``).  Each library
allocates its own memory with its own allocator; nothing is shared between
libraries, so a broken interop path cannot distort another column.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import ctx, peer

import gpuarray


def torch_dtype(torch: Any, dtype: Any) -> Any:
    return {"uint8": torch.uint8, "int32": torch.int32, "float16": torch.float16,
            "float32": torch.float32, "float64": torch.float64,
            "complex128": torch.complex128}[np.dtype(dtype).name]


def ones(impl: str, shape: Any, dtype: Any) -> Any:
    """A device array of ones."""
    if impl == "gpuarray":
        return gpuarray.ones(shape, dtype, stream=ctx().stream)
    if impl == "cupy":
        cp, _ = peer("cupy")
        return cp.ones(shape, dtype)
    if impl == "torch":
        torch = peer("torch")
        return torch.ones(shape, dtype=torch_dtype(torch, dtype), device="cuda")
    if impl == "numba":
        cuda = peer("numba")
        d = cuda.device_array(shape, dtype)
        d.copy_to_device(np.ones(shape, dtype))
        return d
    raise ValueError(impl)


def empty(impl: str, shape: Any, dtype: Any) -> Any:
    """An uninitialised device array."""
    if impl == "gpuarray":
        return gpuarray.empty(shape, dtype, stream=ctx().stream)
    if impl == "cupy":
        cp, _ = peer("cupy")
        return cp.empty(shape, dtype)
    if impl == "torch":
        torch = peer("torch")
        return torch.empty(shape, dtype=torch_dtype(torch, dtype), device="cuda")
    if impl == "numba":
        return peer("numba").device_array(shape, dtype)
    raise ValueError(impl)


def copy_into(impl: str, dst: Any, src: Any) -> Callable[[], Any]:
    """``dst[...] = src`` (any layout, broadcasting and casting) as the library spells it."""
    if impl == "gpuarray":
        return lambda: dst.copy_to_device(src)
    if impl == "cupy":
        cp, _ = peer("cupy")
        return lambda: cp.copyto(dst, src, casting="unsafe")
    if impl == "torch":
        return lambda: dst.copy_(src)
    if impl == "numba":
        cuda = peer("numba")
        s = cuda.legacy_default_stream()
        return lambda: dst.copy_to_device(src, stream=s)
    raise ValueError(impl)


def host_buffer(impl: str, nbytes: int, pinned: bool) -> Any:
    """A host buffer of ``nbytes`` uint8, page-locked by the library itself when ``pinned``."""
    if not pinned:
        if impl == "torch":
            return peer("torch").ones(nbytes, dtype=peer("torch").uint8)
        return np.ones(nbytes, np.uint8)
    if impl == "gpuarray":
        h = gpuarray.pinned_array(nbytes, np.uint8)
    elif impl == "cupy":
        _, cpx = peer("cupy")
        h = cpx.empty_pinned(nbytes, np.uint8)
    elif impl == "torch":
        torch = peer("torch")
        return torch.ones(nbytes, dtype=torch.uint8).pin_memory()
    elif impl == "numba":
        h = peer("numba").pinned_array(nbytes, np.uint8)
    else:
        raise ValueError(impl)
    h[:] = 1
    return h


def transfer(impl: str, direction: str, pinned: bool, dev: Any, host: Any) -> Callable[[], Any]:
    """One host-to-device (``h2d``) or device-to-host (``d2h``) copy into existing buffers.

    Page-locked copies are asynchronous (each library's async form); pageable
    ones use each library's ordinary (synchronous) form.
    """
    s = ctx().stream
    if impl == "gpuarray":
        if direction == "h2d":
            return lambda: dev.copy_to_device(host)
        if pinned:
            return lambda: dev.copy_to_host(host, stream=s)
        return lambda: dev.copy_to_host(host)
    if impl == "cupy":
        cp, _ = peer("cupy")
        null = cp.cuda.Stream.null
        if direction == "h2d":
            return (lambda: dev.set(host, stream=null)) if pinned else (lambda: dev.set(host))
        if not pinned:
            return lambda: dev.get(out=host)
        try:
            cp.asnumpy(dev, stream=null, out=host, blocking=False)
        except TypeError:  # CuPy before 13: a stream alone makes it asynchronous
            return lambda: cp.asnumpy(dev, stream=null, out=host)
        return lambda: cp.asnumpy(dev, stream=null, out=host, blocking=False)
    if impl == "torch":
        if direction == "h2d":
            return lambda: dev.copy_(host, non_blocking=pinned)
        return lambda: host.copy_(dev, non_blocking=pinned)
    if impl == "numba":
        ns = peer("numba").legacy_default_stream()
        if direction == "h2d":
            return (lambda: dev.copy_to_device(host, stream=ns)) if pinned else (
                lambda: dev.copy_to_device(host))
        return (lambda: dev.copy_to_host(host, stream=ns)) if pinned else (
            lambda: dev.copy_to_host(host))
    raise ValueError(impl)


def fill(impl: str, arr: Any, value: Any) -> Callable[[], Any]:
    """``arr.fill(value)`` as the library spells it."""
    if impl in ("gpuarray", "cupy"):
        return lambda: arr.fill(value)
    if impl == "torch":
        v = value.item() if isinstance(value, np.generic) else value   # a Python scalar
        return lambda: arr.fill_(v)
    raise ValueError(impl)
