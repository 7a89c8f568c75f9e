"""The stand-in nvJitLink's calls: link states, their inputs, the linked image, the logs.

One concern: serving nvJitLink's C API (``_libnvjitlink.c``) as the real
library answers it, with the simulator's link: the output of
:func:`nvJitLinkComplete` is the image the stand-in driver's
``cuLinkComplete`` makes (``sim/_cubin.link_image``: each PTX and cubin
input in a section of its own), which ``cuModuleLoadData`` over the
stand-in loads and the simulator executes.  Inputs are judged by
``_link_inputs.py``, shared with the driver's linker; undefined functions
are refused at completion as the real library refuses them.

Matched against nvJitLink 13.5 (called directly, outside the stand-in):

- options (:func:`_parse`): an unknown option is
  ``NVJITLINK_ERROR_UNRECOGNIZED_OPTION`` ("unrecognized option: X"), no
  ``-arch=`` is ``NVJITLINK_ERROR_MISSING_ARCH`` (empty log); the
  architecture table (:data:`_SUPPORTED`, :data:`_UNSUPPORTED`; anything
  else is ``NVJITLINK_ERROR_UNRECOGNIZED_ARCH``); ``compute_XX`` without
  ``-ptx``, ``-ptx`` without ``-lto`` and ``-O3`` with ``-g`` are
  ``NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS``.  A failed create still hands
  back a handle, whose error log says why.
- a NULL handle, output pointer or buffer, or a NULL options array, is
  ``NVJITLINK_ERROR_NULL_INPUT``; NULL or empty data
  ``NVJITLINK_ERROR_INVALID_INPUT``; data that is not of its declared type
  ``NVJITLINK_ERROR_INCORRECT_INPUT_TYPE`` ("ERROR 1: bad input: does not
  match type NVJITLINK_INPUT_PTX" and the name); LTO-IR without ``-lto``
  ``NVJITLINK_ERROR_LTO_NOT_ENABLED``; bad PTX
  ``NVJITLINK_ERROR_PTX_COMPILE``.
- an empty link completes; an undefined function is
  ``NVJITLINK_ERROR_INTERNAL`` with "error   : Undefined reference to 'g'
  in 'u.ptx'" and "ERROR 9: complete" in the error log; ``-lto`` without
  LTO-IR is ``NVJITLINK_ERROR_NVVM_COMPILE``; a second completion, an input
  after completion and the cubin before it are ``NVJITLINK_ERROR_INTERNAL``;
  linked PTX without ``-lto -ptx`` is ``NVJITLINK_ERROR_INVALID_INPUT``.
- log sizes count the terminating NUL (0 for an empty log); the error log
  keeps every failed call's lines.

LTO-IR (``-lto``): compiled to PTX by the real library
(``_nvjitlink_lto.py``) at completion, then linked with the other inputs.
Not served: linked LTO-IR (``nvJitLinkGetLinkedLTOIR``), INDEX inputs; a
host object or archive is kept unread, as the driver's linker keeps it.
"""

from __future__ import annotations

import ctypes
import itertools
import re
from dataclasses import dataclass, field

from .. import _cubin, _fatbin, _images
from . import _link_inputs, _nvjitlink_lto

__all__ = ["NvJitLinkError", "INTERNAL", "nvJitLinkCreate", "nvJitLinkDestroy",
           "nvJitLinkAddData", "nvJitLinkAddFile", "nvJitLinkComplete",
           "nvJitLinkGetLinkedCubinSize", "nvJitLinkGetLinkedCubin", "nvJitLinkGetLinkedPtxSize",
           "nvJitLinkGetLinkedPtx", "nvJitLinkGetLinkedLTOIRSize", "nvJitLinkGetLinkedLTOIR",
           "nvJitLinkGetErrorLogSize", "nvJitLinkGetErrorLog", "nvJitLinkGetInfoLogSize",
           "nvJitLinkGetInfoLog", "nvJitLinkVersion"]

(UNRECOGNIZED_OPTION, MISSING_ARCH, INVALID_INPUT, PTX_COMPILE, NVVM_COMPILE, INTERNAL) = range(1, 7)
(UNRECOGNIZED_INPUT, NULL_INPUT, INCOMPATIBLE_OPTIONS, INCORRECT_INPUT_TYPE,
 ARCH_MISMATCH) = (8, 10, 11, 12, 13)
