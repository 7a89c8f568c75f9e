"""Allocation cost: one allocate + free cycle, per memory manager, next to CuPy's and PyTorch's pools.

Each call allocates ``size`` bytes and drops them at once, so the host time
per call is the cost of an allocation *and* its free (for the default
manager, a tenth of a deferred flush that waits for the device).  Two cases,
each with the raw driver pair as its ``raw`` row:

- ``alloc+free (cuMemAlloc)``: the default manager, against ``cuMemAlloc`` +
  ``cuMemFree``;
- ``alloc+free (pool)``: the stream-ordered managers -- ``pool`` and the CuPy,
  RMM and PyTorch plugins -- against ``cuMemAllocAsync`` + ``cuMemFreeAsync``,
  with CuPy's pool (``cupy.cuda.alloc``) and PyTorch's caching allocator
  (``caching_allocator_alloc`` / ``_delete``) used directly as peers.

Everything runs on the legacy default stream.  The plugins and the peers need
their library and a GPU; on the simulator they skip (the numbers there are the
simulator's host overheads anyway, and sizes are small).
"""

from __future__ import annotations

import importlib
import os

import pytest
from _harness import FULL, TARGETS, KiB, MiB, ctx, host, ids, peer

import gpuarray
from gpuarray import memory

SIZES = [256, 64 * KiB, 1 * MiB, 16 * MiB] if FULL else [256, 64 * KiB]
POOL_MANAGERS = ["pool", "cupy", "rmm", "torch"]


@pytest.fixture
def manager(request):
    """Select the memory manager named by the (indirect) parameter, then restore the previous one."""
    name = request.param
    if gpuarray._config.get().memory_manager:
        pytest.skip("GPUARRAY_MEMORY_MANAGER is set: managers cannot be switched")
    if name in ("cupy", "rmm", "torch"):
        if name != "rmm":
            peer(name)  # skips with the reason (simulator, not installed, no GPU)
        elif _driver_name() == "sim":
            pytest.skip("the rmm plugin needs RMM and a GPU (GPUARRAY_BACKEND=sim)")
        try:
            importlib.import_module(f"gpuarray.memory.plugins.{name}")
        except ImportError as e:
            pytest.skip(str(e))
    if os.environ.get("GPUARRAY_MEMORY_MANAGER"):
        pytest.skip(f"GPUARRAY_MEMORY_MANAGER is set, so the manager cannot be switched to {name!r}")
    previous = type(memory.get_memory_manager())
    gpuarray.set_memory_manager(name)
    try:
        yield memory.get_memory_manager()
    finally:
        ctx().stream.synchronize()
        gpuarray.set_memory_manager(previous)


def _driver_name() -> str:
    return gpuarray._driver.backend_name()


def _cycle(n: int):
    def op() -> None:
        memory.allocate(n)  # dropped at once: allocation + free

    return op


@pytest.mark.parametrize("size", SIZES, ids=ids(SIZES))
def test_alloc_free_raw_sync(benchmark, size):
    c = ctx()
    b = c.b
    host(benchmark, suite="alloc", case="alloc+free (cuMemAlloc)", impl="raw",
         op=lambda: b.mem_free(b.mem_alloc(size)), heavy=True, size=size,
         note="cuMemAlloc + cuMemFree")


@pytest.mark.parametrize("manager", ["default"], indirect=True)
@pytest.mark.parametrize("size", SIZES, ids=ids(SIZES))
def test_alloc_free_default(benchmark, size, manager):
    host(benchmark, suite="alloc", case="alloc+free (cuMemAlloc)", impl="gpuarray",
         op=_cycle(size), heavy=True, size=size, manager=type(manager).__name__,
         note="deferred frees: every 11th call flushes 11 cuMemFree")


@pytest.mark.parametrize("size", SIZES, ids=ids(SIZES))
def test_alloc_free_raw_async(benchmark, size):
    c = ctx()
    b, h = c.b, c.stream.handle
    with c.dev.activate():
        b.mempool_set_release_threshold(c.dev.id, 2**64 - 1)
    host(benchmark, suite="alloc", case="alloc+free (pool)", impl="raw",
         op=lambda: b.mem_free_async(b.mem_alloc_async(size, h), h), heavy=True, size=size,
         note="cuMemAllocAsync + cuMemFreeAsync on the legacy stream, threshold raised")


@pytest.mark.parametrize("manager", POOL_MANAGERS, indirect=True)
@pytest.mark.parametrize("size", SIZES, ids=ids(SIZES))
def test_alloc_free_stream_ordered(benchmark, size, manager):
    name = type(manager).__name__
    assert name != "DefaultMemoryManager"
    host(benchmark, suite="alloc", case="alloc+free (pool)", impl=f"gpuarray-{name}",
         op=_cycle(size), heavy=True, size=size, manager=name,
         target=TARGETS.get("alloc pool", ""))


@pytest.mark.parametrize("size", SIZES, ids=ids(SIZES))
def test_alloc_free_cupy_pool(benchmark, size):
    cp, _ = peer("cupy")
    host(benchmark, suite="alloc", case="alloc+free (pool)", impl="cupy",
         op=lambda: cp.cuda.alloc(size), heavy=True, size=size,
         note="cupy.cuda.alloc from the default memory pool, dropped")


@pytest.mark.parametrize("size", SIZES, ids=ids(SIZES))
def test_alloc_free_torch_caching_allocator(benchmark, size):
    torch = peer("torch")
    cuda = torch.cuda
    host(benchmark, suite="alloc", case="alloc+free (pool)", impl="torch",
         op=lambda: cuda.caching_allocator_delete(cuda.caching_allocator_alloc(size)),
         heavy=True, size=size, note="torch.cuda.caching_allocator_alloc + _delete")
