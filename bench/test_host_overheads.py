"""Host time of the small things: interface export/import, views, tiny ops, allocation.

pytest-benchmark's columns are microseconds of host time per call; nothing
here waits for the GPU (the stream is synchronised, untimed, between rounds).
On the simulator only the export and view rows say anything about a GPU run:
the rest includes the simulator's bookkeeping.
"""

from __future__ import annotations

import os
import sys

import _impls
import numpy as np
import pytest
from _harness import BACKEND, FULL, SIM, SIZES, TARGETS, ctx, host, ids, peer, results_path

import gpuarray
from gpuarray._bench import host as _bench_host
from gpuarray._bench.exchange import exchange_cases, missing

SHAPE = (64, 64)
PEER_IMPLS = ["gpuarray", "cupy", "torch", "numba"]


class CAIOnly:
    """A foreign producer that exports only ``__cuda_array_interface__`` (a plain dict)."""

    def __init__(self, arr):
        self.__cuda_array_interface__ = dict(arr.__cuda_array_interface__)
        self._keep = arr


class DLPackOnly:
    """A foreign producer that exports only ``__dlpack__`` / ``__dlpack_device__``."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, **kwargs):
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


# --------------------------------------------------------------- CAI export
def test_cai_export_cached(benchmark):
    a = _impls.ones("gpuarray", SHAPE, np.float32)
    _ = a.__cuda_array_interface__   # fill the cache
    host(benchmark, suite="host", case="cai export cached", impl="gpuarray",
         op=lambda: a.__cuda_array_interface__, target=TARGETS["cai export cached"])


@pytest.mark.parametrize("impl", PEER_IMPLS)
def test_cai_export_uncached(benchmark, impl):
    a = _impls.ones(impl, SHAPE, np.float32)
    if impl == "gpuarray":
        def op():
            a._cai = None   # drop the per-array cache: the cost of a first export
            return a.__cuda_array_interface__
    else:
        def op():
            return a.__cuda_array_interface__
    host(benchmark, suite="host", case="cai export uncached", impl=impl, op=op,
         target=TARGETS["cai export uncached"],
         note="peers build the dictionary on every access")


# --------------------------------------------------------------- CAI import
def _producer(kind):
    if kind == "cai-dict":
        return CAIOnly(_impls.ones("gpuarray", SHAPE, np.float32))
    return _impls.ones(kind, SHAPE, np.float32)


def _importer(impl):
    if impl == "gpuarray":
        return gpuarray.as_cuda_array
    if impl == "numba":
        return peer("numba").as_cuda_array
    if impl == "cupy":
        return peer("cupy")[0].asarray
    if impl == "torch":
        torch = peer("torch")
        return lambda p: torch.as_tensor(p, device="cuda")
    raise ValueError(impl)


@pytest.mark.parametrize("producer, impl", [
    (p, i) for p in ("cai-dict", "cupy", "torch") for i in PEER_IMPLS if i != p])
def test_as_cuda_array(benchmark, producer, impl):
    imp = _importer(impl)
    p = _producer(producer)
    host(benchmark, suite="host", case=f"as_cuda_array({producer})", impl=impl,
         op=lambda: imp(p), target=TARGETS["as_cuda_array"],
         note="numba: numba.cuda.as_cuda_array; cupy: cupy.asarray; torch: torch.as_tensor")


# ------------------------------------------------------------------- DLPack
@pytest.mark.parametrize("impl", ["gpuarray", "cupy", "torch"])
def test_dlpack_export(benchmark, impl):
    a = _impls.ones(impl, SHAPE, np.float32)
    stream = ctx().stream.cai_value   # the consumer's stream is the producer's: no ordering work
    try:
        a.__dlpack__(stream=stream, max_version=(1, 0))
        op = lambda: a.__dlpack__(stream=stream, max_version=(1, 0))  # noqa: E731
        versioned = True
    except TypeError:   # a producer without DLPack 1.x keywords
        op = lambda: a.__dlpack__(stream=stream)  # noqa: E731
        versioned = False
    host(benchmark, suite="host", case="__dlpack__ export", impl=impl, op=op,
         target=TARGETS["__dlpack__"], versioned=versioned,
         note="the unconsumed capsule is destroyed inside the timing")


@pytest.mark.parametrize("producer, impl", [
    (p, i) for p in ("gpuarray", "cupy", "torch") for i in ("gpuarray", "cupy", "torch")
    if i != p or i == "gpuarray"])
def test_from_dlpack(benchmark, producer, impl):
    """gpuarray from gpuarray goes through a DLPack-only wrapper: a real export + import."""
    if impl == "gpuarray":
        imp = gpuarray.from_dlpack
    elif impl == "cupy":
        imp = peer("cupy")[0].from_dlpack
    else:
        imp = peer("torch").from_dlpack
    src = _impls.ones(producer, SHAPE, np.float32)
    p = DLPackOnly(src) if producer == "gpuarray" else src
    host(benchmark, suite="host", case=f"from_dlpack({producer})", impl=impl,
         op=lambda: imp(p), target=TARGETS["from_dlpack"],
         note="includes the producer's __dlpack__ and the release of the import")


# -------------------------------------------------------------------- views
VIEWS = {
    "a[1:]": lambda a: a[1:],
    "a[:, ::2]": lambda a: a[:, ::2],
    "a.T": lambda a: a.T,
    "reshape": lambda a: a.reshape(SHAPE[0] * SHAPE[1]),
}


@pytest.mark.parametrize("impl", PEER_IMPLS)
@pytest.mark.parametrize("view", list(VIEWS))
def test_view(benchmark, view, impl):
    a = _impls.ones(impl, SHAPE, np.float32)
    fn = VIEWS[view]
    host(benchmark, suite="host", case=f"view {view}", impl=impl, op=lambda: fn(a),
         target=TARGETS["view"])


# ---------------------------------------------------------------- tiny ops
@pytest.mark.parametrize("impl", ["raw", "gpuarray", "cupy", "torch"])
def test_fill_one_element(benchmark, impl):
    if impl == "raw":
        c = ctx()
        one = _impls.empty("gpuarray", (1,), np.float32)
        bits, ptr, h = int(np.float32(1.0).view(np.uint32)), one.ptr, c.stream.handle
        op = lambda: c.b.memset_d32_async(ptr, bits, 1, h)  # noqa: E731
    else:
        one = _impls.empty(impl, (1,), np.float32)
        op = _impls.fill(impl, one, np.float32(1.0))
    host(benchmark, suite="host", case="fill 1 element", impl=impl, op=op,
         target=TARGETS["fill 1 element"])


def _raw_alloc(nbytes, host_src=None):
    """Raw ``cuMemAlloc`` (+ ``cuMemcpyHtoDAsync`` from ``host_src``) + ``cuMemFree``, all timed.

    gpuarray's arrays die inside the timing (their free is timed), so the raw
    call's free is timed too.
    """
    c = ctx()
    b, h = c.b, c.stream.handle
    src = host_src.ctypes.data if host_src is not None else 0

    def op():
        p = b.mem_alloc(nbytes)
        if host_src is not None:
            b.memcpy_htod_async(p, src, nbytes, h)
        b.mem_free(p)

    return op, None


@pytest.mark.parametrize("impl", ["raw", "gpuarray", "cupy", "torch", "numba"])
@pytest.mark.parametrize("size", SIZES["small_h2d"], ids=ids(SIZES["small_h2d"]))
def test_to_device_small(benchmark, size, impl):
    h = np.ones(size, np.uint8)
    after = None
    if impl == "raw":
        op, after = _raw_alloc(size, h)
    elif impl == "gpuarray":
        s = ctx().stream
        op = lambda: gpuarray.to_device(h, stream=s)  # noqa: E731
    elif impl == "cupy":
        cp, _ = peer("cupy")
        op = lambda: cp.asarray(h)  # noqa: E731
    elif impl == "torch":
        torch = peer("torch")
        op = lambda: torch.as_tensor(h, device="cuda")  # noqa: E731
    else:
        cuda = peer("numba")
        op = lambda: cuda.to_device(h)  # noqa: E731
    host(benchmark, suite="host", case="to_device small", impl=impl, op=op, heavy=True,
         after_round=after, size=size, target=TARGETS["to_device small"],
         note="pageable source; raw = cuMemAlloc + cuMemcpyHtoDAsync + cuMemFree, all timed "
              "(gpuarray's array is freed inside the timing too)")


@pytest.mark.parametrize("impl", ["raw", "gpuarray", "cupy", "torch", "numba"])
def test_alloc(benchmark, impl):
    n = SIZES["alloc"]
    after = None
    if impl == "raw":
        op, after = _raw_alloc(n)
    elif impl == "gpuarray":
        s = ctx().stream
        op = lambda: gpuarray.empty(n, np.uint8, stream=s)  # noqa: E731
    else:
        op = lambda: _impls.empty(impl, (n,), np.uint8)  # noqa: E731
        op()
    host(benchmark, suite="host", case="alloc (default manager)", impl=impl, op=op,
         heavy=True, after_round=after, size=n,
         target="(no target for the default manager: cuMemAlloc + deferred free)",
         note="cupy and torch: their caching pools")


def test_alloc_pool(benchmark):
    if os.environ.get("GPUARRAY_MEMORY_MANAGER"):
        pytest.skip("GPUARRAY_MEMORY_MANAGER is set, so the manager cannot be switched to 'pool'")
    from gpuarray.memory import PoolMemoryManager, get_memory_manager, set_memory_manager

    cls = PoolMemoryManager
    previous = type(get_memory_manager())
    set_memory_manager("pool")
    try:
        n, s = SIZES["alloc"], ctx().stream
        host(benchmark, suite="host", case="alloc (pool manager)", impl="gpuarray",
             op=lambda: gpuarray.empty(n, np.uint8, stream=s), heavy=True, size=n,
             target=TARGETS["alloc pool"], manager=cls.__name__)
    finally:
        ctx().stream.synchronize()
        set_memory_manager(previous)


# ------------------------------------------------ next to PyTorch CPU and NumPy
def test_host_overheads_vs_peers(benchmark, capsys):
    """The issue's table: gpuarray next to PyTorch CPU and NumPy doing the same host work.

    One process, interleaved rounds, medians and ratios (``gpuarray._bench.host``);
    gpuarray's backend calls are counted and timed separately. The table is
    printed and written next to the JSON results; every row is also in
    ``extra_info``. pytest-benchmark's own columns time ``__dlpack__``.
    """
    torch, why = _bench_host.load_torch()
    c = ctx()
    rounds, number = (15, 2000) if FULL else (7, 400)
    cases = _bench_host.peer_cases(torch, tuple(SIZES["small_h2d"])) + exchange_cases(torch)
    rows = _bench_host.compare(cases, rounds=rounds, number=number,
                               after_round=c.stream.synchronize)
    table = _bench_host.format_peer_table(rows, BACKEND)
    if torch is None:
        table += f"\n\nPyTorch rows missing: {why}"
    for reason in missing(torch):
        table += f"\n- exchange-table rows missing: {reason}"
    path = results_path("host-peers", ".md")
    path.write_text(table + "\n")
    with capsys.disabled():
        sys.stdout.write("\n" + table + f"\n(written to {path})\n")
    a = _impls.ones("gpuarray", SHAPE, np.float32)
    host(benchmark, suite="host", case="vs peers (__dlpack__ timed)", impl="gpuarray",
         op=lambda: a.__dlpack__(max_version=(1, 0)), target="see extra_info rows",
         rows=[{"case": r.case, "us": r.us, "spread": r.spread, "goal": r.goal,
                "goal_vs": r.goal_vs, "ratio": r.ratio(), "backend_calls": r.backend_calls,
                "raw_backend_calls": r.raw_backend_calls,
                "backend_us": r.backend_us, "library_us": r.library_us,
                "meets_goal": r.meets_goal()} for r in rows],
         simulator_note="sim: none of these ops reaches the backend except as_cuda_array "
                        "(one pointer query) and to_device" if SIM else "")
