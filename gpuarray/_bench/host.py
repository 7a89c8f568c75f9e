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
``torch.as_tensor`` of an ndarray, and a small ``to_device`` within 2 us of
library time over the raw allocation and copy.  Each row says how many
driver calls gpuarray made per operation, and the raw path.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ._producers import CAIOnly, DLPackOnly  # the same foreign producers as the GPU rows

__all__ = ["BackendMeter", "PeerRow", "compare", "peer_cases", "format_peer_table", "load_torch"]

SHAPE = (64, 64)


def load_torch() -> tuple[Any, str]:
    """PyTorch for CPU tensors, or None and the reason it is not usable."""
    try:
        import torch
    except Exception as e:  # ImportError, or a broken installation
        return None, f"PyTorch is not installed ({type(e).__name__}: {e})"
    return torch, ""


#: Methods of the driver interface that are not one driver call: their
#: default (``_base.Backend``) makes the driver calls listed through the
#: interface (each metered on its own); a backend that overrides one makes
#: them directly, unseen by the meter, which then counts them itself.
COMPOSITE_CALLS: dict[str, tuple[str, ...]] = {
    "mem_alloc_relaxed": ("exchange_capture_mode", "mem_alloc", "exchange_capture_mode"),
}


_OUTSIDE, _IN_CALL, _IN_DEFAULT = 0, 1, 2