UNRECOGNIZED_ARCH, UNSUPPORTED_ARCH, LTO_NOT_ENABLED = 16, 17, 18
_TYPES = {1: "CUBIN", 2: "PTX", 3: "LTOIR", 4: "FATBIN", 5: "OBJECT", 6: "LIBRARY", 10: "ANY"}
#: The architectures nvJitLink 13.5 links for (``sm_``, ``lto_``; ``a`` taken for each, ``f``
#: from 100 on), and those it knows and no longer supports; any other is unrecognised.
_SUPPORTED = frozenset({75, 80, 86, 87, 88, 89, 90, 100, 103, 107, 110, 120, 121})
_UNSUPPORTED = frozenset({10, 11, 12, 13, 20, 21, 30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72,
                          73, 101, 102})
_FLAGS = frozenset({"-lto", "-ptx", "-g", "-lineinfo", "-time", "-verbose",
                    "-optimize-unused-variables", "-no-cache"})
_VALUED = ("-arch=", "-maxrregcount=", "-ftz=", "-prec-div=", "-prec-sqrt=", "-fma=",
           "-kernels-used=", "-variables-used=", "-Xptxas=", "-Xnvvm=", "-split-compile=",
           "-split-compile-extended=", "-jump-table-density=", "-lto=")
_ARCH = re.compile(r"(sm|compute|lto)_0*(\d+)([af]?)")
_LTOIR_MAGIC = b"\xedCN\x7f"


class NvJitLinkError(Exception):
    """A call the real nvJitLink would fail: ``code`` is its ``nvJitLinkResult``."""

    def __init__(self, code: int, call: str, detail: str) -> None:
        super().__init__(f"{call}: nvJitLinkResult {code} {detail}")
        self.code = code


@dataclass
class _Link:
    options: list[str]
    arch: int = 0
    lto: bool = False
    ptx: bool = False
    inputs: list[tuple[str, bytes]] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    ltoir: list[tuple[bytes, str]] = field(default_factory=list)
    unread: bool = False  # a host object or an archive was added: its symbols are not read
    error_log: str = ""
    completed: bool = False
    cubin: bytes | None = None
    linked_ptx: bytes | None = None

    def fail(self, code: int, call: str, *lines: str) -> NvJitLinkError:
        """Append ``lines`` to the error log; the error to raise."""
        self.error_log += "".join(line + "\n" for line in lines)
        return NvJitLinkError(code, call, "; ".join(lines))


_LINKS: dict[int, _Link] = {}
_handles = itertools.count(0x6E00_0010, 0x10)  # next() is atomic: two threads never share one
_SIZE = ctypes.c_size_t


def _state(call: str, handle: int) -> _Link:
    link = _LINKS.get(handle)
    if link is None:
        raise NvJitLinkError(NULL_INPUT, call, f"({handle:#x} is not a link handle)")
    return link


def _parse(link: _Link) -> None:
    """Check ``link.options`` as nvJitLinkCreate does; set its architecture and modes."""
    call = "nvJitLinkCreate"
    arch: re.Match[str] | None = None
    arch_text, opt_level, debug = "", None, False
    for opt in link.options:
        if opt.startswith("-O") and opt[2:].isdigit():
            opt_level = int(opt[2:])
            if opt_level not in (0, 3):
                raise link.fail(UNRECOGNIZED_OPTION, call, f"unsupported value of -O: {opt_level}. "
                                                           "Only 0 and 3 are supported.")
        elif opt.startswith("-arch="):
            arch_text = opt[len("-arch="):]
            arch = _ARCH.match(arch_text)
            if arch is None:
                raise link.fail(UNRECOGNIZED_OPTION, call, "ERROR NVJITLINK_ERROR_UNRECOGNIZED_"
                                                           f"OPTION: missing option value ({opt})")
        elif opt in _FLAGS or opt.startswith(_VALUED):
            link.lto |= opt == "-lto" or opt.startswith("-lto=")
            link.ptx |= opt == "-ptx"
            debug |= opt == "-g"
        else:
            raise link.fail(UNRECOGNIZED_OPTION, call, f"unrecognized option: {opt}")
    if arch is None:
        raise link.fail(MISSING_ARCH, call)
    kind, number, suffix = arch.group(1), int(arch.group(2)), arch.group(3)
    name = f"compute_{number}{suffix}"
    if number in _UNSUPPORTED or suffix == "f" and number in _SUPPORTED and number < 100:
        raise link.fail(UNSUPPORTED_ARCH, call, "ERROR NVJITLINK_ERROR_UNSUPPORTED_ARCH: "
                                                f"unsupported architecture ({name})")
    if number not in _SUPPORTED:
        raise link.fail(UNRECOGNIZED_ARCH, call, "ERROR NVJITLINK_ERROR_UNRECOGNIZED_ARCH: "
                                                 f"unrecognized architecture ({name})")
    if kind == "compute" and not link.ptx:
        raise link.fail(INCOMPATIBLE_OPTIONS, call, "ERROR: virtual arch requires -ptx")
    if link.ptx and not link.lto:
        raise link.fail(INCOMPATIBLE_OPTIONS, call, "ERROR: -ptx requires -lto")
    if debug and opt_level == 3:
        raise link.fail(INCOMPATIBLE_OPTIONS, call,
                        "ERROR: optimized debugging not supported; use -O0 with -g")
    link.arch = number


