"""The stand-in driver's code images as the caller hands them over, and the JIT's error log.

One concern: turning the ``const void *`` of ``cuModuleLoadData``,
``cuModuleLoadFatBinary`` and ``cuLibraryLoadData`` into bytes, and writing
a failed load's or link's message into the caller's
``CU_JIT_ERROR_LOG_BUFFER``.

- An image has no size argument: an ELF's and a fatbin's header says it; PTX
  ends at its NUL.  A ``__fatBinC_Wrapper_t`` (magic ``0x466243B1``, what
  code registered by the CUDA runtime hands the driver) is followed to the
  fatbin it points to.  Binary images are read through ``/proc/self/mem``, so
  a header that points past readable memory is a refused image, never a crash.
- A cubin NVRTC made in this process without PTX runs from the PTX of the
  same compile: ``_ptx_record.c`` (preloaded) keeps it, :func:`nvrtc_ptx`
  asks for it (registered as an ``_images.PTX_FINDERS`` entry).
- JIT options (``CUjit_option`` array, values array of pointer-sized slots):
  ``CU_JIT_ERROR_LOG_BUFFER`` (5) and ``CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES``
  (6, in: the buffer's size; out: the bytes written, NUL included) -- the
  message is capped at the size, NUL-terminated, as cuda.h describes.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from gpuarray.errors import CudaError

from .. import _cubin, _fatbin, _images

__all__ = ["image_at", "nvrtc_ptx", "JitLog"]

_RECORD: list[Any] = []  # gpuarray_standin_cubin_ptx of the preloaded _ptx_record.c (None: absent)
_ERROR_LOG_BUFFER, _ERROR_LOG_BUFFER_SIZE = 5, 6


def nvrtc_ptx(image: bytes) -> bytes | None:
    """The PTX NVRTC made in this process with cubin ``image`` (exactly these bytes), else None."""
    if not _RECORD:
        fn = getattr(ctypes.CDLL(None), "gpuarray_standin_cubin_ptx", None)
        if fn is not None:
            fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
            fn.restype = ctypes.c_size_t
        _RECORD.append(fn)
    fn = _RECORD[0]
    if fn is None:
        return None
    n = fn(image, len(image), None, 0)
    if not n:
        return None
    buf = ctypes.create_string_buffer(n)
    return buf.raw[:n] if fn(image, len(image), buf, n) == n else None


_images.PTX_FINDERS.append(nvrtc_ptx)

_MEM: list[int] = []  # a descriptor of /proc/self/mem, opened on first use (-1: none)


def _read(call: str, p: int, n: int) -> bytes:
    """``n`` bytes at address ``p``, or the image is refused if they are not all readable."""
    if not _MEM:
        try:
            _MEM.append(os.open("/proc/self/mem", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
        except OSError:
            _MEM.append(-1)
    if _MEM[0] < 0:
        return ctypes.string_at(p, n)
    try:
        data = os.pread(_MEM[0], n, p)
    except (OSError, OverflowError):
        data = b""
    if len(data) != n:
        raise CudaError(_images.code_for(call, "binary"), call,
                        f"(its header declares {n} bytes, but memory from {p:#x} is not all "
                        "readable: a corrupt header)")
    return data


def image_at(call: str, p: int, wrapped: bool = False) -> bytes:
    """The image at address ``p``: ELF and fatbin headers say its size; PTX is NUL-terminated;
    a ``__fatBinC_Wrapper_t`` is followed to its fatbin."""
    head = _read(call, p, 4)
    try:
        if head == _cubin.ELF_MAGIC:
            hdr = _read(call, p, 64)
            if hdr[4] != 2:
                raise _cubin.BinaryError("a 32-bit ELF image")
            return _read(call, p, _cubin.declared_elf_size(hdr))
        if head == _fatbin.FATBIN_MAGIC:
            return _read(call, p, _fatbin.declared_size(_read(call, p, 16)))
        if head == _fatbin.WRAPPER_MAGIC and not wrapped:
            data = _fatbin.wrapped_fatbin(_read(call, p, _fatbin.WRAPPER_SIZE))
            if _read(call, data, 4) != _fatbin.FATBIN_MAGIC:
                raise _cubin.BinaryError(f"a __fatBinC_Wrapper_t whose data ({data:#x}) is not "
                                         "a fatbin (magic 0xBA55ED50)")
            return image_at(call, data, wrapped=True)
    except _cubin.BinaryError as e:
        raise CudaError(_images.code_for(call, "binary"), call, f"({e})") from None
    return ctypes.string_at(p) + b"\0"


class JitLog:
    """The ``CU_JIT_ERROR_LOG_BUFFER`` a caller passed among its JIT options, if any.

    Read when the options are given (``cuLinkCreate``, a load call); :meth:`write`
    fills the buffer with a failure's message, capped at its size.
    """

    def __init__(self, n: int, options: int, values: int) -> None:
        self.buffer, self.size, self._size_slot = 0, 0, 0
        if not n or not options or not values:
            return
        for i in range(min(int(n), 64)):
            opt = ctypes.c_int.from_address(options + 4 * i).value
            slot = values + 8 * i
            if opt == _ERROR_LOG_BUFFER:
                self.buffer = ctypes.c_void_p.from_address(slot).value or 0
            elif opt == _ERROR_LOG_BUFFER_SIZE:
                self.size = ctypes.c_uint.from_address(slot).value
                self._size_slot = slot

    def write(self, message: str, report_size: bool = True) -> None:
        """Write ``message`` (NUL-terminated, capped) to the buffer; ``report_size``: also write
        the bytes written to the size option's slot (its "out" value)."""
        if not self.buffer or not self.size:
            return
        data = message.encode("utf-8", "replace")[:self.size - 1] + b"\0"
        ctypes.memmove(self.buffer, data, len(data))
        if report_size and self._size_slot:
            ctypes.c_void_p.from_address(self._size_slot).value = len(data)
