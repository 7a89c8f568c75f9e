"""``python -m gpuarray bench``: gpuarray next to the raw driver calls, and the benchmark support.

The command's suite (bandwidth rows against the raw driver call, host
overhead rows against the same work through the driver interface) is here;
what it and the pytest-benchmark suites of the repository's ``bench/`` share
is below it, one concern a module: ``_timing`` (the quick/full switch,
:class:`Stats`, :class:`EventClock`, the environment record), ``_producers``
(foreign producers that export one protocol), ``host`` (the host-overhead
comparison with peers, interleaved rounds) and ``exchange`` (the DLPack
exchange-table rows).  The entry depends on its row modules, never the
reverse.

Why two benchmark homes: this package ships, so everything ``python -m
gpuarray bench`` runs on a user's machine (and what it shares with the
repository's suites) is here; the repository's ``bench/`` holds the
pytest-benchmark suites, their harness and what only they use (the
memory-manager rows, ``bench/_managers.py``; the plots), which need
pytest-benchmark and never ship.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ._producers import CAIOnly, DLPackOnly
from ._timing import (
    MODES,
    SIM_LABEL,
    EventClock,
    GiB,
    KiB,
    MiB,
    Stats,
    Timing,
    bench_mode,
    describe,
    fmt_bytes,
    time_gpu,
    time_host,
)

__all__ = ["MODES", "bench_mode", "Stats", "EventClock", "Timing", "time_gpu", "time_host", "describe",
           "fmt_bytes", "KiB", "MiB", "GiB", "SIM_LABEL", "add_arguments", "main"]


# ------------------------------------------------------- the command's suite
@dataclasses.dataclass
class _Row:
    group: str                       # "bandwidth" or "host"
    name: str
    gpuarray: Stats | None = None    # GPU ms (bandwidth) or host us (host)
    raw: Stats | None = None
    nbytes: int = 0                  # bytes moved, for bandwidth
    error: str = ""
    calls: float | None = None       # driver calls per gpuarray op (host rows)
    raw_calls: float | None = None   # driver calls per raw op (host rows)


class _Env:
    """What the command's cases need: device, one stream, the raw driver."""

    def __init__(self) -> None:
        import gpuarray

        from .. import _driver

        self.ga = gpuarray
        self.dev = gpuarray.get_device()
        self.dev.make_current()
        self.stream = gpuarray.legacy_default_stream()
        self.b = _driver.checkpoint().backend  # the raw driver: past gpuarray's capture checkpoint
        self.mode = bench_mode()
        self.sim = self.b.name == "sim"
        full = self.mode == "full"
        self.nbytes = 256 * MiB if full else 64 * KiB
        self.reps, self.rounds = (20, 10) if full else (3, 5)
        self.iters, self.host_rounds = (2000, 15) if full else (200, 5)


