"""The stand-in driver: build ``libcuda.so.1`` from ``_libcuda.c`` and run commands over it.

One concern: putting the stand-in CUDA driver in place.  :func:`build`
compiles ``_libcuda.c`` (next to this file, with the header it includes,
``_libcuda_bridge.h``) with the machine's C compiler into a folder of the
user cache, named after a hash of the sources, the compiler and its flags,
so a change of any rebuilds; :func:`environment`
is what a process needs to load it (``LD_LIBRARY_PATH`` first, because
cuda.pathfinder finds ``libcuda.so.1`` by the system search only, and that is
read when the process starts); :func:`run` execs a command with it
(``python -m gpuarray_sim standin -- COMMAND``, to which ``python -m
gpuarray standin`` hands over).  The calls themselves are served
by ``_serve.py``.

Cache folder: ``GPUARRAY_STANDIN_DIR``, else ``$XDG_CACHE_HOME/gpuarray/standin``
(``~/.cache/gpuarray/standin``) -- beside the kernel cache -- with the kernel
cache's trust rules: created ``0o700``, used only while it belongs to this
user and no one else may write to it, since the library runs in-process.
The library is written to a temporary name and renamed (``os.replace``), so
concurrent builds never expose a partial file.

Environment set for the command: ``GPUARRAY_BACKEND=cuda``, the library's
folder first in ``LD_LIBRARY_PATH``, and ``GPUARRAY_STANDIN`` = that folder,
which tells tests that the cuda backend runs over the simulator, not a GPU.
``GPUARRAY_STANDIN_TRACE=1`` makes the library print each function request
of the bindings (name, version, flags) and whether it is served.

nvJitLink: the simulator executes PTX, and a cubin that the real nvJitLink
linked (from numba-cuda's LTO-IR, say) carries none.  So where one is
installed (its file found where cuda-pathfinder looks: :func:`nvjitlink_path`)
the command is served the stand-in's (``GPUARRAY_STANDIN_NVJITLINK`` unset or
``serve``): :func:`build` also makes ``nvjitlink/libnvJitLink.so.13`` from
``_libnvjitlink.c`` (nvJitLink's C API over the same bridge to Python, served
by ``_nvjitlink_calls.py``: it links into the simulator's image, as
``cuLinkComplete`` does, answering the real library's codes and logs) and
``libgpuarray_serve_nvjitlink.so`` (``_hide_nvjitlink.c`` built to serve),
which :func:`environment` names in ``LD_AUDIT``: cuda-pathfinder finds the
installed file, as on a GPU machine, and the loader maps the stand-in's in
its place (the audit hook ``la_objsearch`` answers every name whose file name
starts with ``libnvJitLink`` with it).  ``GPUARRAY_STANDIN_NVJITLINK_REAL``
names the real file: LTO-IR is compiled to PTX by it, in the process
(``_nvjitlink_lto.py``), and its version is the one reported.  numba-cuda and
cuda.core's ``Linker`` then link through nvJitLink, numba-cuda with link-time
optimisation, as on a GPU machine.  Where none is installed nothing is
served: they link through the driver (``cuLinkCreate``/``cuLinkAddData``),
which hands the simulator the PTX, as on a GPU machine without nvJitLink.

``GPUARRAY_STANDIN_NVJITLINK=hide`` hides an installed nvJitLink instead (as
where one is installed but only the loader's cache knows its file): hidden
means absent, as on a machine without it: ``cuda.bindings.nvjitlink.version()``
raises cuda-pathfinder's ``DynamicLibNotFoundError``, the error on which
numba-cuda and cuda.core's ``Linker`` (1.1 and 1.2) link PTX through the
driver.  :func:`build` makes ``libgpuarray_hide_nvjitlink.so``
(``_hide_nvjitlink.c``) and :func:`environment` names it in ``LD_PRELOAD``
and ``LD_AUDIT``: cuda-pathfinder's file checks (``stat``) find no file whose
name starts with ``libnvJitLink``, and the dynamic loader refuses every such
path (``la_objsearch``), so nothing of that name is found or loaded.
``GPUARRAY_STANDIN_NVJITLINK=keep`` leaves the real nvJitLink (its cubins then
fail at launch, saying how to get PTX).  Any other value is refused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuarray._driver._userdir import untrusted_reason, user_cache_dir

__all__ = ["StandinUnavailableError", "SOURCE", "active", "build", "environment", "run", "main",
           "nvjitlink_findable", "nvjitlink_path", "standin_dir"]

#: The C source of the stand-in library.
SOURCE = Path(__file__).with_name("_libcuda.c")
#: The headers it includes (next to it): part of the build's key, shipped with it.
HEADERS = (Path(__file__).with_name("_libcuda_bridge.h"),)
#: Its second translation unit, generated from cuda.h (sim/tools/cuda_h/gen.py): every
#: entry point of cuda.h, NOT_SUPPORTED where ``SOURCE`` serves none.
ENTRY_POINTS = Path(__file__).with_name("_cuda_h.c")
#: The library that keeps the PTX of the cubins NVRTC makes (``_ptx_record.c``), preloaded
#: into every process of the command: the simulator runs that PTX when such a cubin is loaded.
PTX_RECORD_SOURCE = Path(__file__).with_name("_ptx_record.c")
PTX_RECORD = "libgpuarray_ptx_record.so"
#: Environment variable naming the stand-in's folder in processes that run over it.
MARK = "GPUARRAY_STANDIN"
_CFLAGS = ("-O2", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden", "-Wall",
           "-Wl,-soname,libcuda.so.1")
# After the source (the linker keeps a library only for what precedes it):
# dlsym for the Python C-API, looked up at run time (libc itself on glibc >= 2.34).
_LIBS = ("-ldl",)
#: The sonames cuda-pathfinder loads nvJitLink by (cu12, cu13).
_NVJITLINK = ("libnvJitLink.so.12", "libnvJitLink.so.13")
#: The library that hides an installed nvJitLink (``_hide_nvjitlink.c``), preloaded and
#: named in ``LD_AUDIT`` in commands that must not see it.
HIDE_SOURCE = Path(__file__).with_name("_hide_nvjitlink.c")
HIDE = "libgpuarray_hide_nvjitlink.so"
#: ``GPUARRAY_STANDIN_NVJITLINK``: unset (or ``serve``) replaces an installed nvJitLink with the
#: stand-in's, ``keep`` leaves the real one, ``hide`` hides it.
KEEP_NVJITLINK = "GPUARRAY_STANDIN_NVJITLINK"
#: The stand-in nvJitLink's C source (``_libnvjitlink.c``, with the driver's bridge header).
NVJITLINK_SOURCE = Path(__file__).with_name("_libnvjitlink.c")
#: Where it is built, under the stand-in's folder: not in the folder itself, which is first in
#: ``LD_LIBRARY_PATH`` -- a machine without nvJitLink must not find one by its soname.
NVJITLINK = "nvjitlink/libnvJitLink.so.13"
#: The audit library that sends every ``libnvJitLink*`` the loader is asked for to
#: :data:`NVJITLINK` (``_hide_nvjitlink.c`` built with ``-DGA_SERVE_NVJITLINK``).
SERVE = "libgpuarray_serve_nvjitlink.so"
#: Names the real nvJitLink's file in a command that is served the stand-in's
#: (``_nvjitlink_lto.py`` loads it for LTO-IR and its version).
REAL_NVJITLINK = "GPUARRAY_STANDIN_NVJITLINK_REAL"
_VERSION_SCRIPT = "libnvJitLink.so.13 { global: nvJitLink*; __nvJitLink*; local: *; };\n"


class StandinUnavailableError(RuntimeError):
    """The stand-in driver cannot be built here (no C compiler, or an untrusted folder)."""


def active() -> bool:
    """Whether this process was started over the stand-in driver (``GPUARRAY_STANDIN`` set)."""
    return bool(os.environ.get(MARK, "").strip())


def standin_dir() -> Path:
    """The folder the stand-in library is built into (it may not exist yet)."""
    return user_cache_dir("standin", "GPUARRAY_STANDIN_DIR")


def _compiler() -> str:
    for cc in (os.environ.get("CC", "").strip(), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    raise StandinUnavailableError(
        "no C compiler found (tried $CC, cc, gcc, clang): the stand-in driver is built "
        "from sim/gpuarray_sim/standin/_libcuda.c on first use; install one (e.g. gcc)")


def _check_trusted(d: Path) -> None:
    reason = untrusted_reason(d.stat())
    if reason is not None:
        raise StandinUnavailableError(
            f"gpuarray does not load a stand-in driver from {d}: {reason}; set "
            "GPUARRAY_STANDIN_DIR to a folder only you can write")


def build(verbose: bool = False) -> Path:
    """Build the stand-in library if needed; return the folder holding ``libcuda.so.1``.

    Parameters
    ----------
    verbose : bool, default False
        Say on stderr when a build runs.

    Returns
    -------
    pathlib.Path
        A folder whose ``libcuda.so.1`` is the stand-in for this source and compiler.

    Raises
    ------
    StandinUnavailableError
        No C compiler, an untrusted cache folder, or the compiler failed (its
        output is in the message).
    """
    cc = _compiler()
    source = (SOURCE.read_bytes() + ENTRY_POINTS.read_bytes()
              + b"".join(h.read_bytes() for h in HEADERS) + PTX_RECORD_SOURCE.read_bytes()
              + HIDE_SOURCE.read_bytes() + NVJITLINK_SOURCE.read_bytes())
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout.splitlines()[:1]
    except (OSError, subprocess.SubprocessError) as e:
        raise StandinUnavailableError(f"the C compiler {cc!r} does not run: {e}") from e
    key = hashlib.sha256(repr((source, cc, version, _CFLAGS, _LIBS, HIDE, SERVE, NVJITLINK,
                               _VERSION_SCRIPT)).encode()).hexdigest()[:16]
    root = standin_dir()
    out = root / key
    lib = out / "libcuda.so.1"
    if lib.is_file() and all(f.is_file() for f in (out / HIDE, out / PTX_RECORD, out / SERVE,
                                                   out / NVJITLINK)):
        _check_trusted(root)
        _check_trusted(out)
        return out
    os.makedirs(out, mode=0o700, exist_ok=True)
    _check_trusted(root)
    _check_trusted(out)
    tmp = out / f".libcuda.so.1.{os.getpid()}.tmp"
    if verbose:
        print(f"gpuarray standin: building {lib} with {cc}", file=sys.stderr)
    try:
        _compile(cc, [*_CFLAGS, "-o", str(tmp), str(SOURCE), str(ENTRY_POINTS), *_LIBS])
        os.makedirs(out / Path(NVJITLINK).parent, mode=0o700, exist_ok=True)
        script = out / f".nvjitlink.{os.getpid()}.map"
        script.write_text(_VERSION_SCRIPT)
        for name, src, extra in (
                (PTX_RECORD, PTX_RECORD_SOURCE, []), (HIDE, HIDE_SOURCE, []),
                (SERVE, HIDE_SOURCE, ["-DGA_SERVE_NVJITLINK"]),
                (NVJITLINK, NVJITLINK_SOURCE, [f"-Wl,--version-script={script}"])):
            part = out / Path(name).parent / f".{Path(name).name}.{os.getpid()}.tmp"
            try:
                _compile(cc, ["-O2", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden", "-Wall",
                              *extra, f"-Wl,-soname,{Path(name).name}", "-o", str(part), str(src),
                              *_LIBS])
                os.replace(part, out / name)
            finally:
                part.unlink(missing_ok=True)
        os.replace(tmp, lib)
    finally:
        tmp.unlink(missing_ok=True)
        (out / f".nvjitlink.{os.getpid()}.map").unlink(missing_ok=True)
    return out


def _compile(cc: str, args: list[str]) -> None:
    res = subprocess.run([cc, *args], capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise StandinUnavailableError(
            f"building the stand-in driver failed ({cc}, exit {res.returncode}):\n"
            f"{res.stderr.strip()}")


def nvjitlink_path(env: Mapping[str, str]) -> Path | None:
    """The real nvJitLink a command run with ``env`` would load, where its file is known.

    Where cuda-pathfinder looks for the file (an NVIDIA wheel in ``sys.path``,
    ``CONDA_PREFIX``, ``CUDA_PATH``/``CUDA_HOME``, ``LD_LIBRARY_PATH``), a
    ``libnvJitLink.so.13`` before a ``.so.12``.  A command whose interpreter has
    other site-packages than this one is judged by this one's.

    Parameters
    ----------
    env : mapping
        The command's environment.

    Returns
    -------
    pathlib.Path or None
        The file, or None when none is in those folders.
    """
    dirs = [Path(p) / "nvidia" / sub / "lib" for p in sys.path if p
            for sub in ("cu13", "cu12", "nvjitlink")]
    for var in ("CONDA_PREFIX", "CUDA_PATH", "CUDA_HOME"):
        if env.get(var):
            dirs += [Path(env[var]) / "lib", Path(env[var]) / "lib64"]
    dirs += [Path(p) for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    for name in reversed(_NVJITLINK):
        for d in dirs:
            if (d / name).is_file():
                return d / name
    return None


def nvjitlink_findable(env: Mapping[str, str]) -> bool:
    """Whether a command run with ``env`` could find a real nvJitLink (to serve ours or hide it).

    :func:`nvjitlink_path`'s folders, and the system's loader cache
    (``ctypes.util.find_library``).

    Parameters
    ----------
    env : mapping
        The command's environment.

    Returns
    -------
    bool
        True when some ``libnvJitLink.so.12``/``.13`` is there.
    """
    import ctypes.util

    return nvjitlink_path(env) is not None or ctypes.util.find_library("nvJitLink") is not None


def environment(folder: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a process that runs on the cuda backend over the stand-in in ``folder``.

    Parameters
    ----------
    folder : pathlib.Path
        What :func:`build` returned.
    base : mapping, optional
        The environment to start from (default ``os.environ``).

    Returns
    -------
    dict
        ``base`` with ``GPUARRAY_BACKEND=cuda``, ``folder`` first in
        ``LD_LIBRARY_PATH``, ``GPUARRAY_STANDIN`` set to ``folder``, the
        library that keeps NVRTC's PTX in ``LD_PRELOAD``, and for nvJitLink,
        by ``GPUARRAY_STANDIN_NVJITLINK``: unset or ``serve``, where the file
        of an installed one is known (:func:`nvjitlink_path`), the library
        that serves the stand-in's in its place in ``LD_AUDIT`` and
        ``GPUARRAY_STANDIN_NVJITLINK_REAL`` naming that file (an installed
        one whose file is not known is hidden); ``hide``, where one is
        installed (:func:`nvjitlink_findable`, or ``base`` is already a
        command's that hides it), the library that hides it in
        ``LD_PRELOAD`` and ``LD_AUDIT``; ``keep``: neither.

    Raises
    ------
    StandinUnavailableError
        ``GPUARRAY_STANDIN_NVJITLINK`` has another value.
    """
    env = dict(os.environ if base is None else base)
    ld = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = str(folder) + (os.pathsep + ld if ld else "")
    hide = [str(folder / HIDE)] if (folder / HIDE).is_file() else []
    serve = ([str(folder / SERVE)] if (folder / SERVE).is_file() and (folder / NVJITLINK).is_file()
             else [])
    record = [str(folder / PTX_RECORD)] if (folder / PTX_RECORD).is_file() else []
    ours = ("/" + HIDE, "/" + SERVE)
    old_pre = [p for p in env.get("LD_PRELOAD", "").split(":") if p]
    old_audit = [p for p in env.get("LD_AUDIT", "").split(":") if p]
    mode = env.get(KEEP_NVJITLINK, "").strip() or "serve"
    if mode not in ("serve", "keep", "hide"):
        raise StandinUnavailableError(f"{KEEP_NVJITLINK}={mode!r}: expected serve (the default), "
                                      "keep or hide")
    # within a command that hides nvJitLink, its files are hidden from nvjitlink_findable too
    was_hiding = any(p.endswith("/" + HIDE) for p in old_pre)
    real: str | None = None
    if mode == "serve" and serve:
        found = None if was_hiding else nvjitlink_path(env)
        if found is not None:
            real = str(found)
        elif any(p.endswith("/" + SERVE) for p in old_audit) and env.get(REAL_NVJITLINK):
            real = env[REAL_NVJITLINK]  # a command within a served one
    hiding = bool(hide) and real is None and mode != "keep" and (
        was_hiding or nvjitlink_findable(env))
    pre = [p for p in old_pre if p not in record and not p.endswith(ours)]
    audit = [p for p in old_audit if not p.endswith(ours)]
    env.pop(REAL_NVJITLINK, None)
    if real is not None:
        audit = serve + audit
        env[REAL_NVJITLINK] = real
    elif hiding:
        pre = hide + pre
        audit = hide + audit
    pre = record + pre
    for var, value in (("LD_PRELOAD", pre), ("LD_AUDIT", audit)):
        if value:
            env[var] = ":".join(value)
        else:
            env.pop(var, None)
    env["GPUARRAY_BACKEND"] = "cuda"
    env[MARK] = str(folder)
    return env


def run(argv: Sequence[str]) -> int:
    """Exec ``argv`` over the stand-in driver (returns only on failure: exit status 2).

    Parameters
    ----------
    argv : sequence of str
        The command and its arguments.

    Returns
    -------
    int
        2, after printing why, when the library cannot be built or the command
        cannot be started; otherwise this process becomes the command.
    """
    if not argv:
        print("python -m gpuarray standin: error: no command given "
              "(usage: python -m gpuarray standin -- COMMAND [ARGS...])", file=sys.stderr)
        return 2
    try:
        folder = build(verbose=True)
        env = environment(folder)
    except StandinUnavailableError as e:
        print(f"python -m gpuarray standin: error: {e}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], list(argv), env)
    except OSError as e:
        print(f"python -m gpuarray standin: error: cannot run {argv[0]!r}: {e}", file=sys.stderr)
    return 2


def main(argv: Sequence[str]) -> int:
    """``standin -- COMMAND``: :func:`run` with a leading ``--`` dropped (entry point of
    ``python -m gpuarray standin`` and ``python -m gpuarray_sim standin``)."""
    argv = list(argv)
    return run(argv[1:] if argv[:1] == ["--"] else argv)
