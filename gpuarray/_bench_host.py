"""Host overheads next to peers: gpuarray, PyTorch (CPU) and NumPy in one process.

The pure host work of an array library -- exporting and importing DLPack
capsules and interface dictionaries, making views -- is the same on any
machine, so it is compared with PyTorch's and NumPy's CPU arrays doing the
same work: in one process, interleaved (every round times each library in
turn, in a rotating order), as medians and ratios. ``bench/`` (``make
bench``) and ``python -m gpuarray bench`` both use :func:`compare`.

Backend calls are counted and timed separately (:class:`BackendMeter`), so
that the simulator's own cost is not blamed on the library: ``library us`` is
gpuarray's time per call less the time spent inside backend calls.

The goals are PERF.md's: ``__dlpack__`` at most half of PyTorch's,
``from_dlpack`` and views at most PyTorch's, ``as_cuda_array`` at most twice
``torch.as_tensor`` of an ndarray, and a small ``to_device`` within 3 us of
library time over the raw allocation and copy.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ._bench import _CAIOnly, _DLPackOnly  # the same foreign producers as the GPU rows

__all__ = ["BackendMeter", "PeerRow", "compare", "peer_cases", "format_peer_table", "load_torch"]

SHAPE = (64, 64)


def load_torch() -> tuple[Any, str]:
    """PyTorch for CPU tensors, or None and the reason it is not usable."""
    try:
        import torch
    except Exception as e:  # ImportError, or a broken installation
        return None, f"PyTorch is not installed ({type(e).__name__}: {e})"
    return torch, ""


class BackendMeter:
    """Count and time every call into the driver backend while active.

    The backend instance's public methods are replaced, for the duration of
    the ``with`` block, by wrappers that add the call's wall time to
    :attr:`seconds` and one to :attr:`calls`. The wrappers' own cost (two
    clock reads) is measured once and subtracted.
    """

    def __init__(self) -> None:
        from ._driver import get_backend

        self.backend = get_backend()
        self.calls = 0
        self.seconds = 0.0
        self.by_name: dict[str, int] = {}
        self._names: list[str] = []
        self._overhead = 0.0

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = time.perf_counter
        counts = self.by_name

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += clock() - t0
                self.calls += 1
                counts[name] = counts.get(name, 0) + 1

        return timed

    def __enter__(self) -> BackendMeter:
        b = self.backend
        for name in dir(type(b)):
            if name.startswith("_") or not callable(getattr(type(b), name, None)):
                continue
            setattr(b, name, self._wrap(name, getattr(b, name)))
            self._names.append(name)
        # the wrapper's cost around a function that does nothing
        probe = self._wrap("_probe", lambda: None)
        t0 = time.perf_counter()
        for _ in range(2000):
            probe()
        bare = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(2000):
            pass
        self._overhead = max(0.0, (bare - (time.perf_counter() - t0)) / 2000)
        self.calls, self.seconds = 0, 0.0
        self.by_name.clear()
        return self

    def __exit__(self, *exc: Any) -> None:
        for name in self._names:
            self.backend.__dict__.pop(name, None)
        self._names.clear()

    def backend_seconds(self) -> float:
        """Time inside backend calls, less the wrappers' own cost."""
        return max(0.0, self.seconds - self.calls * self._overhead)


