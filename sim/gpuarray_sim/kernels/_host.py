"""The host build of ``kernels/``: what the simulator runs on a launch.

One concern: turn kernel specialisations into host-callable code.  For each
:class:`._specs.KernelSpec` the translation unit is the same one NVRTC
compiles (:func:`._specs.program_source`), with ``GA_HOST_BUILD`` defined,
so ``sim/gpuarray_sim/kernels/ga_host.cuh`` maps CUDA's built-ins, plus one entry per kernel
(``GA_HOST_ENTRY``).  It is compiled with the system C++ compiler into a
shared library and run by the simulator's runtime
(:mod:`gpuarray_sim._hostrt`): every thread of every block, fibers
switched at ``__syncthreads``, global memory only through the extents the
launch declares (:meth:`HostKernel.accesses`, the reference's).

Selection: ``GPUARRAY_SIM_KERNELS=host``, ``reference`` or ``ptx`` (read when
a kernel symbol is first resolved); unset means ``host`` when a C++ compiler
is found (``CXX``, else ``g++``, ``clang++``, ``c++`` on ``PATH``), else
``reference``, said once in the log and by ``python -m gpuarray info``.
``ptx``: the simulator runs the PTX NVRTC makes of ``kernels/`` with the
options of a GPU build (``--gpu-architecture=sm_XY``, the options of the
cubin a GPU loads), through the simulator's PTX executor
(``gpuarray_sim.ptx``); the loader asks NVRTC for that PTX instead of
the cubin (``_loader.build_image``), and the resolver leaves the kernel to
the PTX of the image.
``host`` without a compiler, or a compiler error, raises
:class:`HostCompileError`: nothing falls back silently.

Build cost (g++ 12 at -O1, measured on the 2-core CI machine): 0.1-0.25 s
for one specialisation alone, of which 0.055 s is the compiler start and
the headers, and 0.023 s each in a unit of 48.  So: :func:`prepare` builds
every missing specialisation of a list in units of up to :data:`BATCH`
(two compilers at a time); a kernel resolved alone is built alone (like
its NVRTC image, 0.04-0.2 s); building it in the background while NVRTC
compiles was tried and gained nothing measurable on two busy cores; and the
cache folder lists what was built there (:data:`USED_LIST`), so after an
edit of ``kernels/`` or a compiler upgrade the first resolution rebuilds
the listed specialisations in the background, in units, instead of one
compiler start each.  Libraries go into the kernel disk cache
(:mod:`._cache`, same folder and trust rules) once each, under the hash of
their bytes; each specialisation has a small entry naming its library,
under a key of the compiler's identity (path and ``--version``), the
flags, the kernel sources and that specialisation's lines.  A warm run
loads and never compiles.  ``GPUARRAY_SIM_KERNELS_LOG=FILE`` appends the
symbol of every specialisation a process executes (once each) to FILE.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from gpuarray._kernels import _cache, _source
from gpuarray._kernels._hash import sha256
from gpuarray._kernels._specs import KernelSpec, params_type, parse_symbol, program_source

from .. import _hostrt
from ._reference import _check_config, reference_kernel

__all__ = ["HostCompileError", "Compiler", "compiler", "mode", "FLAGS", "BATCH", "prepare",
           "host_kernel", "HostKernel", "describe", "build_library", "load_library"]

_log = logging.getLogger("gpuarray.kernels")

def _host_cpu_flags() -> tuple[str, ...]:
    """``-mfma`` on an x86-64 host whose CPU has FMA3, else nothing.

    x86-64's baseline has no fused multiply-add, so ``fmaf``/``fma`` (PTX's
    ``fma.rn``, ``mad.f32``) are calls into libm; with ``-mfma`` they are one
    instruction.  The result is the same (a fused multiply-add is exact, one
    rounding either way) and nothing else fuses: ``-std=c++17`` (ISO mode)
    keeps ``-ffp-contract=off``, and the PTX runtime says so again.  The flag
    is part of :data:`FLAGS`, so of every cache key: a cache filled on such a
    CPU is not used on another.
    """
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return ()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return ("-mfma",) if "fma" in line.split(":", 1)[-1].split() else ()
    except OSError:
        pass
    return ()


#: Compiler flags of every host build.  -fwrapv and -fno-strict-aliasing give
#: C++ the GPU's meaning of signed overflow and type punning;
#: -fno-strict-overflow makes pointer arithmetic wrap too (a simulated device
#: address points into no host object, so C++ would call ``p + i`` undefined);
#: -fstack-clash-protection touches every page of a large frame in order, so a
#: stack overflow always lands in the fiber's guard (a reported fault, 714);
#: -mfma where the host CPU has it (:func:`_host_cpu_flags`).
FLAGS = ("-std=c++17", "-O1", "-fPIC", "-shared", "-fvisibility=hidden", "-fwrapv",
         "-fno-strict-overflow", "-fno-strict-aliasing", "-fstack-clash-protection",
         "-Wno-unknown-pragmas", "-U_FORTIFY_SOURCE", "-DGA_HOST_BUILD=1", *_host_cpu_flags())
#: The optimisation level, in place of :data:`FLAGS`' -O1, of the PTX
#: executor's optimised builds (``PtxToolchain.build(..., optimise=True)``:
#: the ``auto`` tier's translated build, made for kernels that ran long
#: interpreted).  Every other build (``kernels/``, the interpreter, a tier
#: chosen by ``GPUARRAY_SIM_PTX_TIER``: many small kernels each built once)
#: keeps -O1, the cheaper build.
PTX_OPT = "-O2"
#: The optimisation level of the fiber runtime (``_hostrt.cpp``): built once per
#: machine, and its barrier path (a waiting fiber's hand-off to the next) runs
#: once per thread per ``__syncthreads``, so its small helpers are inlined.
RUNTIME_OPT = "-O2"
#: Most specialisations per translation unit in :func:`prepare`.
BATCH = 48
_ENV = "GPUARRAY_SIM_KERNELS"


class HostCompileError(RuntimeError):
    """The host build of a kernel failed (or no compiler for ``GPUARRAY_SIM_KERNELS=host``).

    Attributes
    ----------
    compiler : str
    what : str
        The specialisation(s) or runtime being built.
    log : str
        The compiler's output.
    """

    def __init__(self, compiler: str, what: str, log: str) -> None:
        super().__init__(f"{compiler} failed to build {what} for the simulator:\n{log}")
        self.compiler, self.what, self.log = compiler, what, log


class Compiler(NamedTuple):
    """A C++ compiler: its path and identity (the first line of ``--version``)."""

    path: str
    ident: str


@functools.cache
def _find_compiler(cxx: str, path: str) -> Compiler | None:
    for name in ([cxx] if cxx else []) + ["g++", "clang++", "c++"]:
        exe = shutil.which(name, path=path or None)
        if exe is None:
            continue
        try:
            r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if r.returncode == 0:
            first = (r.stdout.strip().splitlines() or [""])[0]
            return Compiler(os.path.realpath(exe), first)
    return None


def compiler() -> Compiler | None:
    """The C++ compiler host builds use (``CXX`` first), or None."""
    return _find_compiler(os.environ.get("CXX", "").strip(), os.environ.get("PATH", ""))


_said_reference = False


def mode() -> str:
    """``"host"``, ``"reference"`` or ``"ptx"``: what the simulator runs for gpuarray kernels.

    Raises
    ------
    ValueError
        If ``GPUARRAY_SIM_KERNELS`` is set to anything else (the message names it).
    """
    global _said_reference
    v = os.environ.get(_ENV, "").strip().lower()
    if v in ("host", "reference", "ptx"):
        return v
    if v:
        raise ValueError(f"{_ENV}={os.environ[_ENV]!r}: expected 'host', 'reference' or 'ptx'")
    if compiler() is not None:
        return "host"
    if not _said_reference:
        _said_reference = True
        _log.info("no C++ compiler found (CXX, g++, clang++, c++): the simulator runs the "
                  "NumPy reference kernels instead of the host build of kernels/")
    return "reference"


def describe() -> str:
    """One line for ``python -m gpuarray info``: which kernels the simulator runs."""
    try:
        m = mode()
    except ValueError as e:
        return f"invalid ({e})"
    cc = compiler()
    if m == "ptx":
        return ("PTX of kernels/ (NVRTC's, GPU build options) run by the PTX executor"
                + (f" ({cc.ident})" if cc is not None else ", but no C++ compiler was found"))
    if m == "host":
        return (f"host build of kernels/ ({cc.ident}, {cc.path})" if cc is not None else
                f"host requested by {_ENV}, but no C++ compiler was found")
    why = f"{_ENV}=reference" if os.environ.get(_ENV, "").strip() else "no C++ compiler found"
    return f"reference (NumPy stand-ins; {why})"


# ------------------------------------------------------------------ building
#: The host build's portability header (CUDA's built-ins for the host), beside this file;
#: ``ga_common.cuh`` includes it when ``GA_HOST_BUILD`` is defined.
HOST_HEADER = Path(__file__).with_name("ga_host.cuh")


@functools.cache
def _headers() -> dict[str, str]:
    own = (HOST_HEADER, *_hostrt.HEADERS)
    return {**_source.kernel_headers(), **{h.name: h.read_text(encoding="utf-8") for h in own}}


@functools.cache
def _headers_digest(headers: tuple[tuple[str, str], ...]) -> str:
    return sha256("\0".join(x for pair in headers for x in pair).encode()).hexdigest()


def _key(cc: Compiler, what: str, text: str) -> str:
    headers = _headers_digest(tuple(sorted(_headers().items())))
    h = [f"gpuarray-host/{_cache.FORMAT_VERSION}/{_hostrt.ABI}", cc.path, cc.ident, *FLAGS,
         headers, what, text]
    return sha256("\0".join(h).encode()).hexdigest()


def _entry_line(spec: KernelSpec) -> str:
    return f"GA_HOST_ENTRY({spec.symbol})\n"


def _unit(specs: Sequence[KernelSpec]) -> str:
    return program_source(specs) + "".join(_entry_line(s) for s in specs)


def _compile_cmd(cc: Compiler, src: str, out: str, header: str | None,
                 opt: str | None = None) -> list[str]:
    flags = FLAGS if opt is None else tuple(opt if f == "-O1" else f for f in FLAGS)
    cmd = [cc.path, *flags, "-I", str(_source.kernel_source_dir()), "-I", str(HOST_HEADER.parent),
           "-I", str(_hostrt.RUNTIME_SOURCE.parent)]
    if header is not None:
        cmd += ["-include", header]
    return [*cmd, src, "-o", out]


def build_library(cc: Compiler, source: str, what: str, prefix: str | None = None,
                  opt: str | None = None) -> bytes:
    """Compile ``source`` (C++, ``-I kernels/ -I`` this folder) into a shared library; its bytes.

    ``prefix``: C++ that goes before ``source`` (the PTX executor's runtime
    headers), compiled once into a precompiled header (:func:`_precompiled`)
    where the disk cache is usable -- the unit then parses only its own
    lines; without one, or when the compiler refuses it, the prefix is
    compiled as text, with the same result.

    Raises
    ------
    HostCompileError
        Naming the compiler, ``what`` and the log.
    """
    header = _precompiled(cc, prefix, opt) if prefix is not None else None
    with tempfile.TemporaryDirectory(prefix="gpuarray-host-") as d:
        src, out = os.path.join(d, "unit.cpp"), os.path.join(d, "unit.so")
        with open(src, "w", encoding="utf-8") as f:
            f.write(source if prefix is None or header is not None else prefix + "\n" + source)
        cmd = _compile_cmd(cc, src, out, header, opt)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as e:
            raise HostCompileError(cc.path, what, f"{' '.join(cmd)}: {e}") from None
        if r.returncode != 0 and header is not None:  # a damaged precompiled header: as text
            _log.debug("host build with %s failed; building without it", header)
            with open(src, "w", encoding="utf-8") as f:
                f.write(prefix + "\n" + source)  # type: ignore[operator]
            cmd = _compile_cmd(cc, src, out, None, opt)
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise HostCompileError(cc.path, what, f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}")
        with open(out, "rb") as f:
            return f.read()


_pch_lock = threading.Lock()
_pch_done: dict[str, str | None] = {}


def _precompiled(cc: Compiler, text: str, opt: str | None = None) -> str | None:
    """The path of a header holding ``text`` whose precompiled form (``.gch``) sits beside it.

    Made once per compiler, flags and text, in the folder ``pch`` of the
    kernel disk cache (the cache's trust rules; created private): a
    precompiled header is compiler state that code is built with, trusted
    as a cached library is.  None when the cache is off or untrusted, or
    the header does not compile (the caller compiles the text instead).
    """
    key = _key(cc, "pch", text if opt is None else opt + "\n" + text)
    with _pch_lock:
        if key in _pch_done:
            return _pch_done[key]
        path = None
        try:
            path = _make_precompiled(cc, key, text, opt)
        except (OSError, subprocess.SubprocessError) as e:
            _log.debug("no precompiled header: %s", e)
        _pch_done[key] = path
        return path


def _make_precompiled(cc: Compiler, key: str, text: str, opt: str | None) -> str | None:
    if not _cache.disk_cache_enabled():
        return None
    base = _cache.cache_dir()
    # made here as a cache write makes it: the first build of a process on a fresh
    # machine comes before any write, and a missing folder is never trusted
    os.makedirs(base, mode=0o700, exist_ok=True)
    if not _cache._trusted(base):
        return None
    d = base / "pch"
    d.mkdir(mode=0o700, exist_ok=True)
    if not _cache._trusted(d):
        return None
    header, gch = d / f"{key[:40]}.h", d / f"{key[:40]}.h.gch"
    if header.is_file() and gch.is_file() and header.read_text(encoding="utf-8") == text:
        return str(header)
    tmp = tempfile.mkdtemp(prefix="gpuarray-pch-", dir=d)
    try:
        th, tg = os.path.join(tmp, "h.h"), os.path.join(tmp, "h.h.gch")
        with open(th, "w", encoding="utf-8") as f:
            f.write(text)
        flags = [opt if f == "-O1" and opt is not None else f for f in FLAGS if f != "-shared"]
        r = subprocess.run([cc.path, *flags, "-I", str(_hostrt.RUNTIME_SOURCE.parent),
                            "-x", "c++-header", th, "-o", tg], capture_output=True, text=True,
                           timeout=600)
        if r.returncode != 0:
            _log.debug("precompiling the PTX runtime header failed:\n%s", r.stderr)
            return None
        os.replace(th, header)  # the header first: a .gch is used only beside its header
        os.replace(tg, gch)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(header)


_loaded: dict[str, ctypes.CDLL] = {}


def load_library(payload: bytes) -> ctypes.CDLL:
    """``dlopen`` a library given by its bytes (once per content)."""
    digest = sha256(payload).hexdigest()
    lib = _loaded.get(digest)
    if lib is None:
        with tempfile.TemporaryDirectory(prefix="gpuarray-host-") as d:
            path = os.path.join(d, f"{digest[:32]}.so")  # a unique name: dlopen dedupes names
            with open(path, "wb") as f:
                f.write(payload)
            lib = _loaded.setdefault(digest, ctypes.CDLL(path))
    return lib


_lock = threading.RLock()
_entries: dict[str, int] = {}  # symbol -> address of ga_host__<symbol>
_runtime: Any = None


def _require_compiler() -> Compiler:
    cc = compiler()
    if cc is None:
        raise HostCompileError("<no C++ compiler>", "the host build of kernels/",
                               f"{_ENV}=host needs a C++ compiler: set CXX or install g++ "
                               f"(or set {_ENV}=reference)")
    return cc


def runtime() -> _hostrt.HostRuntime:
    """The simulator's host kernel runtime, built (or loaded from the cache) once."""
    global _runtime
    with _lock:
        if _runtime is None:
            cc = _require_compiler()
            text = _hostrt.RUNTIME_SOURCE.read_text(encoding="utf-8")
            key = _key(cc, "runtime", RUNTIME_OPT + "\n" + text)
            payload = _cache.read_entry(key, "host") if _cache.disk_cache_enabled() else None
            if payload is None:
                payload = build_library(cc, text, "the host kernel runtime (_hostrt.cpp)",
                                        opt=RUNTIME_OPT)
                if _cache.disk_cache_enabled():
                    _cache.write_entry(key, "host", payload)
            lib = load_library(payload)
            _runtime = _hostrt.HostRuntime(lib)
        return _runtime


def _spec_key(cc: Compiler, spec: KernelSpec) -> str:
    return _key(cc, spec.symbol, spec.instantiation() + "\n" + _entry_line(spec))


def _install(lib: ctypes.CDLL, specs: Iterable[KernelSpec]) -> None:
    for s in specs:
        fn = getattr(lib, "ga_host__" + s.symbol)
        _entries[s.symbol] = ctypes.cast(fn, ctypes.c_void_p).value or 0


def _units(todo: list[KernelSpec]) -> list[list[KernelSpec]]:
    n = -(-len(todo) // BATCH)  # as few units as BATCH allows, evenly filled
    return [todo[i::n] for i in range(n)]


def _build_unit(cc: Compiler, unit: list[KernelSpec]) -> bytes:
    what = unit[0].symbol if len(unit) == 1 else f"{len(unit)} kernels ({unit[0].symbol}, ...)"
    return build_library(cc, _unit(unit), what)


def _store(cc: Compiler, unit: list[KernelSpec], payload: bytes, note: bool = True) -> None:
    """Install a built unit (caller holds ``_lock``) and write its cache entries.

    The library is stored once, under the hash of its bytes (kind ``host``);
    each specialisation's key gets a small entry naming that hash (kind
    ``hostref``), so a unit of 48 costs one library on disk, not 48 copies.
    """
    _install(load_library(payload), unit)
    if _cache.disk_cache_enabled():
        lib_key = sha256(payload).hexdigest()
        _cache.write_entry(lib_key, "host", payload)
        for s in unit:
            _cache.write_entry(_spec_key(cc, s), "hostref", lib_key.encode())
        if note:
            _note_built(unit)


def _cached(cc: Compiler, spec: KernelSpec) -> bytes | None:
    """The cached library holding ``spec``, or None."""
    if not _cache.disk_cache_enabled():
        return None
    ref = _cache.read_entry(_spec_key(cc, spec), "hostref")
    if ref is None or len(ref) != 64:
        return None
    payload = _cache.read_entry(ref.decode("ascii", "replace"), "host")
    if payload is None or sha256(payload).hexdigest() != ref.decode("ascii", "replace"):
        return None
    return payload


def prepare(specs: Iterable[KernelSpec]) -> int:
    """Make every spec of ``specs`` runnable: load from the disk cache, compile the rest.

    Missing specialisations are compiled in units of at most :data:`BATCH`,
    two compilers at a time.  Returns how many were compiled.

    Raises
    ------
    HostCompileError
    """
    cc = _require_compiler()
    with _lock:
        todo = []
        for s in dict.fromkeys(specs):
            if s.symbol in _entries:
                continue
            payload = _cached(cc, s)
            if payload is not None:
                try:
                    _install(load_library(payload), [s])
                    continue
                except (OSError, AttributeError):
                    pass  # not a library holding it: rebuild
            todo.append(s)
        if not todo:
            return 0
        units = _units(todo)
        if len(units) == 1:
            payloads = [_build_unit(cc, units[0])]
        else:
            with ThreadPoolExecutor(max_workers=2) as ex:
                payloads = list(ex.map(lambda u: _build_unit(cc, u), units))
        for unit, payload in zip(units, payloads, strict=True):
            _store(cc, unit, payload)
        return len(todo)


# ------------------------------------------------------------- prefetching
# The disk cache folder keeps a list of the specialisations built there
# (USED_LIST, one symbol a line).  The first host kernel a process resolves
# starts a background build of every listed specialisation whose entry is
# missing -- after an edit of kernels/, or a compiler upgrade, a run needs
# the same few hundred again -- in units of BATCH, two compilers at a time,
# instead of one compiler start each.  A resolution waits for the unit that
# holds its kernel if that unit is compiling, else builds its kernel alone
# at once (a short test run does not wait for the whole list).
USED_LIST = "host-kernels-used.txt"
_USED_MAX = 4 << 20
class _Unit:
    """A background unit: ``started`` once its compiler runs, ``done`` when finished."""

    def __init__(self) -> None:
        self.started = False
        self.done = threading.Event()


_pending: dict[str, _Unit] = {}
_prefetch_started = False


def _used_path():
    d = _cache.cache_dir()
    if not _cache.disk_cache_enabled() or not _cache._trusted(d):
        return None
    return d / USED_LIST


_listed_symbols: set[str] = set()  # what the list held at the prefetch, and what was added


def _note_built(unit: Sequence[KernelSpec]) -> None:
    path = _used_path()
    unit = [s for s in unit if s.symbol not in _listed_symbols]
    if path is None or not unit:
        return
    _listed_symbols.update(s.symbol for s in unit)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
        try:
            os.write(fd, "".join(s.symbol + "\n" for s in unit).encode())
        finally:
            os.close(fd)
    except OSError as e:
        _log.debug("host kernels: cannot append to %s: %s", path, e)


def _listed() -> list[KernelSpec]:
    path = _used_path()
    if path is None:
        return []
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return []
            text = os.read(fd, _USED_MAX).decode("ascii", "replace")
        finally:
            os.close(fd)
    except OSError:
        return []
    out = []
    for line in dict.fromkeys(text.split()):
        try:
            out.append(parse_symbol(line))
        except ValueError:
            continue  # not ours, or truncated: ignored
    return out


def _start_prefetch(cc: Compiler) -> None:
    """Start the background build of the listed specialisations missing from the cache."""
    global _prefetch_started
    if _prefetch_started:
        return
    _prefetch_started = True
    d = _cache.cache_dir()
    listed = _listed()
    _listed_symbols.update(s.symbol for s in listed)
    missing = [s for s in listed if s.symbol not in _entries
               and not _cache._entry_path(d, _spec_key(cc, s), "hostref").exists()]
    if not missing:
        return
    units = _units(missing)
    states = []
    for unit in units:
        st = _Unit()
        states.append(st)
        for s in unit:
            _pending[s.symbol] = st

    def build(i: int) -> None:
        try:
            with _lock:
                states[i].started = True
            payload = _build_unit(cc, units[i])
            with _lock:
                _store(cc, units[i], payload, note=False)  # listed already
        except Exception as e:  # the kernels are built again on demand, raising there
            _log.debug("host kernels: background build failed: %s", e)
        finally:
            with _lock:
                for s in units[i]:
                    _pending.pop(s.symbol, None)
            states[i].done.set()

    def run() -> None:
        with ThreadPoolExecutor(max_workers=2) as ex:
            list(ex.map(build, range(len(units))))

    _log.info("host kernels: building %d listed specialisations in the background", len(missing))
    threading.Thread(target=run, name="gpuarray-host-prefetch", daemon=True).start()


def _entry(spec: KernelSpec) -> int:
    addr = _entries.get(spec.symbol)
    if addr is None:
        with _lock:
            _start_prefetch(_require_compiler())
            unit = _pending.get(spec.symbol)
        if unit is not None and unit.started:  # its compiler runs: wait for it
            unit.done.wait()
        # else: queued behind others, build it alone now (the unit rebuilds it later)
        addr = _entries.get(spec.symbol)
        if addr is None:
            prepare([spec])
            addr = _entries[spec.symbol]
    return addr


# ---------------------------------------------------------------- executing
_executed: set[str] = set()


def _record(symbol: str) -> None:
    if symbol in _executed:
        return
    _executed.add(symbol)
    path = os.environ.get("GPUARRAY_SIM_KERNELS_LOG", "").strip()
    if path:
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(symbol + "\n")
        except OSError as e:
            _log.debug("GPUARRAY_SIM_KERNELS_LOG: cannot append to %s: %s", path, e)


class HostKernel:
    """The simulator's implementation of one kernel: its host build (a ``SimKernel``).

    ``accesses`` are the reference's (the operands' byte extents); ``run``
    checks the launch configuration as the reference does, grants exactly
    those extents and runs the compiled kernel over the whole grid.
    """

    def __init__(self, spec: KernelSpec, entry: int | None = None) -> None:
        self.spec = spec
        self._ref = reference_kernel(spec)
        self.param_types = (params_type(spec.family, spec.ndim, spec.index),)
        self._entry = entry

    def __repr__(self) -> str:
        return f"<host kernel {self.spec.symbol}>"

    def accesses(self, params: Sequence[Any]) -> list[tuple[int, int, bool]]:
        """Byte ranges the launch may touch (source read, destination written)."""
        return self._ref.accesses(params)

    def run(self, mem, grid, block, shared_mem, params) -> None:
        """Run every thread of every block of the compiled kernel on ``mem``."""
        _check_config(self.spec, grid, block, shared_mem)
        entry = self._entry if self._entry is not None else _entry(self.spec)
        grants, keep = _hostrt.grants_for(mem, self.accesses(params))
        runtime().launch(self.spec.symbol, entry, params[0], grid, block, grants)
        del keep
        _record(self.spec.symbol)


def host_kernel(spec: KernelSpec) -> HostKernel:
    """The :class:`HostKernel` of ``spec``, built (or loaded) now.

    Raises
    ------
    HostCompileError
        No compiler, or the build failed (naming compiler, spec and log).
    """
    runtime()
    return HostKernel(spec, _entry(spec))


class PtxToolchain:
    """The host build's toolchain as the simulator's PTX executor uses it (``_hostrt.toolchain``).

    Same compiler, flags, runtime and disk cache (kind ``host``) as the host
    build of ``kernels/``.
    """

    def runtime(self) -> _hostrt.HostRuntime:
        return runtime()

    def key(self, optimise: bool = False) -> str:
        cc = _require_compiler()
        return _key(cc, "ptx", PTX_OPT if optimise else "")

    def build(self, source: str, what: str, prefix: str | None = None,
              optimise: bool = False) -> bytes:
        return build_library(_require_compiler(), source, what, prefix,
                             PTX_OPT if optimise else None)

    def load(self, payload: bytes) -> ctypes.CDLL:
        return load_library(payload)

    def read(self, key: str) -> bytes | None:
        return _cache.read_entry(key, "host") if _cache.disk_cache_enabled() else None

    def write(self, key: str, payload: bytes) -> None:
        if _cache.disk_cache_enabled():
            _cache.write_entry(key, "host", payload)


PTX_TOOLCHAIN = PtxToolchain()