def _bandwidth_cases(env: _Env) -> list[tuple[str, int, Callable[[], dict[str, Callable[[], Any]]]]]:
    ga, b, s, n = env.ga, env.b, env.stream, env.nbytes
    h = int(s)

    def copy():
        src, dst = ga.ones(n // 4, np.float32, stream=s), ga.empty(n // 4, np.float32, stream=s)
        return {"gpuarray": lambda: dst.copy_to_device(src),
                "raw": lambda: b.memcpy_dtod_async(dst.ptr, src.ptr, n, h)}

    def h2d():
        host, dst = ga.pinned_array(n, np.uint8), ga.empty(n, np.uint8, stream=s)
        host[:] = 1
        return {"gpuarray": lambda: dst.copy_to_device(host),
                "raw": lambda: b.memcpy_htod_async(dst.ptr, host.ctypes.data, n, h)}

    def d2h():
        host, src = ga.pinned_array(n, np.uint8), ga.ones(n, np.uint8, stream=s)
        return {"gpuarray": lambda: src.copy_to_host(host, stream=s),
                "raw": lambda: b.memcpy_dtoh_async(host.ctypes.data, src.ptr, n, h)}

    def fill():
        a = ga.empty(n // 4, np.float32, stream=s)
        bits = int(np.float32(3.0).view(np.uint32))
        return {"gpuarray": lambda: a.fill(3.0),
                "raw": lambda: b.memset_d32_async(a.ptr, bits, n // 4, h)}

    side = int((n // 4) ** 0.5)

    def transpose():
        a = ga.ones((side, side), np.float32, stream=s)
        out, ref = ga.empty((side, side), np.float32, stream=s), ga.empty_like(a)
        return {"gpuarray": lambda: out.copy_to_device(a.T),
                "raw": lambda: b.memcpy_dtod_async(ref.ptr, a.ptr, a.nbytes, h)}

    def strided():
        a = ga.ones((side, side), np.float32, stream=s)
        v = a[:, ::2]
        out, ref = ga.empty(v.shape, np.float32, stream=s), ga.empty(v.shape, np.float32, stream=s)
        return {"gpuarray": lambda: out.copy_to_device(v),
                "raw": lambda: b.memcpy_dtod_async(ref.ptr, a.ptr, out.nbytes, h)}

    def astype():
        a = ga.ones(n // 4, np.float32, stream=s)
        out, ref = ga.empty(n // 4, np.float16, stream=s), ga.empty(n, np.uint8, stream=s)
        # read 4 + write 2 bytes per element = a memcpy of 3 bytes per element
        return {"gpuarray": lambda: out.copy_to_device(a),
                "raw": lambda: b.memcpy_dtod_async(ref.ptr, a.ptr, 3 * (n // 4), h)}

    sq = side * side * 4
    return [
        (f"copy d2d {fmt_bytes(n)}", 2 * n, copy),
        (f"to device, pinned {fmt_bytes(n)}", n, h2d),
        (f"to host, pinned {fmt_bytes(n)}", n, d2h),
        (f"fill f32 {fmt_bytes(n)}", n, fill),
        (f"transpose f32 {side}x{side}", 2 * sq, transpose),
        (f"a[:, ::2] f32 {side}x{side}", sq, strided),
        (f"astype f32->f16 {fmt_bytes(n)}", 3 * (n // 2), astype),
    ]


def _host_cases(env: _Env) -> list[tuple[str, Callable[[], dict[str, Callable[[], Any]]]]]:
    ga, b, s = env.ga, env.b, env.stream
    a = ga.zeros((64, 64), np.float32, stream=s)

    def cai_cached():
        _ = a.__cuda_array_interface__   # fill the cache
        return {"gpuarray": lambda: a.__cuda_array_interface__}

    def cai_uncached():
        def op():
            a._cai = None  # drop the per-array cache
            return a.__cuda_array_interface__
        return {"gpuarray": op}

    def cai_import():
        p = CAIOnly(a)
        return {"gpuarray": lambda: ga.as_cuda_array(p)}

    def dlpack_export():
        return {"gpuarray": lambda: a.__dlpack__(stream=s.cai_value, max_version=(1, 0))}

    def dlpack_import():
        p = DLPackOnly(a)
        return {"gpuarray": lambda: ga.from_dlpack(p)}

    def fill1():
        one = ga.empty(1, np.float32, stream=s)
        bits = int(np.float32(1.0).view(np.uint32))
        return {"gpuarray": lambda: one.fill(1.0),
                "raw": lambda: b.memset_d32_async(one.ptr, bits, 1, int(s))}

    def to_device_8b():
        host = np.ones(2, np.float32)
        ptrs: list[int] = []

        def raw():
            p = b.mem_alloc(8)
            b.memcpy_htod_async(p, host.ctypes.data, 8, int(s))
            ptrs.append(p)
        return {"gpuarray": lambda: ga.to_device(host, stream=s), "raw": raw, "_ptrs": ptrs}

    return [
        ("CAI export, cached", cai_cached),
        ("CAI export, uncached", cai_uncached),
        ("as_cuda_array (CAI-only producer)", cai_import),
        ("__dlpack__ export", dlpack_export),
        ("from_dlpack (DLPack-only producer)", dlpack_import),
        ("view a[1:]", lambda: {"gpuarray": lambda: a[1:]}),
        ("view a[:, ::2]", lambda: {"gpuarray": lambda: a[:, ::2]}),
        ("view a.T", lambda: {"gpuarray": lambda: a.T}),
        ("view a.reshape(-1)", lambda: {"gpuarray": lambda: a.reshape(-1)}),
        ("fill of 1 element", fill1),
        ("to_device 8 B", to_device_8b),
    ]


def _progress(i: int, n: int, name: str, tty: bool) -> None:
    text = f"[{i:2d}/{n}] {name}"
    if tty:
        sys.stderr.write("\r\033[K" + text)
    else:
        sys.stderr.write(text + "\n")
    sys.stderr.flush()


def run_suite(env: _Env, only: str | None = None) -> list[_Row]:
    """Run the command's cases (names containing ``only`` when given)."""
    bw = [c for c in _bandwidth_cases(env) if not only or only in c[0]]
    host = [c for c in _host_cases(env) if not only or only in c[0]]
    total = len(bw) + len(host)
    tty = sys.stderr.isatty()
    rows: list[_Row] = []
    i = 0
    for name, moved, build in bw:
        i += 1
        _progress(i, total, name, tty)
        row = _Row("bandwidth", name, nbytes=moved)
        try:
            ops = build()
            row.raw = time_gpu(ops["raw"], env.stream, reps=env.reps, rounds=env.rounds).gpu_ms
            row.gpuarray = time_gpu(ops["gpuarray"], env.stream, reps=env.reps,
                                    rounds=env.rounds).gpu_ms
        except Exception as e:  # one broken case must not hide the others
            row.error = f"{type(e).__name__}: {e}"
        rows.append(row)
    for name, build in host:
        i += 1
        _progress(i, total, name, tty)
        row = _Row("host", name)
        try:
            ops = build()
            ptrs = ops.pop("_ptrs", None)

            def after_round(ptrs=ptrs):
                env.stream.synchronize()
                while ptrs:
                    env.b.mem_free(ptrs.pop())

            row.gpuarray = time_host(ops["gpuarray"], iterations=env.iters,
                                     rounds=env.host_rounds, after_round=after_round)
            if "raw" in ops:
                row.raw = time_host(ops["raw"], iterations=env.iters, rounds=env.host_rounds,
                                    after_round=after_round)
            row.calls = _driver_calls(ops["gpuarray"], env.iters, after_round)
            if "raw" in ops:
                row.raw_calls = _driver_calls(ops["raw"], env.iters, after_round)
        except Exception as e:
            row.error = f"{type(e).__name__}: {e}"
        rows.append(row)
    env.stream.synchronize()
    if tty:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
    return rows


def _driver_calls(op: Callable[[], Any], iterations: int, after_round: Callable[[], Any]) -> float:
    """Driver calls per ``op``, the round's closing work (synchronisation, raw frees) included."""
    from .host import BackendMeter

    with BackendMeter() as meter:
        for _ in range(iterations):
            op()
        after_round()
    return meter.calls / iterations


def _cell(st: Stats | None, fmt: Callable[[float], str]) -> str:
    if st is None:
        return ""
    return f"{fmt(st.median)} +-{st.spread * 50:.0f}%"


def format_table(rows: list[_Row], sim: bool) -> str:
    """The command's table; simulator figures are labelled as such."""
    lines = []
    bw = [r for r in rows if r.group == "bandwidth"]
    host = [r for r in rows if r.group == "host"]
    if bw:
        if sim:
            lines.append("Bandwidth cases -- simulator host overheads, us per operation "
                         "(the simulator's CPU time, NOT GPU bandwidth)")
            head = ("case", "gpuarray us", "raw driver us", "raw/gpuarray")
        else:
            lines.append("Bandwidth -- GB/s from CUDA events (median, +- half the IQR), "
                         "ratio to the raw driver call in this process")
            head = ("case", "gpuarray GB/s", "raw driver GB/s", "ratio")
        table: list[tuple[str, ...]] = [head]
        for r in bw:
            if r.error:
                table.append((r.name, "error: " + r.error, "", ""))
                continue
            assert r.gpuarray is not None and r.raw is not None
            ratio = f"{r.raw.median / r.gpuarray.median:.2f}" if r.gpuarray.median else "-"
            if sim:
                table.append((r.name, _cell(r.gpuarray, lambda ms: f"{ms * 1e3:.1f}"),
                              _cell(r.raw, lambda ms: f"{ms * 1e3:.1f}"), ratio))
            else:
                gbps = lambda ms, n=r.nbytes: f"{n / (ms * 1e-3) / 1e9:.1f}" if ms else "-"  # noqa: E731
                table.append((r.name, _cell(r.gpuarray, gbps), _cell(r.raw, gbps), ratio))
        lines += _columns(table)
        lines.append("")
    if host:
        title = "Host overheads -- us per call (median, +- half the IQR)"
        if sim:
            title += "; simulator host overheads: only export and view figures carry over to a GPU"
        lines.append(title)
        htable: list[tuple[str, ...]] = [("case", "gpuarray us", "raw driver us",
                                          "driver calls", "raw driver calls")]
        for r in host:
            if r.error:
                htable.append((r.name, "error: " + r.error, "", "", ""))
                continue
            htable.append((r.name, _cell(r.gpuarray, lambda us: f"{us:.2f}"),
                           _cell(r.raw, lambda us: f"{us:.2f}"),
                           "" if r.calls is None else f"{r.calls:.2f}",
                           "" if r.raw_calls is None else f"{r.raw_calls:.2f}"))
        lines += _columns(htable)
    return "\n".join(lines)


def _columns(table: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    out = []
    for k, row in enumerate(table):
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m gpuarray bench``."""
    parser.add_argument("--mode", choices=MODES,
                        help="buffer sizes and rounds (default: GPUARRAY_BENCH_MODE, else quick "
                             "on the simulator, full on a GPU)")
    parser.add_argument("-k", dest="only", metavar="TEXT",
                        help="run only the cases whose name contains TEXT")


def main(args: argparse.Namespace) -> int:
    """Run the command's suite and print the table; 1 when a case failed."""
    if args.mode:
        os.environ["GPUARRAY_BENCH_MODE"] = args.mode
    env = _Env()
    info = describe()
    label = f"  [{SIM_LABEL}]" if env.sim else ""
    print(f"bench: {info['device']}, driver {info['driver']}, backend {info['backend']}, "
          f"mode {env.mode}{label}")
    if env.sim:
        print("  The simulator runs every copy on the CPU: its numbers are simulator host "
              "overheads.\n  Use `make bench` for the full suite and `GPUARRAY_BACKEND=cuda` "
              "on a GPU for real figures.")
    rows = run_suite(env, args.only)
    print(format_table(rows, env.sim))
    if not args.only or args.only in "peers":
        _print_peers(env)
    return 1 if any(r.error for r in rows) else 0


def _print_peers(env: _Env) -> None:
    """The host-overhead comparison with PyTorch CPU and NumPy (``host``)."""
    from . import host as _bench_host

    torch, why = _bench_host.load_torch()
    if torch is None:
        print(f"\nHost overheads next to PyTorch CPU: skipped ({why})")
        return
    rounds, number = (15, 2000) if env.mode == "full" else (7, 400)
    from .exchange import exchange_cases, missing

    cases = _bench_host.peer_cases(torch) + exchange_cases(torch)
    peer_rows = _bench_host.compare(cases, rounds=rounds, number=number,
                                    after_round=env.stream.synchronize)
    print("\n" + _bench_host.format_peer_table(peer_rows, env.b.name))
    for why in missing(torch):
        print(f"- exchange-table rows missing: {why}")
