"""The benchmark harness: sizes, raw driver baselines, peers, and the two runners.

Conventions (bench/README.md explains them for readers of the results):

- Everything runs on ONE stream, the legacy default stream: gpuarray arrays
  are bound to it, CuPy, PyTorch and Numba use their default (legacy) stream,
  and the raw driver calls get its handle.  GPU time comes from two timing
  events recorded on it around ``reps`` operations.
- :func:`bandwidth` runs ``op`` through ``benchmark.pedantic`` with
  ``iterations=reps``: pytest-benchmark's own columns are then the HOST time
  of one call (enqueue only; the wait is in the untimed teardown), while
  ``extra_info`` carries the GPU time per operation (events), the host time
  per operation including completion, the bandwidth and the ratio to the raw
  driver call measured in this process (``baseline_ms``).
- :func:`host` runs ``op`` with ``iterations`` calls per round: the columns
  are host microseconds per call.
- The quick/full switch is ``gpuarray._bench.bench_mode()``
  (``GPUARRAY_BENCH_MODE``); every size below is looked up through it.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from gpuarray_sim import standin as _standin

import gpuarray
from gpuarray import _bench, _driver
from gpuarray._bench import EventClock, GiB, KiB, MiB, Stats, fmt_bytes  # noqa: F401 (re-exported)

MODE = _bench.bench_mode()
BACKEND = _driver.backend_name()
SIM = BACKEND == "sim"
# The stand-in driver (``python -m gpuarray standin -- ...``): the cuda backend
# over the simulator, so neither GPU sizes nor the peers' own CUDA make sense.
STANDIN = BACKEND == "cuda" and _standin.active()
GPU = not SIM and not STANDIN
FULL = MODE == "full"

# ------------------------------------------------------------------- sizes
# PERF.md's sizes in full mode; tiny ones in quick mode (the simulator copies
# on the CPU and the suite must stay well under a minute there), except on a
# GPU, where quick mode (make gpu-check) measures each bandwidth case once at
# its PERF.md target size (>= 4x the L2 cache), so its ratios are the ones
# PERF.md's targets speak of, in about a minute.
_SIZES: dict[str, dict[str, Any]] = {
    "quick": {
        "transfer": [8, 4 * KiB, 64 * KiB],
        "copy": [4 * KiB, 64 * KiB],
        "fill_big": 64 * KiB,
        "fill_sweep": [4 * KiB, 64 * KiB],
        "strided": (64, 96),                  # f32 source of the slice cases
        "transpose": {"f32": (48, 80), "f16": (80, 48), "u8": (96, 64)},
        "permute": (2, 8, 6, 10),             # N, C, H, W
        "astype": 16 * KiB,                   # elements
        "alloc_copy": (64, 96),
        "small_h2d": [8, 512, 4 * KiB],
        "alloc": 64 * KiB,
    },
    "quick-gpu": {
        "transfer": [8, 256 * MiB],
        "copy": [1 * GiB],
        "fill_big": 1 * GiB,
        "fill_sweep": [1 * GiB],
        "strided": (16384, 8192),             # 512 MiB f32
        "transpose": {"f32": (8192, 8192), "f16": (16384, 8192), "u8": (32768, 8192)},
        "permute": (32, 256, 56, 56),
        "astype": 64 * 1024 * 1024,           # 256 MiB of f32, 512 MiB of f64
        "alloc_copy": (8192, 8192),
        "small_h2d": [8, 4 * KiB],
        "alloc": 1 * MiB,
    },
    "full": {
        "transfer": [8, 4 * KiB, 256 * KiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB],
        "copy": [4 * KiB, 256 * KiB, 4 * MiB, 64 * MiB, 256 * MiB, 1 * GiB],
        "fill_big": 1 * GiB,
        "fill_sweep": [4 * KiB, 256 * KiB, 4 * MiB, 64 * MiB, 256 * MiB, 1 * GiB],
        "strided": (16384, 8192),             # 512 MiB f32
        "transpose": {"f32": (8192, 8192), "f16": (16384, 8192), "u8": (32768, 8192)},
        "permute": (32, 256, 56, 56),
        "astype": 64 * 1024 * 1024,           # 256 MiB of f32, 512 MiB of f64
        "alloc_copy": (8192, 8192),
        "small_h2d": [8, 64, 512, 4 * KiB],
        "alloc": 1 * MiB,
    },
}
SIZES = _SIZES["quick-gpu" if MODE == "quick" and GPU else MODE]

IMPLS = ("raw", "gpuarray", "cupy", "torch", "numba")
PEERS = ("cupy", "torch", "numba")


def policy(moved: int, pcie: bool) -> tuple[int, int, int]:
    """``(reps, rounds, warmup)`` for a bandwidth case moving ``moved`` bytes per op."""
    if not FULL:
        return 2, 3, 1
    if pcie:   # ~256 MiB per round: a pageable 1 GiB case still ends in seconds
        reps = max(2, min(200, math.ceil(256 * MiB / max(moved, 1))))
        return reps, (5 if moved >= 256 * MiB else 10), 1
    reps = max(3, min(200, math.ceil(4 * GiB / max(moved, 1))))   # ~4 GiB of traffic per round
    return reps, 10, 1


def host_policy(heavy: bool = False) -> tuple[int, int]:
    """``(iterations, rounds)`` for a host-overhead case (heavy: allocates or copies)."""
    if not FULL:
        return (5, 3) if heavy else (20, 3)
    return (200, 15) if heavy else (2000, 15)


# Targets from PERF.md, shown next to the results (never asserted).
TARGETS = {
    "copy": "contiguous copy 1 GiB >= 0.98x cuMemcpyDtoDAsync",
    "h2d-pinned": ">= 0.95x raw from pinned (256 MiB)",
    "d2h-pinned": ">= 0.95x raw from pinned (256 MiB)",
    "h2d-pageable": ">= the better of CuPy and PyTorch (16 MiB - 1 GiB)",
    "d2h-pageable": ">= the better of CuPy and PyTorch (16 MiB - 1 GiB)",
    "transpose f32": ">= 0.90x memcpy; >= 1.5x CuPy and PyTorch",
    "transpose f16": ">= 0.90x memcpy; >= 1.5x CuPy and PyTorch",
    "transpose u8": ">= 0.80x memcpy; >= 5x PyTorch",
    "permute f32": ">= 0.80x memcpy",
    "permute f16": ">= 0.80x memcpy",
    "a[:, ::2]": ">= 0.60x memcpy (narrow inner run)",
    "a[::2]": ">= 0.90x memcpy (inner run >= 512 B)",
    "a[1:-1, 1:-1]": ">= 0.90x memcpy (inner run >= 512 B)",
    "a[::-1]": ">= 0.60x memcpy (narrow inner run)",
    "broadcast": ">= 0.90x memcpy (inner run >= 512 B)",
    "astype f32->f16": ">= 0.90x memcpy of the bytes moved",
    "astype f64->f32": ">= 0.90x memcpy of the bytes moved",
    "fill": ">= 0.95x cuMemsetD32Async (1 GiB)",
    "cai export cached": "<= 0.1 us",
    "cai export uncached": "<= 0.5 us",
    "as_cuda_array": "<= 3 us, >= 5x faster than numba.cuda.as_cuda_array",
    "__dlpack__": "<= 3 us",
    "from_dlpack": "<= 3 us",
    "view": "<= 2 us",
    "fill 1 element": "<= 8 us, below CuPy's fill",
    "to_device small": "within 2 us of raw alloc + cuMemcpyHtoD",
    "alloc pool": "<= 2 us",
}

RAW_CALL = {
    "dtod": "cuMemcpyDtoDAsync",
    "htod": "cuMemcpyHtoDAsync (pinned)",
    "dtoh": "cuMemcpyDtoHAsync (pinned)",
    "htod-pageable": "cuMemcpyHtoDAsync (pageable)",
    "dtoh-pageable": "cuMemcpyDtoHAsync (pageable)",
    "memset32": "cuMemsetD32Async",
}


# ----------------------------------------------------------------- context
@dataclasses.dataclass
class Ctx:
    """The device, the one stream, the raw driver and the run's description."""

    dev: Any
    stream: Any
    b: Any
    info: dict[str, Any]
    l2: int