def nvJitLinkCreate(phandle: int, n: int, options: int) -> None:
    call = "nvJitLinkCreate"
    if not phandle or not options:
        raise NvJitLinkError(NULL_INPUT, call, "(NULL handle pointer or options)")
    ptrs: list[bytes | None] = list((ctypes.c_char_p * n).from_address(options)) if n else []
    if any(p is None for p in ptrs):
        raise NvJitLinkError(NULL_INPUT, call, "(a NULL option)")
    link = _Link([p.decode("utf-8", "replace") for p in ptrs if p is not None])
    handle = next(_handles)
    _LINKS[handle] = link  # handed back even when the options fail: its log says why
    ctypes.c_void_p.from_address(phandle).value = handle
    _parse(link)


def nvJitLinkDestroy(phandle: int) -> None:
    call = "nvJitLinkDestroy"
    if not phandle:
        raise NvJitLinkError(NULL_INPUT, call, "(NULL handle pointer)")
    handle = ctypes.c_void_p.from_address(phandle)
    _state(call, handle.value or 0)
    del _LINKS[handle.value or 0]
    handle.value = None


def _is_ptx(data: bytes) -> bool:
    return (not data.startswith((_cubin.ELF_MAGIC, _fatbin.FATBIN_MAGIC, _LTOIR_MAGIC))
            and b".version" in data.split(b"\0", 1)[0])


def _detect(data: bytes) -> str | None:
    """The input type of ``data`` for NVJITLINK_INPUT_ANY (None: none)."""
    if data.startswith(_cubin.ELF_MAGIC):
        return "CUBIN" if data[18:20] == _cubin.EM_CUDA.to_bytes(2, "little") else "OBJECT"
    if data.startswith(_fatbin.FATBIN_MAGIC):
        return "FATBIN"
    if data.startswith(_LTOIR_MAGIC):
        return "LTOIR"
    if data.startswith(b"!<arch>\n"):
        return "LIBRARY"
    return "PTX" if _is_ptx(data) else None


def _lto_member(data: bytes, arch: int) -> bytes | None:
    """The LTO-IR member of fatbin ``data`` for ``sm_<arch>`` (None: none)."""
    try:
        members = [m for m in _fatbin.read_fatbin(data) if m.kind == "ltoir" and m.arch <= arch]
        return max(members, key=lambda m: m.arch).payload() if members else None
    except _cubin.BinaryError:
        return None