class BackendMeter:
    """Count and time every call into the driver backend while active.

    The backend instance's public methods are replaced, for the duration of
    the ``with`` block, by wrappers that add the call's wall time to
    :attr:`seconds` and its driver calls to :attr:`calls` (by interface name
    in :attr:`by_name`): one for a driver call, and for a method that makes
    several (:data:`COMPOSITE_CALLS`) each of them, once.  A backend's own
    calls through the interface inside a driver call are part of that call
    (neither counted nor timed again); those of a composite's default are the
    driver calls it makes (counted, timed as the composite).  The wrappers' own cost is measured once, inside and outside their
    clock reads, and subtracted.
    """

    def __init__(self) -> None:
        from .._driver import checkpoint

        self._checkpoint = checkpoint()  # the capture checkpoint hands out the backend's methods:
        self.backend = self._checkpoint.backend  # it takes the replaced ones (reinstall)
        self.calls = 0
        self.seconds = 0.0
        self.by_name: dict[str, int] = {}
        self._names: list[str] = []
        self._overhead = 0.0
        self._outside = 0.0
        self._where = _OUTSIDE
        self._outer = 0  # wrapper calls that timed themselves
        self._nested = 0  # wrapper calls inside another (their cost is in its time)

    # Where the running wrapper is: _OUTSIDE every metered call; _IN_CALL a
    # driver call, whose own calls through the interface (a backend's
    # internals) are neither counted nor timed again; _IN_DEFAULT a composite's
    # default, whose calls through the interface are the driver calls it makes
    # (counted, timed by the composite's clock).
    def _wrap(self, name: str, fn: Callable[..., Any], makes: tuple[str, ...] = ()) -> Callable[..., Any]:
        clock = time.perf_counter
        counts = self.by_name
        names = makes or (name,)
        n = len(names)

        def count() -> None:
            self.calls += n
            for k in names:
                counts[k] = counts.get(k, 0) + 1

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            where = self._where
            if where == _IN_CALL:
                self._nested += 1
                return fn(*args, **kwargs)
            if where == _IN_DEFAULT:
                self._nested += 1
                count()
                self._where = _IN_CALL
                try:
                    return fn(*args, **kwargs)
                finally:
                    self._where = _IN_DEFAULT
            self._where = _IN_CALL
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += clock() - t0
                self._where = _OUTSIDE
                self._outer += 1
                count()

        return timed

    def _default(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """A composite's default, made of metered calls: timed as one, its calls counted by theirs."""
        clock = time.perf_counter

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._where != _OUTSIDE:
                self._nested += 1
                return fn(*args, **kwargs)
            self._where = _IN_DEFAULT
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += clock() - t0
                self._where = _OUTSIDE
                self._outer += 1

        return timed

    def __enter__(self) -> BackendMeter:
        from .._driver._base import Backend

        b = self.backend
        for name in dir(type(b)):
            if name.startswith("_") or not callable(getattr(type(b), name, None)):
                continue
            fn = getattr(b, name)
            if name in COMPOSITE_CALLS:
                if getattr(type(b), name) is getattr(Backend, name):  # the default: metered calls
                    wrapped = self._default(fn)
                else:
                    wrapped = self._wrap(name, fn, COMPOSITE_CALLS[name])
            else:
                wrapped = self._wrap(name, fn)
            setattr(b, name, wrapped)
            self._names.append(name)
        self._checkpoint.reinstall()
        # the wrapper's cost around a function that does nothing: in all
        # (overhead) and the part outside its own clock reads (outside), which
        # a caller's total time holds but ``seconds`` does not
        probe = self._wrap("_probe", lambda: None)
        self.calls, self.seconds = 0, 0.0
        t0 = time.perf_counter()
        for _ in range(2000):
            probe()
        bare = time.perf_counter() - t0
        inside = self.seconds / 2000
        t0 = time.perf_counter()
        for _ in range(2000):
            pass
        self._overhead = max(0.0, (bare - (time.perf_counter() - t0)) / 2000)
        self._outside = max(0.0, self._overhead - inside)
        self.calls, self.seconds, self._outer, self._nested = 0, 0.0, 0, 0
        self.by_name.clear()
        return self

    def __exit__(self, *exc: Any) -> None:
        for name in self._names:
            self.backend.__dict__.pop(name, None)
        self._names.clear()
        self._checkpoint.reinstall()

    def backend_seconds(self) -> float:
        """Time inside backend calls, less the wrappers' own cost inside their clock reads."""
        return max(0.0, self.seconds - self._outer * (self._overhead - self._outside)
                   - self._nested * self._overhead)

    def own_seconds(self, total: float) -> float:
        """Of ``total`` seconds timed around metered calls: the time outside backend calls.

        ``total`` less what the backend calls took as the wrappers saw them
        and less the wrappers' own cost outside their clock reads.
        """
        return total - self.seconds - self._outer * self._outside


class NullBackend:
    """Backend calls that do nothing, to time the library's own Python exactly.

    Metering (:class:`BackendMeter`) subtracts the time spent inside backend
    calls, but not what the simulator's calls do to the time around them: its
    thousands of Python instructions a call evict the library's code and data
    from the CPU caches, so the library's own instructions run slower between
    them (a stub backend that burns ~4 us of Python a call raises the metered
    library time of ``to_device`` by ~0.4 us with no library change).  While
    this is active, the backend calls of the raw rows (``mem_alloc``,
    ``memcpy_htod_async``, ``mem_free``), the library's allocation in relaxed
    capture mode (``mem_alloc_relaxed``: three driver calls, which a GPU run
    times as the driver's), the context queries and the capture mode exchange
    do nothing but return what the library needs: a fresh fake address from
    the allocations (never dereferenced: the copies and frees are stubs too)
    and the context current on entry.  Any other backend call goes to the real
    backend and is counted in :attr:`other_calls`: a row that makes one is not
    timed this way.  On exit, the deferred frees of the fake allocations are
    flushed through the stubs.
    """

    def __init__(self) -> None:
        from .._driver import checkpoint

        self._checkpoint = checkpoint()  # the capture checkpoint hands out the backend's methods:
        self.backend = self._checkpoint.backend  # it takes the replaced ones (reinstall)
        self.other_calls = 0
        self._names: list[str] = []

    def __enter__(self) -> NullBackend:
        b = self.backend
        ctx = b.ctx_get_current()
        fake = itertools.count(1 << 60, 256)  # far from any address the backend hands out
        stubs: dict[str, Callable[..., Any]] = {
            "mem_alloc": lambda nbytes: next(fake),
            "mem_alloc_relaxed": lambda nbytes: next(fake),
            "memcpy_htod_async": lambda dst, src, nbytes, stream: None,
            "mem_free": lambda ptr: None,
            # gpuarray's allocations and frees run in relaxed capture mode (_driver/_checkpoint.py):
            # a trivial call on each side of the allocation, stubbed like the context queries.
            "exchange_capture_mode": lambda mode: "global",
            "ctx_get_current": lambda: ctx,
            "ctx_set_current": lambda handle: None,
        }
        self._names = [name for name in dir(type(b))
                       if not name.startswith("_") and callable(getattr(type(b), name, None))]
        for name in self._names:
            setattr(b, name, stubs.get(name) or self._counted(getattr(b, name)))
        self._checkpoint.reinstall()
        return self

    def _counted(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.other_calls += 1
            return fn(*args, **kwargs)
        return call

    def __exit__(self, *exc: Any) -> None:
        from ..memory._manager import _managers

        try:
            gc.collect()  # every fake allocation is released...
            for mgr in list(_managers.values()):  # ...and its deferred free run, by the stubs
                queue = getattr(mgr, "deallocations", None)
                if queue is not None:
                    queue.clear()
        finally:
            for name in self._names:
                self.backend.__dict__.pop(name, None)
            self._checkpoint.reinstall()


@dataclasses.dataclass
class PeerRow:
    """One compared operation: per-library host us per call, and gpuarray's backend share."""

    case: str
    peer_note: str
    goal: float | None
    goal_vs: str
    us: dict[str, float]
    spread: dict[str, float]
    #: Driver calls per gpuarray operation (:class:`BackendMeter`), and per raw op.
    backend_calls: float = 0.0
    backend_us: float = 0.0
    raw_backend_us: float = 0.0
    raw_backend_calls: float | None = None
    #: For rows against the raw calls: the median over metered rounds, each
    #: timing gpuarray and the raw calls in turn, of gpuarray's time outside
    #: backend calls less the raw loop's (None: use the formula below).
    paired_library_us: float | None = None
    #: For rows against the raw calls: the same difference timed with every
    #: backend call a no-op (:class:`NullBackend`): the library's own time,
    #: untouched by the simulator (None: not measured).
    null_library_us: float | None = None

    @property
    def library_us(self) -> float:
        """gpuarray's time per call less its time inside backend calls.

        For rows against the raw driver calls: that, less the raw row's own
        time outside its backend calls (the loop and the metering), so it is
        the library's time over the raw calls -- measured in paired metered
        rounds when :func:`compare` made the row.
        """
        if self.paired_library_us is not None:
            return self.paired_library_us
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
        CPU emulation of the driver) is not the library's.  Rows against the
        raw calls are judged on the null-backend time when it was measured
        (see :class:`NullBackend` for why the metered time overstates it).
        """
        if self.goal is None:
            return None
        if self.goal_vs == "raw":   # library microseconds over the raw calls
            lib = self.null_library_us if self.null_library_us is not None else self.library_us
            if lib < 0:  # the run's noise exceeds what is left: nothing to judge
                return None
            return lib <= self.goal
        if self.library_us < 0:
            return None
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

    from .._driver import checkpoint

    stream = gpuarray.legacy_default_stream()
    a = gpuarray.zeros(SHAPE, np.float32, stream=stream)
    nd = np.zeros(SHAPE, np.float32)
    t = torch.zeros(SHAPE) if torch is not None else None
    pa, pn = DLPackOnly(a), DLPackOnly(nd)
    ca, na = CAIOnly(a), _ArrayInterfaceOnly(nd)

    def three(g: Callable[[], Any], n: Callable[[], Any],
              p: Callable[[], Any] | None) -> dict[str, Callable[[], Any]]:
        ops = {"gpuarray": g, "numpy": n}
        if p is not None:
            ops["torch"] = p
        return ops

    pt = DLPackOnly(t) if t is not None else None
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
    b = checkpoint().backend  # raw: past gpuarray's capture checkpoint
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
                      2.0, "raw", {"gpuarray": ours, "raw": raw}))
    return cases


def _time(op: Callable[[], Any], number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        op()
    return (time.perf_counter() - t0) * 1e6 / number


def compare(cases: list[Case], *, rounds: int = 15, number: int = 2000,
            after_round: Callable[[], Any] | None = None, meter_rounds: int = 5,
            null_rounds: int = 7) -> list[PeerRow]:
    """Time every case's libraries interleaved; then meter gpuarray's backend calls.

    Parameters
    ----------
    cases : list
        As :func:`peer_cases` returns them.
    rounds, number : int
        Rounds (after one warm-up round), and calls per library per round.
    after_round : callable, optional
        Runs untimed after each round (e.g. a stream synchronisation); in
        metered rounds it is timed and metered with the round, since the
        work it waits for is the round's.
    meter_rounds : int
        Rounds with backend calls metered, after the timed ones.
    null_rounds : int
        For rows against the raw calls: rounds with a :class:`NullBackend`
        (0: none).

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
        # Metered rounds: backend calls counted and timed, and for rows against
        # the raw calls, gpuarray's time outside them less the raw loop's, in
        # pairs (the same round's noise on both sides); medians over rounds.
        metered = ["gpuarray", "raw"] if "raw" in ops else ["gpuarray"]
        calls: list[float] = []
        raw_calls: list[float] = []
        backend: dict[str, list[float]] = {k: [] for k in metered}
        paired: list[float] = []
        for r in range(meter_rounds):
            own = {}
            for k in metered[r % len(metered):] + metered[:r % len(metered)]:
                with BackendMeter() as meter:
                    t0 = time.perf_counter()
                    for _ in range(number):
                        ops[k]()
                    if after_round is not None:  # its backend work is the round's too
                        after_round()
                    total = time.perf_counter() - t0
                own[k] = meter.own_seconds(total) * 1e6 / number
                backend[k].append(meter.backend_seconds() * 1e6 / number)
                (calls if k == "gpuarray" else raw_calls).append(meter.calls / number)
            if "raw" in own:
                paired.append(own["gpuarray"] - own["raw"])
        null_us = None
        if "raw" in ops and null_rounds:
            null = []
            with NullBackend() as nb:
                for r in range(null_rounds + 1):  # one warm-up round
                    t = {k: _time(ops[k], number) for k in (metered if r % 2 else metered[::-1])}
                    if r:
                        null.append(t["gpuarray"] - t["raw"])
                    else:
                        nb.other_calls = 0  # what warming up needed (e.g. a first query) is fine
            if not nb.other_calls:  # else the row makes calls the stubs do not cover
                null_us = statistics.median(null)
        med = {k: statistics.median(v) for k, v in samples.items()}
        spread = {}
        for k, v in samples.items():
            q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
            spread[k] = (q[2] - q[0]) / med[k] if med[k] else 0.0
        rows.append(PeerRow(name, note, goal, goal_vs, med, spread,
                            backend_calls=statistics.median(calls),
                            backend_us=statistics.median(backend["gpuarray"]),
                            raw_backend_us=statistics.median(backend["raw"]) if "raw" in backend else 0.0,
                            raw_backend_calls=statistics.median(raw_calls) if raw_calls else None,
                            paired_library_us=statistics.median(paired) if paired else None,
                            null_library_us=null_us))
    return rows


def _calls_cell(r: PeerRow) -> str:
    raw = "" if r.raw_backend_calls is None else f", {r.raw_backend_calls:.1f}"
    return f"{r.backend_calls:.1f}{raw} ({r.backend_us:.2f})"


def format_peer_table(rows: list[PeerRow], backend: str) -> str:
    """A Markdown table: gpuarray, PyTorch CPU, NumPy, ratio to the goal's peer, goal, verdict."""
    out = [f"Host overheads next to peers ({backend} backend; medians of interleaved rounds, "
           "us per call)", "",
           "| op | gpuarray | PyTorch CPU | NumPy | raw | ratio | goal | driver calls, raw (backend us) "
           "| library us | library us, null backend | library ratio | met |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(row: PeerRow, k: str) -> str:
        return f"{row.us[k]:.2f}" if k in row.us else "-"

    for r in rows:
        if r.goal_vs == "raw":
            ratio = f"+{r.us['gpuarray'] - r.us['raw']:.2f} us"
            goal = "-" if r.goal is None else f"library <= {r.goal:g} us"
            lib = "-"
        else:
            ratio_v, lib_v = r.ratio(), r.library_ratio()
            ratio = "-" if ratio_v is None else f"{ratio_v:.2f}x"
            lib = "-" if lib_v is None else f"{lib_v:.2f}x"
            goal = "-" if r.goal is None else f"<= {r.goal:g}x"
        met = r.meets_goal()
        out.append(f"| `{r.case}` | {cell(r, 'gpuarray')} | {cell(r, 'torch')} | "
                   f"{cell(r, 'numpy')} | {cell(r, 'raw')} | {ratio} | {goal} | "
                   f"{_calls_cell(r)} | {r.library_us:.2f} | "
                   f"{'-' if r.null_library_us is None else f'{r.null_library_us:.2f}'} | {lib} | "
                   f"{'-' if met is None else ('yes' if met else 'NO')} |")
    notes = sorted({f"- `{r.case}`: {r.peer_note}" for r in rows if r.peer_note})
    notes.append("- driver calls: backend calls per operation (each driver call once; a relaxed "
                 "allocation is three: the capture mode exchange on each side of cuMemAlloc), "
                 "gpuarray's and, after the comma, the raw path's; in brackets gpuarray's time "
                 "inside them")
    notes.append("- ratio: gpuarray / PyTorch CPU, total time; library ratio and met: gpuarray's "
                 "time less its backend calls (counted and timed separately, so the simulator's "
                 "own cost is not blamed on the library); a negative library time means the "
                 "run's noise exceeded it, and the row is not judged")
    notes.append("- rows against the raw calls: library us is gpuarray's time outside backend "
                 "calls less the raw loop's, in paired metered rounds; library us, null backend "
                 "is the same difference with every backend call a no-op: the library's own "
                 "time, which the goal judges. The metered figure is higher because the "
                 "simulator's calls (thousands of Python instructions each) evict the CPU caches "
                 "and the library's code runs slower between them; what a real driver does to "
                 "it is for a GPU run to show")
    return "\n".join(out + [""] + notes)
