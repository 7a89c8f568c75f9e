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

nvJitLink is hidden from the command: the simulator executes PTX, and a
cubin that nvJitLink linked (from numba-cuda's LTO-IR, say) carries none.
:func:`build` also makes two empty libraries named ``libnvJitLink.so.12`` and
``.13``, and :func:`environment` preloads them (``LD_PRELOAD``): cuda-pathfinder
uses a library already loaded under its name, finds no ``__nvJitLinkVersion``
in it, and numba-cuda and cuda.core then do what they do on a machine
without nvJitLink -- link PTX through the driver (``cuLinkCreate``/
``cuLinkAddData``), which hands the simulator the PTX.
``GPUARRAY_STANDIN_NVJITLINK=keep`` leaves nvJitLink visible (its cubins then
fail at launch, saying how to get PTX).
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
           "standin_dir"]

#: The C source of the stand-in library.
SOURCE = Path(__file__).with_name("_libcuda.c")
#: The headers it includes (next to it): part of the build's key, shipped with it.
HEADERS = (Path(__file__).with_name("_libcuda_bridge.h"),)
#: Its second translation unit, generated from cuda.h (sim/tools/cuda_h/gen.py): every
#: entry point of cuda.h, NOT_SUPPORTED where ``SOURCE`` serves none.
ENTRY_POINTS = Path(__file__).with_name("_cuda_h.c")
#: Environment variable naming the stand-in's folder in processes that run over it.
MARK = "GPUARRAY_STANDIN"
_CFLAGS = ("-O2", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden", "-Wall",
           "-Wl,-soname,libcuda.so.1")
# After the source (the linker keeps a library only for what precedes it):
# dlsym for the Python C-API, looked up at run time (libc itself on glibc >= 2.34).
_LIBS = ("-ldl",)
#: The empty libraries that hide nvJitLink from commands over the stand-in (cu12, cu13).
_HIDE = ("libnvJitLink.so.12", "libnvJitLink.so.13")
#: ``GPUARRAY_STANDIN_NVJITLINK=keep`` leaves nvJitLink visible.
KEEP_NVJITLINK = "GPUARRAY_STANDIN_NVJITLINK"


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
              + b"".join(h.read_bytes() for h in HEADERS))
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout.splitlines()[:1]
    except (OSError, subprocess.SubprocessError) as e:
        raise StandinUnavailableError(f"the C compiler {cc!r} does not run: {e}") from e
    key = hashlib.sha256(repr((source, cc, version, _CFLAGS, _LIBS, _HIDE)).encode()).hexdigest()[:16]
    root = standin_dir()
    out = root / key
    lib = out / "libcuda.so.1"
    if lib.is_file() and all((out / name).is_file() for name in _HIDE):
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
        for name in _HIDE:  # empty libraries that hide nvJitLink (see the module's docstring)
            stub = out / f".{name}.{os.getpid()}.tmp"
            try:
                _compile(cc, ["-shared", "-fPIC", f"-Wl,-soname,{name}", "-x", "c", "-o",
                              str(stub), "-"], stdin="")
                os.replace(stub, out / name)
            finally:
                stub.unlink(missing_ok=True)
        os.replace(tmp, lib)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _compile(cc: str, args: list[str], stdin: str | None = None) -> None:
    res = subprocess.run([cc, *args], input=stdin, capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise StandinUnavailableError(
            f"building the stand-in driver failed ({cc}, exit {res.returncode}):\n"
            f"{res.stderr.strip()}")


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
        ``LD_LIBRARY_PATH``, ``GPUARRAY_STANDIN`` set to ``folder``, and the
        libraries that hide nvJitLink in ``LD_PRELOAD`` (unless
        ``GPUARRAY_STANDIN_NVJITLINK=keep``).
    """
    env = dict(os.environ if base is None else base)
    ld = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = str(folder) + (os.pathsep + ld if ld else "")
    hide = [str(folder / name) for name in _HIDE if (folder / name).is_file()]
    pre = [p for p in env.get("LD_PRELOAD", "").split(":") if p and p not in hide]
    if env.get(KEEP_NVJITLINK) != "keep":
        pre = hide + pre
    if pre:
        env["LD_PRELOAD"] = ":".join(pre)
    else:
        env.pop("LD_PRELOAD", None)
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
    except StandinUnavailableError as e:
        print(f"python -m gpuarray standin: error: {e}", file=sys.stderr)
        return 2
    env = environment(folder)
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