def _add(link: _Link, call: str, kind: int, data: bytes, name: str) -> None:
    if link.completed:
        raise link.fail(INTERNAL, call, f"ERROR 1: empty elfw when adding cubin{name}")
    what = _TYPES.get(kind)
    if what == "ANY":
        what = _detect(data)
        if what is None:
            raise link.fail(UNRECOGNIZED_INPUT, call, f"unrecognized input type: {name}")
    if what is None:
        raise link.fail(INCORRECT_INPUT_TYPE, call, f"unsupported input type: {name}")
    mismatch = f"ERROR 1: bad input: does not match type NVJITLINK_INPUT_{what}{name}"
    if what in ("OBJECT", "LIBRARY"):
        if not _link_inputs.unread_input(what.lower(), data):
            raise link.fail(INCORRECT_INPUT_TYPE, call, mismatch)
        link.unread = True  # its kernels and symbols are not read here
        return
    if what == "LTOIR" or what == "FATBIN" and link.lto and data.startswith(_fatbin.FATBIN_MAGIC):
        ltoir = data if what == "LTOIR" else _lto_member(data, link.arch)
        if what == "LTOIR" and not data.startswith(_LTOIR_MAGIC):
            raise link.fail(INCORRECT_INPUT_TYPE, call, mismatch)
        if ltoir is not None:
            if not link.lto:
                raise link.fail(LTO_NOT_ENABLED, call, "ERROR 1: LTO-IR input cannot be used "
                                                       "without LTO enabled (-lto)")
            link.ltoir.append((ltoir, name))
            return
    magic = {"CUBIN": _cubin.ELF_MAGIC, "FATBIN": _fatbin.FATBIN_MAGIC}.get(what)
    if magic is not None and not data.startswith(magic) or what == "PTX" and not _is_ptx(data):
        raise link.fail(INCORRECT_INPUT_TYPE, call, mismatch)
    try:
        found, data = _link_inputs.code_input(data, link.arch)
    except _images.ImageError as e:
        if what == "PTX":
            raise link.fail(PTX_COMPILE, call, f"ptxas fatal   : {e.reason}",
                            f"ERROR NVJITLINK_ERROR_PTX_COMPILE: JIT the PTX ({name})") from None
        code = ARCH_MISMATCH if "no binary for this device" in e.reason else INCORRECT_INPUT_TYPE
        raise link.fail(code, call, f"ERROR 1: {e.reason} ({name})") from None
    link.inputs.append((found, data))
    link.labels.append(name)


def nvJitLinkAddData(handle: int, kind: int, data: int, size: int, name: int) -> None:
    call = "nvJitLinkAddData"
    link = _state(call, handle)
    if not data or not size:
        raise NvJitLinkError(INVALID_INPUT, call, "(NULL or empty data)")
    label = ctypes.string_at(name).decode("utf-8", "replace") if name else "(null)"
    _add(link, call, kind, ctypes.string_at(data, size), label)


def nvJitLinkAddFile(handle: int, kind: int, path: int) -> None:
    call = "nvJitLinkAddFile"
    link = _state(call, handle)
    if not path:
        raise NvJitLinkError(NULL_INPUT, call, "(NULL file name)")
    fname = ctypes.string_at(path).decode("utf-8", "replace")
    try:
        with open(fname, "rb") as f:
            data = f.read()
    except OSError:
        raise link.fail(INVALID_INPUT, call, f"no such file: {fname}") from None
    if not data:
        raise NvJitLinkError(INVALID_INPUT, call, f"({fname} is empty)")
    _add(link, call, kind, data, fname)


def nvJitLinkComplete(handle: int) -> None:
    call = "nvJitLinkComplete"
    link = _state(call, handle)
    if link.completed:
        raise NvJitLinkError(INTERNAL, call, "(the link was completed already)")
    link.completed = True
    inputs, labels = list(link.inputs), list(link.labels)
    if link.lto:
        if not link.ltoir:
            raise link.fail(NVVM_COMPILE, call, "ERROR NVVM_ERROR_NO_MODULE_IN_PROGRAM (8) in "
                                                "nvvmCompileProgram callback")
        try:
            rc, ptx, log = _nvjitlink_lto.lto_to_ptx(link.options, link.ltoir)
        except _nvjitlink_lto.RealNvJitLinkError as e:
            raise link.fail(INTERNAL, call, f"ERROR: the simulator links PTX only, and the LTO-IR "
                                            f"inputs need NVIDIA's nvJitLink: {e}") from None
        if rc != 0:
            link.error_log += log
            raise NvJitLinkError(rc, call, f"(the real nvJitLink, linking the LTO-IR: {log})")
        if link.ptx:
            link.linked_ptx = ptx
            return
        inputs.append(("ptx", ptx))
        labels.append(link.ltoir[0][1])
    image = _cubin.link_image(inputs, link.arch)
    missing = [] if link.unread else _link_inputs.undefined(image, inputs)
    if missing:  # the real library's words, and its code: NVJITLINK_ERROR_INTERNAL
        raise link.fail(INTERNAL, call, *[
            f"error   : Undefined reference to '{n}' in '{_link_inputs.user_of(inputs, labels, n)}'"
            for n in missing], "ERROR 9: complete")
    link.cubin = image


