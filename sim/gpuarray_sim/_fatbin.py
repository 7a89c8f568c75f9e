"""Fatbins as nvcc writes them: the container, its members, their compression, the wrapper.

One concern: reading a fatbin -- every offset and size checked against the
image, so a corrupt one is a :class:`~._cubin.BinaryError`, never a read past
it -- decompressing its members, and choosing the member a driver would load
for a device (:func:`choose`).  No knowledge of kernels or of the driver API.

Layout (observed in fatbins made by nvcc 13.0 and ``fatbinary``; the same
fields are documented by public readers of the format such as the
``fatbinary`` Rust crate):

- **header** (16 bytes): magic ``0xBA55ED50``, version (``u16``), header size
  (``u16``, 16), payload size (``u64``): the members follow the header.
- **member**: a header of its own -- kind (``u16``: 1 PTX, 2 ELF cubin,
  8 LTO-IR), version (``u16``), header size (``u32``: 64 for a cubin, 80 for
  PTX, 120 for LTO-IR), payload size as stored (``u64``, padded to 8),
  compressed size (``u32``), an offset (``u32``), the ISA version (``u16``
  minor, ``u16`` major: the PTX ISA of a PTX member), the SM architecture
  (``u32``), the object name's offset and length, flags (``u64``), a reserved
  ``u64`` and the decompressed size (``u64``) -- then its payload.
- **flags**: ``0x2000`` the payload is LZ4-compressed (a raw LZ4 block:
  ``-compress-mode=speed``), ``0x8000`` ZSTD-compressed (a ZSTD frame: CUDA
  13's default and ``-compress-mode=size``/``balance``); ``0x100000`` an
  architecture-specific member (``compute_90a``: that architecture only),
  ``0x200000`` a family-specific one (``compute_100f``: the same major).
- **wrapper** (``__fatBinC_Wrapper_t`` of ``fatbinary_section.h``, what
  runtime-registered code hands the driver): magic ``0x466243B1``, version
  (1; 2 for relocatable code), a pointer to the fatbin, a pointer the
  driver does not need here.

Decompression: LZ4 by the block decoder below; ZSTD by Python's
``compression.zstd`` (3.14), else the ``zstandard`` package, else the
system's ``libzstd`` through ``ctypes`` -- where none exists the member is
refused with a :class:`~._cubin.BinaryError` naming ZSTD, never loaded half.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
from dataclasses import dataclass

from ._cubin import MAX_IMAGE, BinaryError

__all__ = ["FATBIN_MAGIC", "WRAPPER_MAGIC", "WRAPPER_SIZE", "FatbinMember", "read_fatbin",
           "choose", "wrapped_fatbin", "lz4_block", "zstd_frame", "declared_size"]

FATBIN_MAGIC = b"\x50\xed\x55\xba"
#: ``FATBINC_MAGIC`` of ``fatbinary_section.h`` (little-endian).
WRAPPER_MAGIC = b"\xb1\x43\x62\x46"
#: ``sizeof(__fatBinC_Wrapper_t)`` on a 64-bit host.
WRAPPER_SIZE = 24
_KINDS = {1: "ptx", 2: "elf", 8: "ltoir"}
_LZ4, _ZSTD = 0x2000, 0x8000
_ARCH_SPECIFIC, _FAMILY_SPECIFIC = 0x100000, 0x200000
_MEMBER = struct.Struct("<HHIQIIHHIIIQQQ")  # the 64 bytes every member header starts with


@dataclass
class FatbinMember:
    """One member of a fatbin.

    ``kind``: ``"ptx"``, ``"elf"``, ``"ltoir"`` or ``"kind N"``; ``arch`` the SM
    architecture (90 for sm_90); ``flags`` as stored; ``stored`` the payload as
    stored (compressed or not); ``size`` the decompressed size.
    """

    kind: str
    arch: int
    flags: int
    stored: bytes
    size: int

    @property
    def compression(self) -> str:
        """``""`` (none), ``"LZ4"`` or ``"ZSTD"``."""
        return "ZSTD" if self.flags & _ZSTD else "LZ4" if self.flags & _LZ4 else ""

    @property
    def variant(self) -> str:
        """``"a"`` (architecture-specific), ``"f"`` (family-specific) or ``""``."""
        return "a" if self.flags & _ARCH_SPECIFIC else "f" if self.flags & _FAMILY_SPECIFIC else ""

    @property
    def label(self) -> str:
        """``"PTX compute_90"``, ``"cubin sm_90a"``, ``"LTO-IR compute_90"``... for messages."""
        name = {"ptx": "PTX compute_", "elf": "cubin sm_", "ltoir": "LTO-IR compute_"}.get(
            self.kind, f"{self.kind} sm_")
        return f"{name}{self.arch}{self.variant}"

    def payload(self) -> bytes:
        """The decompressed payload.

        Raises
        ------
        BinaryError
            The compressed data is corrupt, or it is ZSTD and no ZSTD decoder
            is installed (named in the message).
        """
        if self.flags & _ZSTD:
            return zstd_frame(self.stored, self.size)
        if self.flags & _LZ4:
            return lz4_block(self.stored, self.size)
        return self.stored

    def runs_on(self, cc: int) -> bool:
        """Whether a driver can use this member on an ``sm_<cc>`` device.

        A cubin runs on its own major version, minor at most the device's
        (``sm_80`` on an sm_86 device, not on sm_90); PTX is JIT-compiled for
        its architecture or newer -- an ``a`` member for its architecture
        only, an ``f`` member within its major version; LTO-IR is never
        loaded by the driver (it needs nvJitLink).
        """
        if self.kind == "elf":
            return self.arch // 10 == cc // 10 and self.arch <= cc and (
                self.variant != "a" or self.arch == cc)
        if self.kind != "ptx":
            return False
        if self.variant == "a":
            return self.arch == cc
        if self.variant == "f":
            return self.arch // 10 == cc // 10 and self.arch <= cc
        return self.arch <= cc


def declared_size(header: bytes) -> int:
    """The size of a fatbin as its 16-byte header declares it.

    Raises
    ------
    BinaryError
        It declares more than :data:`~._cubin.MAX_IMAGE` bytes.
    """
    size = int.from_bytes(header[6:8], "little") + int.from_bytes(header[8:16], "little")
    if size > MAX_IMAGE:
        raise BinaryError(f"a fatbin header declaring {size} bytes")
    return max(16, size)


def read_fatbin(image: bytes) -> list[FatbinMember]:
    """The members of a fatbin, in order (their payloads as stored).

    Raises
    ------
    BinaryError
        The header or a member lies outside the image.
    """
    n = len(image)
    if n < 16:
        raise BinaryError(f"a fatbin of {n} bytes (its header needs 16)")
    hsize = int.from_bytes(image[6:8], "little")
    body = int.from_bytes(image[8:16], "little")
    if hsize < 16 or hsize > n or body > n - hsize:
        raise BinaryError(f"its header says {hsize} + {body} bytes; the image has {n}")
    members, off, stop = [], hsize, hsize + body
    while off < stop:
        if stop - off < 48:
            raise BinaryError(f"a member header at byte {off} is cut off")
        kind, _ver, mh, size = struct.unpack_from("<HHIQ", image, off)
        if mh < 32 or mh > stop - off or size > stop - off - mh:
            raise BinaryError(f"a member at byte {off} ({mh}-byte header, {size} bytes) "
                              f"ends past the fatbin")
        arch = int.from_bytes(image[off + 28:off + 32], "little")
        flags, stored, full = 0, image[off + mh:off + mh + size], size
        if mh >= _MEMBER.size:
            fields = _MEMBER.unpack_from(image, off)
            flags, csize, dsize = fields[11], fields[4], fields[13]
            if flags & (_LZ4 | _ZSTD):
                if csize > size or dsize > MAX_IMAGE:
                    raise BinaryError(f"a compressed member at byte {off} declares {csize} "
                                      f"bytes of {size} stored, {dsize} decompressed")
                stored, full = stored[:csize], dsize
        members.append(FatbinMember(_KINDS.get(kind, f"kind {kind}"), arch, flags, stored, full))
        off += mh + size
    return members


def choose(members: list[FatbinMember], cc: int | None) -> FatbinMember | None:
    """The member a driver loads on an ``sm_<cc>`` device, as the simulator runs it.

    A driver prefers a cubin built for the device, and JIT-compiles the
    newest PTX the device can take when there is none.  The simulator
    executes PTX, never SASS, so it takes that newest PTX whenever there is
    one (the same source the cubin was built from); a cubin is chosen only
    when no PTX fits (its kernels then run from the PTX of the compile that
    made it where known, else fail at launch saying why).  None: no member
    fits the device (``cc`` None: any device).
    """
    fits = [m for m in members if cc is None and m.kind in ("ptx", "elf")
            or cc is not None and m.runs_on(cc)]
    for kind in ("ptx", "elf"):
        found = [m for m in fits if m.kind == kind]
        if found:
            return max(found, key=lambda m: (m.arch, m.variant != ""))
    return None


def wrapped_fatbin(wrapper: bytes) -> int:
    """The address of the fatbin a ``__fatBinC_Wrapper_t`` points to.

    Raises
    ------
    BinaryError
        Not a wrapper of version 1 or 2, or a NULL fatbin pointer.
    """
    if len(wrapper) < 16 or wrapper[:4] != WRAPPER_MAGIC:
        raise BinaryError("not a __fatBinC_Wrapper_t (magic 0x466243B1)")
    version = int.from_bytes(wrapper[4:8], "little")
    if version not in (1, 2):
        raise BinaryError(f"a __fatBinC_Wrapper_t of version {version} (known: 1 and 2)")
    data = int.from_bytes(wrapper[8:16], "little")
    if not data:
        raise BinaryError("a __fatBinC_Wrapper_t whose fatbin pointer is NULL")
    return data


# ------------------------------------------------------------ decompression
def _lz4_length(nibble: int, data: bytes, i: int, what: str) -> tuple[int, int]:
    """A length of the LZ4 block format: the token's ``nibble``, extended by the bytes at ``i``
    while the nibble is 15 (each byte added; a byte of 255 continues); the index after it."""
    length = nibble
    if nibble == 15:
        while True:
            if i >= len(data):
                raise BinaryError(f"LZ4 block: a {what} length runs past the input")
            length += data[i]
            i += 1
            if data[i - 1] != 255:
                break
    return length, i


def lz4_block(data: bytes, size: int) -> bytes:
    """Decode one raw LZ4 block (the LZ4 block format) of ``size`` decompressed bytes.

    Raises
    ------
    BinaryError
        The block is corrupt: a match before the start of the output, a
        sequence past the end of the input, or not exactly ``size`` bytes out.
    """
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        token = data[i]
        i += 1
        lit, i = _lz4_length(token >> 4, data, i, "literal")
        if lit > n - i:
            raise BinaryError("LZ4 block: literals run past the input")
        out += data[i:i + lit]
        i += lit
        if i == n:  # the last sequence has literals only
            break
        if n - i < 2:
            raise BinaryError("LZ4 block: a match offset is cut off")
        dist = data[i] | data[i + 1] << 8
        i += 2
        mlen, i = _lz4_length(token & 15, data, i, "match")
        mlen += 4
        if not 0 < dist <= len(out):
            raise BinaryError(f"LZ4 block: a match {dist} bytes back, {len(out)} bytes decoded")
        if len(out) + mlen > size:
            raise BinaryError(f"LZ4 block: decodes past its declared {size} bytes")
        start = len(out) - dist
        if dist >= mlen:
            out += out[start:start + mlen]
        else:  # overlapping: the match repeats the last `dist` bytes
            for k in range(mlen):
                out.append(out[start + k])
    if len(out) != size:
        raise BinaryError(f"LZ4 block: {len(out)} bytes decoded, {size} declared")
    return bytes(out)


def _zstd_decoder() -> object:
    """A callable ``(data, size) -> bytes`` decoding one ZSTD frame, or a string saying why none."""
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python 3.14

        return lambda data, size: zstd.decompress(data)
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found]

        return lambda data, size: zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    except ImportError:
        pass
    name = ctypes.util.find_library("zstd")
    if name is None:
        return ("no ZSTD decoder is installed (Python 3.14's compression.zstd, the zstandard "
                "package or the system's libzstd)")
    lib = ctypes.CDLL(name)
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    lib.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
                                    ctypes.c_size_t]
    lib.ZSTD_isError.restype = ctypes.c_uint
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]

    def decode(data: bytes, size: int) -> bytes:
        buf = ctypes.create_string_buffer(max(size, 1))
        got = lib.ZSTD_decompress(buf, size, data, len(data))
        if lib.ZSTD_isError(got):
            raise ValueError(f"libzstd error {ctypes.c_ssize_t(got).value}")
        return buf.raw[:got]

    return decode


_ZSTD_DECODER: list[object] = []


def zstd_frame(data: bytes, size: int) -> bytes:
    """Decode one ZSTD frame of ``size`` decompressed bytes.

    Raises
    ------
    BinaryError
        No ZSTD decoder is installed, the frame is corrupt, or it decodes to
        other than ``size`` bytes.
    """
    if not _ZSTD_DECODER:
        _ZSTD_DECODER.append(_zstd_decoder())
    decode = _ZSTD_DECODER[0]
    if isinstance(decode, str):
        raise BinaryError(f"a ZSTD-compressed member, and {decode}")
    try:
        out = decode(data, size)  # type: ignore[operator]
    except Exception as e:  # each decoder has its own error type
        raise BinaryError(f"a corrupt ZSTD-compressed member ({e})") from None
    if len(out) != size:
        raise BinaryError(f"a ZSTD-compressed member of {len(out)} bytes, {size} declared")
    return bytes(out)