_ctx: Ctx | None = None


def ctx() -> Ctx:
    """The session's context (made on first use; the device's context is made current)."""
    global _ctx
    if _ctx is None:
        dev = gpuarray.get_device()
        dev.make_current()
        info = _bench.describe()
        raw = _driver.checkpoint().backend  # the raw rows' driver: past gpuarray's capture checkpoint
        _ctx = Ctx(dev, gpuarray.legacy_default_stream(dev), raw, info, info["l2_cache_size"])
    return _ctx


# ------------------------------------------------------------------- peers
_peer_cache: dict[str, tuple[Any, str]] = {}


def _load_peer(name: str) -> tuple[Any, str]:
    if SIM:
        return None, (f"GPUARRAY_BACKEND=sim: {name} needs a real GPU (the simulator's memory "
                      "is not CUDA memory)")
    if STANDIN:
        return None, (f"the stand-in driver is in place (GPUARRAY_STANDIN): {name} needs a real "
                      "GPU (the stand-in's memory is the simulator's, not CUDA memory)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if name == "cupy":
                import cupy
                import cupyx

                cupy.cuda.runtime.getDeviceCount()
                return (cupy, cupyx), ""
            if name == "torch":
                import torch

                if not torch.cuda.is_available():
                    return None, f"torch {torch.__version__}: torch.cuda.is_available() is False"
                return torch, ""
            if name == "numba":
                from numba import cuda

                if not cuda.is_available():
                    return None, "numba.cuda.is_available() is False"
                return cuda, ""
    except Exception as e:  # ImportError, or the library's own CUDA initialisation failing
        return None, f"{name} unavailable: {type(e).__name__}: {e}"
    raise ValueError(f"unknown peer {name!r}")


def peer(name: str) -> Any:
    """The peer's module (cupy: ``(cupy, cupyx)``; numba: ``numba.cuda``), else skip with why."""
    if name not in _peer_cache:
        _peer_cache[name] = _load_peer(name)
    mod, reason = _peer_cache[name]
    if mod is None:
        pytest.skip(reason)
    return mod


def peer_status() -> dict[str, str]:
    """``{peer: "available" or the reason it is not}``."""
    out = {}
    for name in PEERS:
        if name not in _peer_cache:
            _peer_cache[name] = _load_peer(name)
        mod, reason = _peer_cache[name]
        out[name] = "available" if mod is not None else reason
    return out


def release_peer_memory() -> None:
    """Give cached device memory back (between tests; 1 GiB buffers must not pile up)."""
    if SIM:
        return
    gc.collect()
    for name, (mod, _) in list(_peer_cache.items()):
        if mod is None:
            continue
        try:
            if name == "cupy":
                mod[0].get_default_memory_pool().free_all_blocks()
                mod[0].get_default_pinned_memory_pool().free_all_blocks()
            elif name == "torch":
                mod.cuda.synchronize()
                mod.cuda.empty_cache()
        except Exception:  # best effort: never fail a benchmark while cleaning up
            pass


# ---------------------------------------------------------- raw baselines
def make_raw(kind: str, nbytes: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """A raw driver operation over fresh buffers, and the function that frees them."""
    c = ctx()
    b, h = c.b, c.stream.handle
    dev: list[int] = []
    host: list[int] = []
    keep: list[Any] = []
    n = max(nbytes, 1)
    if kind == "dtod":
        dev += [b.mem_alloc(n), b.mem_alloc(n)]
        b.memset_d8_async(dev[1], 1, n, h)
        dst, src = dev
        op = lambda: b.memcpy_dtod_async(dst, src, nbytes, h)  # noqa: E731
    elif kind in ("htod", "dtoh"):
        dev.append(b.mem_alloc(n))
        host.append(b.mem_host_alloc(n))
        d, p = dev[0], host[0]
        op = ((lambda: b.memcpy_htod_async(d, p, nbytes, h)) if kind == "htod"
              else (lambda: b.memcpy_dtoh_async(p, d, nbytes, h)))
    elif kind in ("htod-pageable", "dtoh-pageable"):
        dev.append(b.mem_alloc(n))
        arr = np.ones(n, np.uint8)   # touched: no page faults inside the timing
        keep.append(arr)
        d, p = dev[0], arr.ctypes.data
        op = ((lambda: b.memcpy_htod_async(d, p, nbytes, h)) if kind == "htod-pageable"
              else (lambda: b.memcpy_dtoh_async(p, d, nbytes, h)))
    elif kind == "memset32":
        dev.append(b.mem_alloc(n))
        d, count = dev[0], nbytes // 4
        bits = int(np.float32(3.0).view(np.uint32))
        op = lambda: b.memset_d32_async(d, bits, count, h)  # noqa: E731
    else:
        raise ValueError(f"unknown raw kind {kind!r}")

    def free() -> None:
        b.stream_synchronize(h)
        for p in dev:
            b.mem_free(p)
        for p in host:
            b.mem_free_host(p)
        dev.clear()
        host.clear()
        keep.clear()

    return op, free


def raw_moved(kind: str, nbytes: int) -> int:
    """Bytes a raw call of ``kind`` over ``nbytes`` reads plus writes (the GB/s convention)."""
    return 2 * nbytes if kind == "dtod" else nbytes


_baselines: dict[tuple[str, int], float] = {}


def baseline_ms(kind: str, nbytes: int, quick: bool = False) -> float:
    """Median GPU ms of the raw driver call ``kind`` over ``nbytes`` (measured once)."""
    key = (kind, nbytes)
    if key not in _baselines:
        op, free = make_raw(kind, nbytes)
        try:
            reps, rounds, warmup = (1, 1, 0) if quick else policy(
                nbytes, pcie=kind.startswith(("htod", "dtoh")))
            timing = _bench.time_gpu(op, ctx().stream, reps=reps, rounds=rounds, warmup=warmup)
        finally:
            free()
        if quick:
            return timing.gpu_ms.median
        _baselines[key] = timing.gpu_ms.median
    return _baselines[key]


# ------------------------------------------------------------------ runners
def has_teardown(benchmark: Any) -> bool:
    """Whether ``benchmark.pedantic`` takes ``teardown=`` (pytest-benchmark 5.2 and newer)."""
    try:
        return "teardown" in inspect.signature(benchmark.pedantic).parameters
    except (TypeError, ValueError):
        return False


def _common(suite: str, case: str, impl: str) -> dict[str, Any]:
    info = ctx().info
    return {"suite": suite, "case": case, "impl": impl, "backend": info["backend"],
            "mode": MODE, "device": info["device"], "driver": info["driver"],
            "simulator": SIM}


def bandwidth(benchmark: Any, *, suite: str, case: str, impl: str, op: Callable[[], Any],
              size: int, moved: int, baseline: tuple[str, int], target: str = "",
              **extra: Any) -> None:
    """Benchmark a data-moving ``op`` with events; ``extra_info`` gets GB/s and the ratio.

    Parameters
    ----------
    size : int
        The case's size parameter (x axis of the plots), in bytes.
    moved : int
        Bytes read plus bytes written by one ``op``.
    baseline : (kind, nbytes)
        The raw driver call the ratio is taken against (``make_raw`` kinds).
    """
    c = ctx()
    kind, base_bytes = baseline
    pcie = kind.startswith(("htod", "dtoh"))
    reps, rounds, warmup = policy(moved, pcie)
    clock = EventClock(c.stream)
    calls = [0]

    def target_fn() -> None:
        op()
        calls[0] += 1

    def teardown() -> None:
        clock.stop(calls[0])
        calls[0] = 0
        clock.start()

    info = benchmark.extra_info
    info.update(_common(suite, case, impl))
    info.update(size=size, moved_bytes=moved, target=target, **extra)
    clock.start()
    if has_teardown(benchmark):
        benchmark.pedantic(target_fn, iterations=reps, rounds=rounds, warmup_rounds=warmup,
                           teardown=teardown)
        info["pytest_benchmark_stats"] = "host time of one call (enqueue only)"
    else:   # pytest-benchmark < 5.2: one timed round = reps calls and the wait
        def round_fn() -> None:
            for _ in range(reps):
                target_fn()
            teardown()

        benchmark.pedantic(round_fn, iterations=1, rounds=rounds, warmup_rounds=warmup)
        info["pytest_benchmark_stats"] = f"host time of one round ({reps} calls and the wait)"
    clock.stop(max(calls[0], 1))   # waits for the work of the last (untimed) call
    samples = clock.gpu_ms[warmup:warmup + rounds]
    host_incl = clock.host_us[warmup:warmup + rounds]
    # --benchmark-disable: op ran once (no rounds); keep the code exercised with that sample
    disabled = bool(getattr(benchmark, "disabled", False)) or not samples
    if disabled:
        samples, host_incl = clock.gpu_ms[:1], clock.host_us[:1]
    gpu = Stats.of(samples)
    base = baseline_ms(kind, base_bytes, quick=disabled)
    info.update(
        reps=reps, rounds=rounds,
        gpu_ms=gpu.as_dict(),
        host_us_incl_sync=Stats.of(host_incl).as_dict(),
        gbps=moved / (gpu.median * 1e-3) / 1e9 if gpu.median > 0 else None,
        baseline={"call": RAW_CALL[kind], "nbytes": base_bytes, "gpu_ms": base,
                  "gbps": raw_moved(kind, base_bytes) / (base * 1e-3) / 1e9 if base > 0 else None},
        ratio=base / gpu.median if gpu.median > 0 else None,
        l2_multiple=size / c.l2 if c.l2 else None,   # PERF.md: >= 4 at the target sizes
    )


_host_raw: dict[str, float] = {}


def host(benchmark: Any, *, suite: str, case: str, impl: str, op: Callable[[], Any],
         heavy: bool = False, after_round: Callable[[], Any] | None = None, size: int = 0,
         target: str = "", **extra: Any) -> None:
    """Benchmark the host time of one call of ``op`` (us per call in ``extra_info``).

    ``after_round`` runs untimed after each round (e.g. free raw allocations);
    the stream is synchronised there too, so queued work never piles up.  A
    ``raw`` row is remembered so later rows of the same case report
    ``delta_vs_raw_us``.
    """
    c = ctx()
    iterations, rounds = host_policy(heavy)

    def teardown() -> None:
        c.stream.synchronize()
        if after_round is not None:
            after_round()

    info = benchmark.extra_info
    info.update(_common(suite, case, impl))
    info.update(size=size, target=target, iterations=iterations, **extra)
    if has_teardown(benchmark):
        benchmark.pedantic(op, iterations=iterations, rounds=rounds, warmup_rounds=1,
                           teardown=teardown)
    else:   # pytest-benchmark < 5.2: clean up once at the end (GPU work here is tiny)
        benchmark.pedantic(op, iterations=iterations, rounds=rounds, warmup_rounds=1)
    teardown()
    if benchmark.stats is None:   # --benchmark-disable
        return
    st = benchmark.stats.stats
    us = st.median * 1e6
    info.update(host_us={"median": us, "q1": st.q1 * 1e6, "q3": st.q3 * 1e6,
                         "min": st.min * 1e6, "max": st.max * 1e6,
                         "spread": (st.q3 - st.q1) / st.median if st.median else 0.0})
    info["driver_calls"] = (None if impl in _NOT_OURS  # their calls bypass gpuarray's interface
                            else _driver_calls(op, max(iterations, 100), teardown))
    key = f"{suite}/{case}/{size}"
    if impl == "raw":
        _host_raw[key] = us
        _host_raw_calls[key] = info["driver_calls"]
    elif key in _host_raw:
        info["delta_vs_raw_us"] = us - _host_raw[key]
        info["raw_driver_calls"] = _host_raw_calls.get(key)


_host_raw_calls: dict[str, float | None] = {}
_NOT_OURS = ("cupy", "torch", "numba", "jax", "numpy")


def _driver_calls(op: Callable[[], Any], iterations: int, teardown: Callable[[], Any]) -> float | None:
    """Driver calls per ``op`` through gpuarray's interface (``BackendMeter``), teardown included.

    Not for a peer library's op (CuPy, PyTorch and Numba call CUDA
    themselves: their calls are not seen).
    """
    from gpuarray._bench.host import BackendMeter

    with BackendMeter() as meter:
        for _ in range(iterations):
            op()
        teardown()
    return meter.calls / iterations


def results_path(name: str, suffix: str) -> Any:
    """``bench/results/<name>-<backend>-<UTC stamp><suffix>``; ``tmp-`` first on the simulator
    and over the stand-in driver (git-ignored, as ``make bench``'s simulator JSON)."""
    import pathlib
    import time

    folder = pathlib.Path(__file__).resolve().parent / "results"
    folder.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return folder / f"{'' if GPU else 'tmp-'}{name}-{BACKEND}-{stamp}{suffix}"


def ids(values: list[int]) -> list[str]:
    """pytest ids for sizes: ``8B``, ``4KiB``, ``1GiB``."""
    return [fmt_bytes(v).replace(" ", "") for v in values]