@dataclasses.dataclass
class PeerRow:
    """One compared operation: per-library host us per call, and gpuarray's backend share."""

    case: str
    peer_note: str
    goal: float | None
    goal_vs: str
    us: dict[str, float]
    spread: dict[str, float]
    backend_calls: float = 0.0
    backend_us: float = 0.0
    raw_backend_us: float = 0.0

    @property
    def library_us(self) -> float:
        """gpuarray's time per call less its time inside backend calls.

        For rows against the raw driver calls: that, less the raw row's own
        time outside its backend calls (the loop and the metering), so it is
        the library's time over the raw calls.
        """
        own = self.us["gpuarray"] - self.backend_us
        if "raw" in self.us:
            own -= max(0.0, self.us["raw"] - self.raw_backend_us)
        return own

    def ratio(self, peer: str | None = None) -> float | None:
        """gpuarray's time over ``peer``'s (default: the goal's peer)."""
        other = self.us.get(peer or self.goal_vs)
        return self.us["gpuarray"] / other if other else None

    def library_ratio(self) -> float | None:
        """gpuarray's library time (backend calls excluded) over the goal's peer's time."""
        other = self.us.get(self.goal_vs)
        return self.library_us / other if other else None

    def meets_goal(self) -> bool | None:
        """Whether the row is within its goal (None when it has none or no peer ran).

        Judged on library time: the backend's own cost (on the simulator, its
        CPU emulation of the driver) is not the library's.
        """
        if self.goal is None:
            return None
        if self.library_us < 0:  # the run's noise exceeds what is left: nothing to judge
            return None
        if self.goal_vs == "raw":   # library microseconds over the raw calls
            return self.library_us <= self.goal
        r = self.library_ratio()
        return None if r is None else r <= self.goal


class _ArrayInterfaceOnly:
    def __init__(self, arr: np.ndarray) -> None:
        self.__array_interface__ = dict(arr.__array_interface__)
        self._keep = arr


Case = tuple[str, str, "float | None", str, dict[str, Callable[[], Any]]]


def peer_cases(torch: Any, sizes: tuple[int, ...] = (8, 512, 4096)) -> list[Case]:
    """``(case, peer note, goal, goal's peer, {library: op})`` for every compared operation.

    ``torch`` may be None: the rows then have gpuarray and NumPy only.
    """
    import gpuarray

    from ._driver import get_backend

    stream = gpuarray.legacy_default_stream()
    a = gpuarray.zeros(SHAPE, np.float32, stream=stream)
    nd = np.zeros(SHAPE, np.float32)
    t = torch.zeros(SHAPE) if torch is not None else None
    pa, pn = _DLPackOnly(a), _DLPackOnly(nd)
    ca, na = _CAIOnly(a), _ArrayInterfaceOnly(nd)

    def three(g: Callable[[], Any], n: Callable[[], Any],
              p: Callable[[], Any] | None) -> dict[str, Callable[[], Any]]:
        ops = {"gpuarray": g, "numpy": n}
        if p is not None:
            ops["torch"] = p
        return ops

    pt = _DLPackOnly(t) if t is not None else None
    cases: list[Case] = [
        ("__dlpack__(max_version=(1, 0))", "each library's own array", 0.5, "torch",
         three(lambda: a.__dlpack__(max_version=(1, 0)), lambda: nd.__dlpack__(max_version=(1, 0)),
               (lambda: t.__dlpack__(max_version=(1, 0))) if t is not None else None)),
        ("from_dlpack(DLPack-only producer)", "a wrapper around each library's own array",
         1.0, "torch",
         three(lambda: gpuarray.from_dlpack(pa), lambda: np.from_dlpack(pn),
               (lambda: torch.from_dlpack(pt)) if t is not None else None)),
        ("a[1:]", "", 1.0, "torch",
         three(lambda: a[1:], lambda: nd[1:], (lambda: t[1:]) if t is not None else None)),
        ("reshape(4096)", "", 1.0, "torch",
         three(lambda: a.reshape(4096), lambda: nd.reshape(4096),
               (lambda: t.reshape(4096)) if t is not None else None)),
        ("as_cuda_array(CAI-only object)",
         "peers: torch.as_tensor(ndarray), np.asarray(__array_interface__-only object)",
         2.0, "torch",
         three(lambda: gpuarray.as_cuda_array(ca), lambda: np.asarray(na),
               (lambda: torch.as_tensor(nd)) if t is not None else None)),
    ]
    b = get_backend()
    h = stream.handle
    for n in sizes:
        host = np.ones(n, np.uint8)
        ptr = host.ctypes.data

        def raw(n: int = n, ptr: int = ptr) -> None:
            p = b.mem_alloc(n)
            b.memcpy_htod_async(p, ptr, n, h)
            b.mem_free(p)

        def ours(host: np.ndarray = host) -> Any:
            return gpuarray.to_device(host, stream=stream)

        cases.append((f"to_device {n} B", "raw: cuMemAlloc + cuMemcpyHtoDAsync + cuMemFree",
                      3.0, "raw", {"gpuarray": ours, "raw": raw}))
    return cases


