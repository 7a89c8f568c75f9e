"""The real nvJitLink, for what the simulator cannot do itself: LTO-IR to PTX, and its version.

One concern: reaching the nvJitLink installed on the machine (the one the
stand-in replaces) from a process over the stand-in.  The simulator links
PTX; LTO-IR (NVVM's ``-gen-lto`` output, which numba-cuda makes for every
kernel when an nvJitLink is there) must first be optimised and compiled to
PTX, which only NVIDIA's library does.  :func:`lto_to_ptx` asks it for that
(``-lto -ptx``: no ptxas, no cubin), in this process.

Where: ``GPUARRAY_STANDIN_NVJITLINK_REAL`` (set by the stand-in's
``environment()``: the file cuda-pathfinder would have loaded).  How: the
file is opened and loaded through ``/proc/self/fd/N`` -- a name that does not
start with ``libnvJitLink``, so the loader's audit hook that sends every
such name to the stand-in (``_hide_nvjitlink.c``) lets it through -- with
``RTLD_LOCAL | RTLD_DEEPBIND``, so its own symbols are never the stand-in's
of the same names.  Loaded once, on first use (about 10 ms); a link of one
kernel's LTO-IR to PTX takes about 4 ms.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

__all__ = ["REAL", "RealNvJitLinkError", "available", "real_version", "lto_to_ptx"]

#: The environment variable naming the real library's file.
REAL = "GPUARRAY_STANDIN_NVJITLINK_REAL"
_LTOIR = 3
_lock = threading.Lock()
_lib: list[Any] = []  # [CDLL] once loaded


class RealNvJitLinkError(RuntimeError):
    """The real nvJitLink is not there, or cannot be loaded (the message says which file and why)."""


def available() -> bool:
    """Whether this process names a real nvJitLink to use (``GPUARRAY_STANDIN_NVJITLINK_REAL``)."""
    return bool(os.environ.get(REAL, "").strip())


def _load() -> Any:
    with _lock:
        if _lib:
            return _lib[0]
        path = os.environ.get(REAL, "").strip()
        if not path:
            raise RealNvJitLinkError(
                f"no real nvJitLink is named ({REAL} is not set): the simulator links PTX "
                "only, and LTO-IR must be compiled to PTX by NVIDIA's nvJitLink")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise RealNvJitLinkError(f"the real nvJitLink {path}: {e.strerror}") from None
        try:
            lib = ctypes.CDLL(f"/proc/self/fd/{fd}",
                              mode=os.RTLD_LOCAL | getattr(os, "RTLD_DEEPBIND", 0))
        except OSError as e:
            raise RealNvJitLinkError(f"the real nvJitLink {path} does not load: {e}") from None
        finally:
            os.close(fd)  # the mapping stays
        vp, sz = ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)
        for name, args in (  # nvJitLink.h's prototypes (a handle is a pointer)
                ("nvJitLinkCreate", [ctypes.POINTER(vp), ctypes.c_uint32,
                                     ctypes.POINTER(ctypes.c_char_p)]),
                ("nvJitLinkAddData", [vp, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                      ctypes.c_char_p]),
                ("nvJitLinkComplete", [vp]),
                ("nvJitLinkGetLinkedPtxSize", [vp, sz]), ("nvJitLinkGetLinkedPtx", [vp, vp]),
                ("nvJitLinkGetErrorLogSize", [vp, sz]), ("nvJitLinkGetErrorLog", [vp, vp]),
                ("nvJitLinkDestroy", [ctypes.POINTER(vp)]),
                ("nvJitLinkVersion", [ctypes.POINTER(ctypes.c_uint)] * 2)):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        _lib.append(lib)
        return lib


def real_version() -> tuple[int, int]:
    """The real library's ``nvJitLinkVersion()`` (major, minor).

    Raises
    ------
    RealNvJitLinkError
        None is named, or it does not load or answer.
    """
    lib = _load()
    major, minor = ctypes.c_uint(), ctypes.c_uint()
    rc = lib.nvJitLinkVersion(ctypes.byref(major), ctypes.byref(minor))
    if rc != 0:
        raise RealNvJitLinkError(f"the real nvJitLinkVersion answered {rc}")
    return major.value, minor.value


def _log(lib: Any, h: ctypes.c_void_p) -> str:
    size = ctypes.c_size_t()
    if lib.nvJitLinkGetErrorLogSize(h, ctypes.byref(size)) != 0 or not size.value:
        return ""
    buf = ctypes.create_string_buffer(size.value + 1)
    lib.nvJitLinkGetErrorLog(h, buf)
    return buf.value.decode("utf-8", "replace")


def lto_to_ptx(options: list[str], inputs: list[tuple[bytes, str]]) -> tuple[int, bytes, str]:
    """Link LTO-IR ``inputs`` (data, name) with ``options`` (``-lto -ptx`` added) to PTX.

    Returns
    -------
    tuple
        ``(result, ptx, error_log)``: the real library's nvJitLinkResult (0:
        ``ptx`` is the NUL-terminated linked PTX) and its error log.

    Raises
    ------
    RealNvJitLinkError
        No real nvJitLink is named, or it does not load.
    """
    lib = _load()
    opts = [o.encode() for o in options if o not in ("-lto", "-ptx")] + [b"-lto", b"-ptx"]
    h = ctypes.c_void_p()
    rc = lib.nvJitLinkCreate(ctypes.byref(h), len(opts), (ctypes.c_char_p * len(opts))(*opts))
    try:
        if rc != 0:
            return rc, b"", _log(lib, h)
        for data, name in inputs:
            rc = lib.nvJitLinkAddData(h, _LTOIR, data, len(data), name.encode())
            if rc != 0:
                return rc, b"", _log(lib, h)
        rc = lib.nvJitLinkComplete(h)
        if rc != 0:
            return rc, b"", _log(lib, h)
        size = ctypes.c_size_t()
        rc = lib.nvJitLinkGetLinkedPtxSize(h, ctypes.byref(size))
        if rc != 0:
            return rc, b"", _log(lib, h)
        buf = ctypes.create_string_buffer(size.value + 1)
        rc = lib.nvJitLinkGetLinkedPtx(h, buf)
        return rc, buf.value + b"\0", _log(lib, h)
    finally:
        if h.value:
            lib.nvJitLinkDestroy(ctypes.byref(h))
