"""NVRTC: compile one translation unit to CUBIN (or PTX) for one architecture.

The only module of the kernels layer that imports ``cuda.bindings.nvrtc``
(lazily, on first compile).  Target choice (:func:`select_target`): CUBIN for
the device's real architecture ``sm_XY`` when this NVRTC supports it (a CUBIN
loads on any driver new enough for the device, whereas PTX from an NVRTC newer
than the driver is rejected); PTX for the newest supported ``compute_XY`` not
above the device when NVRTC does not know the device yet (the driver JIT
compiles it); an error when the device is older than every supported arch.
Failures raise :class:`gpuarray.errors.NvrtcError` with the log, the options
and the source.

:class:`Toolchain` is what the rest of the kernels layer needs to know of
NVRTC before compiling (version, architectures, and which library it is):
:func:`loaded_toolchain` asks the loaded library, while
:mod:`._toolchain` remembers the answer on disk so that a warm kernel cache
never loads NVRTC.  Output buffers handed to NVRTC are fresh ``bytearray``
objects: NVRTC writes into them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ..errors import NvrtcError
from . import _nvrtc_id

__all__ = [
    "Target",
    "Toolchain",
    "StaleToolchain",
    "loaded_toolchain",
    "nvrtc_version",
    "supported_archs",
    "select_target",
    "compile_options",
    "compile_program",
]

#: Options every kernel is compiled with (besides the architecture).  No
#: fast-math: conversions must round and keep subnormals as NumPy does.
BASE_OPTIONS = ("-std=c++17",)


# NamedTuples rather than frozen dataclasses: a tenth of the class-creation
# cost, which every process pays at its first kernel operation.
class Target(NamedTuple):
    """What NVRTC produces: ``kind`` ``"cubin"`` or ``"ptx"``, and ``arch`` (``sm_90``/``compute_90``)."""

    kind: str
    arch: str


class Toolchain(NamedTuple):
    """The NVRTC that compiles: ``version`` ``(major, minor)``, ``archs`` it supports, ``ident``.

    ``ident`` is :func:`gpuarray._kernels._nvrtc_id.fingerprint` (which
    library file, found without loading it).
    """

    version: tuple[int, int]
    archs: tuple[int, ...]
    ident: str


class StaleToolchain(Exception):
    """The NVRTC loaded to compile is not the one the remembered :class:`Toolchain` describes."""

    def __init__(self, expected: Toolchain, loaded: Toolchain) -> None:
        self.expected = expected
        self.loaded = loaded
        super().__init__(f"remembered {expected}, loaded {loaded}")


def loaded_toolchain() -> Toolchain:
    """The :class:`Toolchain` of the NVRTC library, loading it if needed (0.1-0.2 s the first time)."""
    return Toolchain(nvrtc_version(), supported_archs(), _nvrtc_id.fingerprint())


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:  # pragma: no cover - NVRTC is a dependency
        raise NvrtcError(f"NVRTC is not available ({e}); install the extra for your "
                         'driver\'s CUDA: pip install "gpuarray[cu13]" (or "gpuarray[cu12]")') from e
    return nvrtc


def _call(result, what: str):
    """Unpack a cuda.bindings NVRTC result tuple, raising on failure."""
    err, *rest = result
    if int(err) != 0:
        nv = _nvrtc()
        _, text = nv.nvrtcGetErrorString(err)
        name = getattr(err, "name", str(err))
        raise NvrtcError(f"{what} failed: {name} ({text.decode(errors='replace')})")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    """``(major, minor)`` of the NVRTC library in use."""
    major, minor = _call(_nvrtc().nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


@functools.lru_cache(maxsize=1)
def supported_archs() -> tuple[int, ...]:
    """Architectures this NVRTC compiles for, as ``10 * major + minor`` (e.g. 90)."""
    nv = _nvrtc()
    archs = _call(nv.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")
    return tuple(sorted(int(a) for a in archs))


def select_target(major: int, minor: int, archs: Sequence[int] | None = None,
                  version: tuple[int, int] | None = None) -> Target:
    """The compilation target for a device of compute capability ``major.minor``.

    Parameters
    ----------
    major, minor : int
        The device's compute capability.
    archs : sequence of int, optional
        What NVRTC supports (:func:`supported_archs`, asked when omitted).
    version : tuple of int, optional
        NVRTC's version, for the error message (asked when omitted).

    Raises
    ------
    NvrtcError
        If the device is older than every architecture NVRTC supports.

    Examples
    --------
    >>> select_target(9, 0)
    Target(kind='cubin', arch='sm_90')
    """
    cc = 10 * int(major) + int(minor)
    archs = tuple(sorted(archs)) if archs is not None else supported_archs()
    if cc in archs:
        return Target("cubin", f"sm_{cc}")
    older = [a for a in archs if a <= cc]
    if not older:
        raise NvrtcError(
            f"NVRTC {'.'.join(map(str, version or nvrtc_version()))} cannot compile for compute "
            f"capability {major}.{minor}: it supports sm_{archs[0]} and newer")
    return Target("ptx", f"compute_{max(older)}")


#: Added by ``compile_options(fast=True)`` (NVRTC >= 12.8): minimal device
#: optimisation, for images that are only checked, never run (the simulator).
FAST_OPTIONS = ("--Ofast-compile=max",)


def compile_options(target: Target, fast: bool = False,
                    version: tuple[int, int] | None = None) -> list[str]:
    """The NVRTC options for ``target``.

    Parameters
    ----------
    target : Target
    fast : bool
        Trade device code quality for compile time (about 3x faster): for
        images that are checked but never run, as with the simulator.
        Ignored before NVRTC 12.8.
    version : tuple of int, optional
        NVRTC's version (:func:`nvrtc_version`, asked when omitted).
    """
    opts = list(BASE_OPTIONS) + [f"--gpu-architecture={target.arch}"]
    if fast and tuple(version or nvrtc_version()) >= (12, 8):
        opts += FAST_OPTIONS
    return opts


def compile_program(source: str, headers: Mapping[str, str], options: Sequence[str],
                    kind: str, name: str = "gpuarray_kernels.cu") -> bytes:
    """Compile ``source`` with NVRTC and return the image.

    Parameters
    ----------
    source : str
        The translation unit.
    headers : mapping of str to str
        Include name -> text, resolvable by ``#include "name"``.
    options : sequence of str
        NVRTC options (they name the architecture).
    kind : {"cubin", "ptx"}
        What to return; ``ptx`` is NUL-terminated, ready for ``cuModuleLoadData``.
    name : str
        Program name shown in the log.

    Returns
    -------
    bytes

    Raises
    ------
    NvrtcError
        If NVRTC fails; carries the log, the options and the source.
    """
    nv = _nvrtc()
    hnames = list(headers)
    prog = _call(nv.nvrtcCreateProgram(
        source.encode(), name.encode(), len(hnames),
        [headers[h].encode() for h in hnames], [h.encode() for h in hnames]),
        "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        (err,) = nv.nvrtcCompileProgram(prog, len(opts), opts)
        if int(err) != 0:
            log = _log(nv, prog)
            raise NvrtcError(
                f"nvrtcCompileProgram failed: {getattr(err, 'name', err)} while compiling "
                f"{name}", log, list(options), source)
        if kind == "cubin":
            size = _call(nv.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            buf = _out_buffer(size)
            _call(nv.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
            return bytes(buf)
        size = _call(nv.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
        buf = _out_buffer(size)
        _call(nv.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
        out = bytes(buf)
        return out if out.endswith(b"\0") else out + b"\0"
    finally:
        nv.nvrtcDestroyProgram(prog)


def _out_buffer(size) -> bytearray:
    """A fresh writable buffer for NVRTC to fill.

    Never ``b" " * size``: NVRTC writes through the pointer, and for size 1
    that expression is the interpreter's shared ``b" "`` object.
    """
    return bytearray(int(size))


def _log(nv, prog) -> str:
    try:
        size = _call(nv.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = _out_buffer(size)
        _call(nv.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    except NvrtcError as e:
        return f"(no log: {e})"
    return bytes(buf).rstrip(b"\0").decode(errors="replace")