def _time(op: Callable[[], Any], number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        op()
    return (time.perf_counter() - t0) * 1e6 / number


def compare(cases: list[Case], *, rounds: int = 15, number: int = 2000,
            after_round: Callable[[], Any] | None = None) -> list[PeerRow]:
    """Time every case's libraries interleaved; then meter gpuarray's backend calls.

    Parameters
    ----------
    cases : list
        As :func:`peer_cases` returns them.
    rounds, number : int
        Rounds (after one warm-up round), and calls per library per round.
    after_round : callable, optional
        Runs untimed after each round (e.g. a stream synchronisation).

    Returns
    -------
    list of PeerRow
        Medians over the rounds, with the quartile spread.
    """
    rows = []
    for name, note, goal, goal_vs, ops in cases:
        impls = list(ops)
        samples: dict[str, list[float]] = {k: [] for k in impls}
        for r in range(rounds + 1):
            order = impls[r % len(impls):] + impls[:r % len(impls)]
            for k in order:
                us = _time(ops[k], number)
                if r:
                    samples[k].append(us)
            if after_round is not None:
                after_round()
        with BackendMeter() as meter:
            _time(ops["gpuarray"], number)
            if after_round is not None:
                after_round()
        raw_backend = 0.0
        if "raw" in ops:
            with BackendMeter() as raw_meter:
                _time(ops["raw"], number)
            raw_backend = raw_meter.backend_seconds() * 1e6 / number
        med = {k: statistics.median(v) for k, v in samples.items()}
        spread = {}
        for k, v in samples.items():
            q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
            spread[k] = (q[2] - q[0]) / med[k] if med[k] else 0.0
        rows.append(PeerRow(name, note, goal, goal_vs, med, spread,
                            backend_calls=meter.calls / number,
                            backend_us=meter.backend_seconds() * 1e6 / number,
                            raw_backend_us=raw_backend))
    return rows


def format_peer_table(rows: list[PeerRow], backend: str) -> str:
    """A Markdown table: gpuarray, PyTorch CPU, NumPy, ratio to the goal's peer, goal, verdict."""
    out = [f"Host overheads next to peers ({backend} backend; medians of interleaved rounds, "
           "us per call)", "",
           "| op | gpuarray | PyTorch CPU | NumPy | raw | ratio | goal | backend calls (us) "
           "| library us | library ratio | met |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(row: PeerRow, k: str) -> str:
        return f"{row.us[k]:.2f}" if k in row.us else "-"

    for r in rows:
        if r.goal_vs == "raw":
            ratio = f"+{r.us['gpuarray'] - r.us['raw']:.2f} us"
            goal = f"library <= {r.goal:g} us"
            lib = "-"
        else:
            ratio_v, lib_v = r.ratio(), r.library_ratio()
            ratio = "-" if ratio_v is None else f"{ratio_v:.2f}x"
            lib = "-" if lib_v is None else f"{lib_v:.2f}x"
            goal = "-" if r.goal is None else f"<= {r.goal:g}x"
        met = r.meets_goal()
        out.append(f"| `{r.case}` | {cell(r, 'gpuarray')} | {cell(r, 'torch')} | "
                   f"{cell(r, 'numpy')} | {cell(r, 'raw')} | {ratio} | {goal} | "
                   f"{r.backend_calls:.1f} ({r.backend_us:.2f}) | {r.library_us:.2f} | {lib} | "
                   f"{'-' if met is None else ('yes' if met else 'NO')} |")
    notes = sorted({f"- `{r.case}`: {r.peer_note}" for r in rows if r.peer_note})
    notes.append("- ratio: gpuarray / PyTorch CPU, total time; library ratio and met: gpuarray's "
                 "time less its backend calls (counted and timed separately, so the simulator's "
                 "own cost is not blamed on the library); a negative library time means the "
                 "run's noise exceeded it, and the row is not judged")
    return "\n".join(out + [""] + notes)