def _size_out(call: str, handle: int, p: int) -> _Link:
    link = _state(call, handle)
    if not p:
        raise NvJitLinkError(NULL_INPUT, call, "(NULL size pointer)")
    return link


def _buffer_out(call: str, handle: int, buf: int) -> _Link:
    link = _state(call, handle)
    if not buf:  # before whether there is anything to write, as the real library answers
        raise NvJitLinkError(NULL_INPUT, call, "(NULL buffer)")
    return link


def _write(buf: int, data: bytes) -> None:
    ctypes.memmove(buf, data, len(data))


def _cubin_of(call: str, link: _Link) -> bytes:
    if link.cubin is None:
        raise NvJitLinkError(INTERNAL, call, "(no linked cubin: the link is not complete, failed, "
                                             "or made PTX (-ptx))")
    return link.cubin


def nvJitLinkGetLinkedCubinSize(handle: int, p: int) -> None:
    call = "nvJitLinkGetLinkedCubinSize"
    _SIZE.from_address(p).value = len(_cubin_of(call, _size_out(call, handle, p)))


def nvJitLinkGetLinkedCubin(handle: int, buf: int) -> None:
    call = "nvJitLinkGetLinkedCubin"
    _write(buf, _cubin_of(call, _buffer_out(call, handle, buf)))


def _ptx_of(call: str, link: _Link) -> bytes:
    if not link.ptx:
        raise NvJitLinkError(INVALID_INPUT, call, "(linked PTX needs -lto -ptx)")
    if link.linked_ptx is None:
        raise NvJitLinkError(INTERNAL, call, "(the link is not complete, or failed)")
    return link.linked_ptx


def nvJitLinkGetLinkedPtxSize(handle: int, p: int) -> None:
    call = "nvJitLinkGetLinkedPtxSize"
    _SIZE.from_address(p).value = len(_ptx_of(call, _size_out(call, handle, p)))


def nvJitLinkGetLinkedPtx(handle: int, buf: int) -> None:
    call = "nvJitLinkGetLinkedPtx"
    _write(buf, _ptx_of(call, _buffer_out(call, handle, buf)))


def _no_ltoir(call: str, link: _Link) -> NvJitLinkError:
    return NvJitLinkError(INVALID_INPUT, call, "(the simulator's nvJitLink makes no linked "
                                               "LTO-IR)" if link.lto else "(it needs -lto)")


def nvJitLinkGetLinkedLTOIRSize(handle: int, p: int) -> None:
    call = "nvJitLinkGetLinkedLTOIRSize"
    raise _no_ltoir(call, _size_out(call, handle, p))


def nvJitLinkGetLinkedLTOIR(handle: int, buf: int) -> None:
    call = "nvJitLinkGetLinkedLTOIR"
    raise _no_ltoir(call, _buffer_out(call, handle, buf))


def _log_bytes(text: str) -> bytes:
    return text.encode() + b"\0" if text else b""


def nvJitLinkGetErrorLogSize(handle: int, p: int) -> None:
    call = "nvJitLinkGetErrorLogSize"
    _SIZE.from_address(p).value = len(_log_bytes(_size_out(call, handle, p).error_log))


def nvJitLinkGetErrorLog(handle: int, buf: int) -> None:
    call = "nvJitLinkGetErrorLog"
    _write(buf, _log_bytes(_buffer_out(call, handle, buf).error_log))


def nvJitLinkGetInfoLogSize(handle: int, p: int) -> None:
    call = "nvJitLinkGetInfoLogSize"
    _size_out(call, handle, p)
    _SIZE.from_address(p).value = 0  # the simulator's link reports nothing


def nvJitLinkGetInfoLog(handle: int, buf: int) -> None:
    _buffer_out("nvJitLinkGetInfoLog", handle, buf)  # the simulator's link reports nothing


def nvJitLinkVersion(pmajor: int, pminor: int) -> None:
    call = "nvJitLinkVersion"
    if not pmajor or not pminor:
        raise NvJitLinkError(NULL_INPUT, call, "(NULL output pointer)")
    try:  # the real library's: the one the stand-in replaces
        major, minor = _nvjitlink_lto.real_version()
    except _nvjitlink_lto.RealNvJitLinkError:
        major, minor = 13, 0  # none named (GPUARRAY_STANDIN_NVJITLINK_REAL): the soname's
    ctypes.c_uint.from_address(pmajor).value = major
    ctypes.c_uint.from_address(pminor).value = minor
