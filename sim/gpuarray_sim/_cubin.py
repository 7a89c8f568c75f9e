"""Binary module images read defensively: ELF cubins and the stand-in linker's output.

One concern: what a driver reads from a binary image before it runs
anything -- the architecture it was built for, its kernels (``.entry``
functions) and their static shared memory -- read with every offset and size
checked against the image, so a corrupt header is a :class:`BinaryError`,
never a read past the image.

- **ELF cubin** (``EM_CUDA``): the architecture is in ``e_flags`` (bits
  8-15 with the CUDA OS ABI ``0x41`` of CUDA 12.8 and later, bits 0-7
  before); a kernel is a defined ``STT_FUNC`` symbol with the
  ``STO_CUDA_ENTRY`` bit (``0x10``) of ``st_other``, in its section
  ``.text.<name>``; its static shared memory is the size of
  ``.nv.shared.<name>`` (observed with ptxas 13.0: on sm_90 that section
  includes the 1 KiB the system reserves per block).
  The functions it defines (``STT_FUNC`` symbols with a section) are what
  a link may resolve a PTX ``.extern .func`` against.
- fatbins are ``_fatbin.py``'s.
- **stand-in linker output** (:func:`link_image`): an ELF cubin whose
  sections ``.nv.gpuarray.ptx`` / ``.cubin`` / ``.fatbin`` hold the linker's
  inputs unchanged, so the kernels of each input (and the PTX of each, for
  the PTX executor) are found in it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

__all__ = ["BinaryError", "Elf", "read_elf", "elf_arch", "declared_elf_size", "link_image",
           "ELF_MAGIC", "EM_CUDA", "MAX_IMAGE"]

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
_ELFOSABI_CUDA = 0x41
_STT_FUNC = 2
_STO_CUDA_ENTRY = 0x10
_SHT_SYMTAB, _SHT_STRTAB, _SHT_NOBITS = 2, 3, 8
_SHENTSIZE, _PHENTSIZE, _SYMENTSIZE = 64, 56, 24
#: No module image the simulator loads is this large: a header that says more is corrupt.
MAX_IMAGE = 1 << 31
#: The sections of the stand-in linker's output that hold its inputs.
LINKED = {"ptx": ".nv.gpuarray.ptx", "cubin": ".nv.gpuarray.cubin", "fatbin": ".nv.gpuarray.fatbin"}
_LINKED_KIND = {v: k for k, v in LINKED.items()}


class BinaryError(ValueError):
    """A binary image that is corrupt or not what its header says."""


@dataclass
class Elf:
    """What :func:`read_elf` found: the SM architecture, sections and kernels."""

    arch: int
    #: name -> (type, offset, size) of every section
    sections: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    #: names of the ``.entry`` functions
    entries: list[str] = field(default_factory=list)
    #: names of every function it defines (kernels and device functions)
    functions: set[str] = field(default_factory=set)
    #: the images held in stand-in linker sections: (kind "ptx"/"cubin"/"fatbin", bytes)
    embedded: list[tuple[str, bytes]] = field(default_factory=list)

    def shared_size(self, name: str) -> int:
        """Bytes of ``.nv.shared.<name>`` (static shared memory of kernel ``name``; 0: none)."""
        sec = self.sections.get(f".nv.shared.{name}")
        return sec[2] if sec else 0


def elf_arch(header: bytes) -> int:
    """The SM architecture (e.g. 90) an ELF cubin header says it was built for."""
    flags = int.from_bytes(header[0x30:0x34], "little")
    return (flags >> 8) & 0xFF if header[7] == _ELFOSABI_CUDA else flags & 0xFF


def declared_elf_size(header: bytes) -> int:
    """The size of an ELF image as its 64-byte header declares it (section and program tables).

    Raises
    ------
    BinaryError
        The header's table entry sizes are not ELF64's, or the tables end
        past :data:`MAX_IMAGE`: a size that cannot be trusted to read.
    """
    phoff, shoff = (int.from_bytes(header[i:i + 8], "little") for i in (0x20, 0x28))
    phentsize, phnum, shentsize, shnum = (int.from_bytes(header[i:i + 2], "little")
                                          for i in (0x36, 0x38, 0x3A, 0x3C))
    if shnum and shentsize != _SHENTSIZE:
        raise BinaryError(f"section header entries of {shentsize} bytes (ELF64: {_SHENTSIZE})")
    if phnum and phentsize != _PHENTSIZE:
        raise BinaryError(f"program header entries of {phentsize} bytes (ELF64: {_PHENTSIZE})")
    end = max(64, shoff + shnum * shentsize if shnum else 0, phoff + phnum * phentsize if phnum else 0)
    if end > MAX_IMAGE:
        raise BinaryError(f"its header puts the section or program table at byte {end:#x}, past "
                          f"any image a driver loads ({MAX_IMAGE:#x})")
    return end


def _cstr(table: bytes, off: int, what: str) -> str:
    if not 0 <= off < len(table):
        raise BinaryError(f"{what}: string offset {off} outside its string table ({len(table)} bytes)")
    end = table.find(b"\0", off)
    if end < 0:
        raise BinaryError(f"{what}: unterminated string at offset {off}")
    return table[off:end].decode("utf-8", "replace")


def read_elf(image: bytes) -> Elf:
    """Read an ELF cubin's architecture, sections and kernels, checking every offset.

    Raises
    ------
    BinaryError
        Any table, section or string lies outside the image, or is inconsistent.
    """
    n = len(image)
    if n < 64:
        raise BinaryError(f"an ELF image of {n} bytes (its header needs 64)")
    if image[4] != 2 or image[5] != 1:
        raise BinaryError("not a 64-bit little-endian ELF image")
    machine = int.from_bytes(image[18:20], "little")
    if machine != EM_CUDA:
        raise BinaryError(f"an ELF image for machine {machine}, not a CUDA cubin (EM_CUDA, {EM_CUDA})")
    end = declared_elf_size(image[:64])
    if end > n:
        raise BinaryError(f"its header puts the section or program table at byte {end}, past the "
                          f"end of the {n}-byte image")
    elf = Elf(elf_arch(image))
    shoff = int.from_bytes(image[0x28:0x30], "little")
    shnum, shstrndx = (int.from_bytes(image[i:i + 2], "little") for i in (0x3C, 0x3E))
    if shnum == 0:
        return elf
    raw = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * _SHENTSIZE) for i in range(shnum)]
    if any(raw[0]):
        raise BinaryError("section 0 is not the null section")
    for i, (_name, typ, _fl, _addr, off, size, *_rest) in enumerate(raw):
        if typ != _SHT_NOBITS and (off > n or size > n - off):
            raise BinaryError(f"section {i} ({size} bytes at {off}) ends past the {n}-byte image")
    if not 0 < shstrndx < shnum or raw[shstrndx][1] != _SHT_STRTAB:
        raise BinaryError(f"section-name table index {shstrndx} is not a string table")
    names_at, names_size = raw[shstrndx][4], raw[shstrndx][5]
    names = image[names_at:names_at + names_size]
    by_index = []
    for i, (name, typ, _fl, _addr, off, size, *_rest) in enumerate(raw):
        sname = _cstr(names, name, f"section {i}") if i else ""
        by_index.append(sname)
        elf.sections.setdefault(sname, (typ, off, size))
        if typ != _SHT_NOBITS and sname in _LINKED_KIND:
            elf.embedded.append((_LINKED_KIND[sname], image[off:off + size]))
    for i, (_name, typ, _fl, _addr, off, size, link, _info, _al, entsize) in enumerate(raw):
        if typ != _SHT_SYMTAB:
            continue
        if entsize != _SYMENTSIZE or size % _SYMENTSIZE or not 0 < link < shnum:
            raise BinaryError(f"symbol table (section {i}) with entries of {entsize} bytes, "
                              f"size {size}, string table {link}")
        strtab = image[raw[link][4]:raw[link][4] + raw[link][5]]
        for s in range(size // _SYMENTSIZE):
            st_name, st_info, st_other, st_shndx = struct.unpack_from("<IBBH", image, off + s * 24)
            if st_info & 0xF != _STT_FUNC or st_shndx == 0:
                continue
            sym = _cstr(strtab, st_name, f"symbol {s}")
            elf.functions.add(sym)
            if not st_other & _STO_CUDA_ENTRY:
                continue
            if st_shndx < shnum and by_index[st_shndx] == f".text.{sym}":
                elf.entries.append(sym)
    return elf


def link_image(inputs: list[tuple[str, bytes]], arch: int) -> bytes:
    """The stand-in linker's output: an ELF cubin for ``arch`` holding each input in a section.

    ``inputs`` are ``(kind, data)`` with kind ``"ptx"``, ``"cubin"`` or ``"fatbin"``.
    """
    names, name_at = bytearray(b"\0.shstrtab\0"), {}
    for kind, sec in LINKED.items():
        name_at[kind] = len(names)
        names += sec.encode() + b"\0"
    body, sections = bytearray(names), [(0, 0, 0, 0), (1, _SHT_STRTAB, 64, len(names))]
    for kind, data in inputs:
        while len(body) % 8:
            body.append(0)
        sections.append((name_at[kind], 1, 64 + len(body), len(data)))  # SHT_PROGBITS
        body += data
    while len(body) % 8:
        body.append(0)
    header = bytearray(64)
    header[0:4] = ELF_MAGIC
    header[4], header[5], header[6], header[7], header[8] = 2, 1, 1, _ELFOSABI_CUDA, 8
    struct.pack_into("<HHIQQQI", header, 16, 2, EM_CUDA, 1, 0, 0, 64 + len(body), arch << 8)
    struct.pack_into("<HHHHHH", header, 0x34, 64, 0, 0, _SHENTSIZE, len(sections), 1)
    table = b"".join(struct.pack("<IIQQQQIIQQ", nm, typ, 0, 0, off, size, 0, 0, int(typ != 0), 0)
                     for nm, typ, off, size in sections)
    return bytes(header) + bytes(body) + table
