"""Loaded PTX programs: parse once per text, translate and build once per toolchain, cached.

One concern: turn an image's PTX into a :class:`PtxProgram` whose entries
are addresses the fiber runtime can call.  Parsing is memoised per text
(by hash); the C++ is built on first need with the host build's toolchain
(``_hostrt.toolchain()``: compiler, flags, disk cache), and stored in the
kernel disk cache under a key of the PTX's hash, the translator's version,
the hash of the translator's and runtime header's sources and the toolchain's key (compiler identity and
flags).  The entry holds the library and the translation's facts, so a
warm load neither translates nor compiles; a corrupt entry is a miss
(the cache verifies its digest), and writes are atomic (the cache's).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import struct
import threading
import time as _time
from collections.abc import Sequence
from typing import Any

from .. import _hostrt, _phases
from ._ast import PtxModule
from ._check import check
from ._emit import translate
from ._errors import UnsupportedPtx
from ._info import _names
from ._ops import BUILTIN_CALLS
from ._parse import parse
from ._runtime_src import HEADERS, cache_key, runtime_source

__all__ = ["HEADERS", "PtxProgram", "load", "link", "cache_key", "runtime_source", "settle",
           "TIER_UP_SECONDS"]

HEADER = HEADERS[0]
_MAGIC = b"GAPTX1\n"

_lock = threading.Lock()
_programs: dict[str, PtxProgram] = {}


def _text(image: bytes | str) -> str:
    if isinstance(image, str):
        return image.split("\0", 1)[0]
    return bytes(image).split(b"\0", 1)[0].decode("utf-8", "replace")


def load(image: bytes | str) -> PtxProgram:
    """The :class:`PtxProgram` of PTX ``image`` (text, or bytes up to the first NUL).

    Raises
    ------
    PtxError
        The text is not PTX the executor reads (218, 222), or holds an
        instruction a driver's JIT refuses (218, see ``_check.py``).
    """
    text = _text(image)
    digest = hashlib.sha256(text.encode()).hexdigest()
    with _lock:
        prog = _programs.get(digest)
    if prog is None:
        with _phases.phase("parse"):
            module = parse(text)
            check(module)  # what a driver's JIT refuses is refused here, at load
        prog = PtxProgram(module, digest)
        with _lock:
            prog = _programs.setdefault(digest, prog)
    return prog


def link(images: Sequence[bytes | str]) -> PtxProgram:
    """One program of several PTX modules, as ``cuLinkAddData`` + ``cuLinkComplete`` make.

    The texts are joined in order: a function one module declares
    (``.extern .func``) and another defines resolves to the definition; a
    ``.weak`` definition yields to a strong one; ``.common`` variables merge.
    The newest ``.version`` and the first ``.target`` apply.

    Raises
    ------
    PtxError
        A text is not PTX (218, 222), or two modules define one function.
    """
    texts = [_text(i) for i in images]
    if not texts:
        raise ValueError("link() needs at least one PTX module")
    return load("\n".join(texts))


def _pack(meta: dict, lib: bytes) -> bytes:
    m = json.dumps(meta, sort_keys=True).encode()
    return _MAGIC + struct.pack("<Q", len(m)) + m + lib


def _unpack(payload: bytes) -> tuple[dict, bytes] | None:
    if not payload.startswith(_MAGIC) or len(payload) < len(_MAGIC) + 8:
        return None
    (n,) = struct.unpack_from("<Q", payload, len(_MAGIC))
    start = len(_MAGIC) + 8
    try:
        meta = json.loads(payload[start:start + n])
    except ValueError:
        return None
    return (meta, payload[start + n:]) if isinstance(meta, dict) else None


class PtxProgram:
    """One PTX module: its syntax tree, and (once prepared) how each entry runs.

    ``module`` is the :class:`~._ast.PtxModule`; ``globals_needed`` the
    module variables (``.global`` and ``.const``) in the order of the
    launch's address table.

    Tiers (``GPUARRAY_SIM_PTX_TIER``, read when a program is prepared):
    ``auto`` (the default) runs the translated build when the disk cache
    holds it, else the interpreter (``_interp.py``: nothing compiled per
    module) until the interpreted launches of the module have taken
    :data:`TIER_UP_SECONDS`, the price of a build, and then builds the
    translation in the background and switches to it once built;
    ``interp`` always interprets (a module the interpreter cannot run is
    built); ``compiled`` always builds.  Both tiers run the same C++ per
    instruction (the interpreter's handlers are the translator's code for
    each instruction), so results and fault reports are the same.
    """

    def __init__(self, module: PtxModule, digest: str) -> None:
        self.module = module
        self.digest = digest
        self.globals_needed = [g.name for g in module.globals.values()
                               if g.space in ("global", "const")]
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()
        self._meta: dict | None = None
        self._decoded: Any = None  # the interpreter's decoded form (or False: none)
        self._interp: Any = None  # _interp.Interpreted
        self._compiled: tuple[ctypes.CDLL, dict[str, int]] | None = None
        self._kernels: dict[str, Any] = {}
        self._lines = module.text.split("\n")
        #: whether any function calls vprintf (a launch then gets a printf buffer)
        self.uses_printf = any(
            it.base == "call" and any(getattr(a, "name", "") == "vprintf" for a in it.args)
            for f in module.functions.values() for it in f.body or []
            if getattr(it, "base", None) == "call")
        self.built_now = False  # whether this process compiled it (a cache miss)
        #: The disk cache key of its build (set by :meth:`build`).
        self.build_key: str | None = None
        #: Seconds its interpreted launches ran (the ``auto`` tier builds past TIER_UP_SECONDS).
        self.interpreted_seconds = 0.0
        self.upgraded_blocks = 0  # blocks of interpreted launches that ran the translation
        self._upgrading = False

    @property
    def unresolved(self) -> list[str]:
        """The functions the module uses (calls, takes the address of, lists as call targets)
        but only declares, other than those the simulator provides (``vprintf``, ``malloc``,
        the device runtime's ...): what a driver's JIT cannot resolve without a link."""
        m = self.module
        declared = {n for n, f in m.functions.items() if f.body is None} - set(BUILTIN_CALLS)
        if not declared:
            return []
        used: set[str] = set()
        for f in m.functions.values():
            used |= _names(f.body or [])
            used |= {n for names, _line in f.calltargets.values() for n in names}
        for g in m.globals.values():
            used |= {sym for _off, sym, _add in g.relocs}
        return sorted(declared & used)

    def kernel(self, name: str) -> Any:
        """The ``SimKernel`` (:class:`~._run.PtxKernel`) of entry ``name`` (KeyError: none)."""
        from ._run import PtxKernel

        k = self._kernels.get(name)
        if k is None:
            info = self.module.entries[name]
            k = self._kernels.setdefault(name, PtxKernel(self, name, info))
        return k

    def source_line(self, line: int) -> str:
        """``PTX line N: <instruction>`` for fault messages."""
        text = self._lines[line - 1].strip() if 0 < line <= len(self._lines) else ""
        return f"PTX line {line}: {text}" if text else f"PTX line {line}"

    @property
    def tier(self) -> str:
        """``"compiled"`` or ``"interp"``: what its next launch runs (after :meth:`prepare`)."""
        return "compiled" if self._compiled is not None else "interp"

    def _toolchain(self) -> Any:
        tc = _hostrt.toolchain()
        if tc is None:
            raise UnsupportedPtx("the simulator executes PTX with the host build's C++ "
                                 "toolchain, which is not available (import gpuarray)")
        return tc

    def _decode(self) -> Any:
        """The decoded module (``_decode.Decoded``), or None when the interpreter cannot run it."""
        if self._decoded is None:
            from ._decode import NotInterpretable, decode

            with _phases.phase("translate"):
                try:
                    self._decoded = decode(self.module)
                except NotInterpretable:
                    self._decoded = False
        return self._decoded or None

    def _layout_meta(self, local: dict, unsupported: dict) -> dict:
        from ._context import ModuleLayout

        lay = ModuleLayout(self.module)
        return {"globals": list(lay.global_index), "shared": dict(lay.shared_offsets),
                "dyn_offset": lay.dyn_offset, "local": local, "unsupported": unsupported}

    def _compiled_key(self, tc: Any, source: str | None = None) -> str:
        """The disk cache key of the translated build: from the decoded form (which names
        no PTX symbol) when there is one, else from the translated C++ (which names none)."""
        dec = self._decode()
        tkey = tc.key(optimise=True) if _optimised() else tc.key()
        if dec is not None:
            return cache_key("decoded:" + dec.digest(), tkey)
        assert source is not None
        return cache_key(hashlib.sha256(source.encode()).hexdigest(), tkey)

    def prepare(self) -> dict:
        """Make every entry launchable in the tier ``GPUARRAY_SIM_PTX_TIER`` says; the facts.

        Facts: ``globals`` (names in the address table's order), ``shared``,
        ``dyn_offset``, ``local`` (bytes of an entry's arena), ``unsupported``
        (entry -> why it cannot run).

        Raises
        ------
        UnsupportedPtx
            No C++ toolchain is registered (the kernels layer is not imported).
        """
        with self._lock:
            if self._meta is not None:
                return self._meta
            tc = self._toolchain()
            mode = os.environ.get("GPUARRAY_SIM_PTX_TIER", "auto").strip().lower() or "auto"
            if mode not in ("auto", "interp", "compiled"):
                raise ValueError(f"GPUARRAY_SIM_PTX_TIER={mode!r}: expected 'auto', 'interp' "
                                 "or 'compiled'")
            dec = self._decode() if mode != "compiled" else None
            if dec is not None and mode == "auto":
                with _phases.phase("load"):
                    self._compiled = self._load_compiled(tc, self._compiled_key(tc))
            if dec is None:
                self._meta = self.build()
                return self._meta
            if self._compiled is not None:
                self._meta = self._layout_meta(dec.local_bytes, dec.unsupported)
                return self._meta
            from . import _interp

            with _phases.phase("load"):
                core = _interp.core_entry(tc)
            t = _time.perf_counter()
            addresses, compiled = _interp.handlers(tc, dec.forms())
            _phases.add("build" if compiled else "load", _time.perf_counter() - t)
            self._interp = (core, _interp.Interpreted(dec, addresses))
            self._meta = self._layout_meta(dec.local_bytes, dec.unsupported)
            return self._meta

    def _load_compiled(self, tc: Any, key: str) -> tuple[ctypes.CDLL, dict[str, int]] | None:
        payload = tc.read(key)
        got = _unpack(payload) if payload is not None else None
        exports = {name: f"ga_ptx__k{i}" for i, name in enumerate(self.module.entries)}
        if got is None or got[0].get("exports") != sorted(exports.values()):
            return None
        try:
            lib = tc.load(got[1])
            return lib, {n: _address(lib, s) for n, s in exports.items()}
        except (OSError, AttributeError, KeyError, TypeError):
            return None  # not a library of this module: rebuild

    def build(self) -> dict:
        """Translate and build (or load from the cache) the translated tier; the facts.

        Raises
        ------
        UnsupportedPtx
            No C++ toolchain is registered (the kernels layer is not imported).
        """
        with self._build_lock:
            tc = self._toolchain()
            with _phases.phase("translate"):
                tr = translate(self.module)
                source = tr.source.replace('#include "ptxrt.h"\n', runtime_source() + "\n", 1)
            meta = {"exports": tr.exports, "globals": tr.globals,
                    "shared": tr.shared_offsets, "dyn_offset": tr.dyn_offset,
                    "local": tr.local_bytes, "unsupported": tr.unsupported}
            if self._compiled is not None:
                return meta
            # keyed by what names no PTX symbol: the same kernel compiled by another
            # process differs in its names only, and hits
            key = self._compiled_key(tc, source)
            self.build_key = key
            with _phases.phase("load"):
                got = self._load_compiled(tc, key)
            if got is None:
                with _phases.phase("build"):
                    opt = {"optimise": True} if _optimised() else {}
                    lib_bytes = tc.build(tr.source.replace('#include "ptxrt.h"\n', "", 1),
                                         f"the PTX module {self.digest[:12]} (translated)",
                                         prefix=runtime_source(), **opt)
                    tc.write(key, _pack({"exports": sorted(tr.exports.values())}, lib_bytes))
                    lib = tc.load(lib_bytes)
                got = (lib, {n: _address(lib, s) for n, s in tr.exports.items()})
                self.built_now = True
            self._compiled = got
            return meta

    def launch_target(self, name: str) -> tuple[int, int]:
        """``(entry address, decoded entry or 0)`` of entry ``name``'s next launch (prepared)."""
        self.prepare()
        compiled = self._compiled
        if compiled is not None:
            return compiled[1][name], 0
        core, interp = self._interp
        return core, interp.entry(name)

    def entry(self, name: str) -> int:
        """The address of entry ``name``'s translated wrapper (building first)."""
        self.prepare()
        if self._compiled is None:
            self.build()
        assert self._compiled is not None
        return self._compiled[1][name]

    def interpreted(self, seconds: float) -> None:
        """An interpreted launch ran ``seconds``: past :data:`TIER_UP_SECONDS` in all (tier
        ``auto``), the translation is built in the background for the launches after."""
        self.interpreted_seconds += seconds
        if self.interpreted_seconds >= TIER_UP_SECONDS:
            self._tier_up()

    def upgrade_cell(self, name: str) -> ctypes.Array | None:
        """For an interpreted launch of entry ``name`` (tier ``auto``): the cell the
        translated entry is published in once built, so that the launch's blocks not
        yet started run it, and count themselves in its second word
        (``_hostrt.HostRuntime.launch(upgrade=...)``).

        A launch still running when the module's interpreted time (this launch's
        included) passes :data:`TIER_UP_SECONDS` starts the background build
        (a watch thread looks every :data:`WATCH_SECONDS`).  Give the cell back
        with :meth:`launch_ended`.  None: no upgrade in this tier.
        """
        if os.environ.get("GPUARRAY_SIM_PTX_TIER", "auto").strip().lower() not in ("", "auto"):
            return None
        cell = (ctypes.c_uint64 * 2)()
        with _cells_lock:
            if self._compiled is not None:
                cell[0] = self._compiled[1][name]
            else:
                _running[id(cell)] = (_time.perf_counter(), self, name, cell)
        _watch()
        return cell

    def launch_ended(self, cell: ctypes.Array | None) -> None:
        """The launch of :meth:`upgrade_cell` ended: its cell is no longer read."""
        if cell is not None:
            with _cells_lock:
                _running.pop(id(cell), None)
            self.upgraded_blocks += cell[1]

    def _publish(self) -> None:
        """The translation is built: hand its entries to the running launches' cells."""
        compiled = self._compiled
        if compiled is None:
            return
        with _cells_lock:
            for _t0, prog, name, cell in _running.values():
                if prog is self:
                    cell[0] = compiled[1][name]

    def _tier_up(self) -> None:
        """Build the translation in the background (tier ``auto``), once."""
        if os.environ.get("GPUARRAY_SIM_PTX_TIER", "auto").strip().lower() not in ("", "auto"):
            return
        def run() -> None:
            try:
                self.build()
                self._publish()
            except Exception:  # noqa: BLE001 - it stays interpreted; a launch reports nothing
                pass

        t = threading.Thread(target=run, name="gpuarray-ptx-tier-up", daemon=True)
        with _cells_lock:  # the watch thread and a launch's thread may both ask
            if self._upgrading or self._compiled is not None:
                return
            self._upgrading = True
            # listed and started under _lock: whoever sees _upgrading and calls settle()
            # waits for this thread (it was once listed before it started: join() failed)
            with _lock:
                _tier_ups[:] = [x for x in _tier_ups if x.is_alive()] + [t]
                t.start()

    def runtime(self) -> _hostrt.HostRuntime:
        tc = _hostrt.toolchain()
        if tc is None:
            raise UnsupportedPtx("the host build's toolchain is not available")
        return tc.runtime()


def _optimised() -> bool:
    """The translated build is optimised (-O2) in the ``auto`` tier: there it is made for a
    kernel that ran :data:`TIER_UP_SECONDS` interpreted, where run time outweighs build time;
    a tier set by ``GPUARRAY_SIM_PTX_TIER`` builds at -O1 (each kernel, once: the tests)."""
    return os.environ.get("GPUARRAY_SIM_PTX_TIER", "auto").strip().lower() in ("", "auto")


#: Seconds of interpreted launches of one module after which the ``auto`` tier builds it.
TIER_UP_SECONDS = 0.25
#: How often the watch thread looks at the interpreted launches running.
WATCH_SECONDS = 0.05
_tier_ups: list[threading.Thread] = []
_cells_lock = threading.Lock()
#: Interpreted launches running: id(cell) -> (start, program, entry, cell).
_running: dict[int, tuple[float, Any, str, ctypes.Array]] = {}
_watcher: list[threading.Thread] = []


def _watch() -> None:
    """Start the watch thread (once per process): a long interpreted launch tiers up."""
    if _watcher:
        return
    with _lock:
        if _watcher:
            return

        def loop() -> None:
            while True:
                _time.sleep(WATCH_SECONDS)
                now = _time.perf_counter()
                with _cells_lock:
                    running = list(_running.values())
                for t0, prog, _name, _cell in running:
                    if now - t0 + prog.interpreted_seconds >= TIER_UP_SECONDS:
                        prog._tier_up()

        t = threading.Thread(target=loop, name="gpuarray-ptx-tier-watch", daemon=True)
        _watcher.append(t)
        t.start()


def settle(timeout: float | None = None) -> None:
    """Wait for the background builds of the ``auto`` tier started so far."""
    with _lock:
        running = list(_tier_ups)
    for t in running:
        t.join(timeout)


def _address(lib: ctypes.CDLL, symbol: str) -> int:
    return ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value or 0
