"""Module images on the simulator: what a driver would accept, and kernels it cannot run.

One concern: judging the bytes given to ``cuModuleLoadData`` (and, behind
the stand-in driver, ``cuLinkAddData`` and ``cuLibraryLoadData``) as a
driver does before it runs anything, and the stand-in for a kernel found in
such an image that the simulator cannot execute.

An image is one of

- PTX text: NUL-terminated, with a ``.version`` and a ``.target`` directive
  (a driver JIT-compiles it; text without them fails to compile);
- an ELF cubin: ``\\x7fELF``, 64-bit, little-endian, machine ``EM_CUDA``
  (190);
- a fatbin: the fatbin magic ``0xBA55ED50``, a header of at least 16 bytes;
- gpuarray's own placeholder (:data:`PLACEHOLDER`), which gpuarray's kernel
  loader gives the ``sim`` backend when it compiles nothing (the simulator
  runs the host build of ``kernels/``); only the ``sim`` backend takes it,
  never the stand-in driver.

Anything else is refused with :class:`ImageError`, whose ``kind`` is
``"ptx"`` (not an ELF or fatbin: a driver takes it for PTX and fails to
compile it) or ``"binary"`` (an ELF or fatbin it cannot load); each call
maps the kind to a code its cuda.h documentation lists (:func:`code_for`).

A kernel is found in an image when its name appears there as a whole
identifier (PTX ``.entry`` names, ELF symbol names and the placeholder's
name are all stored as text).  A kernel found in the image that is not one of
gpuarray's (``gpuarray._driver.sim_kernels``) is a :class:`ForeignKernel`:
``cuModuleGetFunction`` gives a handle, as a driver does, and the launch
fails with ``CUDA_ERROR_INVALID_IMAGE`` -- one of the codes cuda.h documents
for ``cuLaunchKernel``/``cuLaunchKernelEx`` ("the device kernel image is
invalid": there is no code the simulator can run for it) and, unlike
``CUDA_ERROR_LAUNCH_FAILED``, not sticky: nothing ran, the context stays
usable.  Launched into a capturing stream, it becomes a graph node, as on a
GPU, and fails (the same code) when the graph runs it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...errors import CudaError

__all__ = ["PLACEHOLDER", "ImageError", "validate", "contains", "code_for", "ForeignKernel",
           "INVALID_IMAGE", "static_sizes", "global_variable"]

#: The start of the image gpuarray's loader gives the ``sim`` backend.
PLACEHOLDER = b"gpuarray-sim-placeholder\0"

INVALID_VALUE = 1
INVALID_IMAGE = 200
NO_BINARY_FOR_GPU = 209
INVALID_PTX = 218

_ELF_MAGIC = b"\x7fELF"
_FATBIN_MAGIC = b"\x50\xed\x55\xba"
_EM_CUDA = 190


class ImageError(ValueError):
    """An image a driver would refuse; ``kind`` is ``"ptx"`` or ``"binary"``."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


#: The code each call answers for each kind of bad image: the closest code
#: that cuda.h documents for that call.
_CODES = {
    "cuModuleLoadData": {"ptx": INVALID_PTX, "binary": NO_BINARY_FOR_GPU},
    "cuModuleLoadDataEx": {"ptx": INVALID_PTX, "binary": NO_BINARY_FOR_GPU},
    "cuLinkAddData": {"ptx": INVALID_PTX, "binary": INVALID_IMAGE},
    # cuda.h lists no image code for cuLibraryLoadData: INVALID_VALUE.
    "cuLibraryLoadData": {"ptx": INVALID_VALUE, "binary": INVALID_VALUE},
}


def code_for(call: str, kind: str) -> int:
    """The ``CUresult`` of ``call`` for a bad image of ``kind``."""
    return _CODES.get(call, _CODES["cuModuleLoadData"])[kind]


def validate(image: bytes, placeholder_ok: bool = False) -> str:
    """Check ``image`` as a driver would; return ``"ptx"``, ``"elf"``, ``"fatbin"`` or ``"placeholder"``.

    Raises
    ------
    ImageError
        The image is none of those.
    """
    if placeholder_ok and image.startswith(PLACEHOLDER):
        return "placeholder"
    if image.startswith(_ELF_MAGIC):
        if len(image) < 64:
            raise ImageError("binary", f"an ELF image of {len(image)} bytes (its header needs 64)")
        if image[4] != 2 or image[5] != 1:
            raise ImageError("binary", "not a 64-bit little-endian ELF image")
        machine = int.from_bytes(image[18:20], "little")
        if machine != _EM_CUDA:
            raise ImageError("binary", f"an ELF image for machine {machine}, not a CUDA cubin "
                                       f"(EM_CUDA, {_EM_CUDA})")
        return "elf"
    if image.startswith(_FATBIN_MAGIC):
        if len(image) < 16:
            raise ImageError("binary", f"a fatbin of {len(image)} bytes (its header needs 16)")
        return "fatbin"
    text = image.split(b"\0", 1)[0]
    if not text.strip():
        raise ImageError("ptx", "an empty image")
    if re.search(rb"^\s*\.version\s+\d+\.\d+", text, re.M) is None:
        raise ImageError("ptx", "neither an ELF cubin, a fatbin nor PTX (no .version directive)")
    if re.search(rb"^\s*\.target\s+\w+", text, re.M) is None:
        raise ImageError("ptx", "PTX without a .target directive")
    return "ptx"


def contains(image: bytes, name: str) -> bool:
    """Whether kernel ``name`` appears in ``image`` as a whole identifier."""
    pat = rb"(?<![A-Za-z0-9_$.])" + re.escape(name.encode()) + rb"(?![A-Za-z0-9_$])"
    return re.search(pat, image) is not None


_DECL = re.compile(
    rb"\.(shared|const|local)\s+(?:\.align\s+\d+\s+)?\.[bsuf](8|16|32|64)\s+[\w$%]+(?:\[(\d*)\])?")


_GLOBAL = re.compile(
    rb"\.global\s+(?:\.align\s+\d+\s+)?\.[bsuf](8|16|32|64)\s+([\w$]+)(?:\[(\d+)\])?"
    rb"(?:\s*=\s*(?:\{([^}]*)\}|(-?\w+)))?\s*;")


def global_variable(image: bytes, name: str) -> tuple[int, bytes] | None:
    """``(size, initial bytes)`` of the PTX ``.global`` variable ``name`` of ``image`` (None: none).

    Integer initialisers (``= 42``, ``= {1, 2}``) are honoured; others and
    uninitialised variables start as zeros, as CUDA's loader leaves them.
    """
    for m in _GLOBAL.finditer(image):
        if m.group(2).decode() != name:
            continue
        width = int(m.group(1)) // 8
        count = int(m.group(3)) if m.group(3) else 1
        init = bytearray(width * count)
        values = (m.group(4) or m.group(5) or b"").replace(b",", b" ").split()
        for i, v in enumerate(values[:count]):
            try:
                init[i * width:(i + 1) * width] = (int(v, 0) % (1 << (8 * width))).to_bytes(
                    width, "little")
            except ValueError:
                break
        return width * count, bytes(init)
    return None


def static_sizes(image: bytes, name: str) -> dict[str, int]:
    """Bytes of static ``shared``, ``const`` and ``local`` (per thread) memory of kernel ``name``.

    Read from the PTX declarations of the image: those at module scope and
    those in the kernel's own ``.entry`` body (dynamic ``.extern`` arrays
    count 0).  An image without PTX for the kernel answers zeros.
    """
    sizes = {"shared": 0, "const": 0, "local": 0}
    m = re.search(rb"\.entry\s+" + re.escape(name.encode()) + rb"\s*\(", image)
    body = b""
    if m is not None:
        start = image.find(b"{", m.end())
        depth, i = 0, start
        while 0 <= i < len(image):
            c = image[i:i + 1]
            depth += c == b"{"
            depth -= c == b"}"
            if depth == 0:
                break
            i += 1
        body = image[start:i]
    # module scope: lines outside every brace
    scope, depth = [], 0
    for line in image.split(b"\n"):
        if depth == 0:
            scope.append(line)
        depth += line.count(b"{") - line.count(b"}")
    for text in (b"\n".join(scope), body):
        for d in _DECL.finditer(text):
            count = int(d.group(3)) if d.group(3) else (0 if d.group(3) == b"" else 1)
            sizes[d.group(1).decode()] += int(d.group(2)) // 8 * count
    return sizes


class ForeignKernel:
    """A kernel of a loaded image that the simulator cannot execute (not one of ``kernels/``)."""

    #: Nothing to decode: the launch fails before parameters are read.
    param_types: tuple[type, ...] = ()
    foreign = True

    def __init__(self, name: str) -> None:
        self.name = name

    def error(self, call: str) -> CudaError:
        """The launch error: CUDA_ERROR_INVALID_IMAGE, saying why."""
        return CudaError(INVALID_IMAGE, call,
                         f"(the simulator cannot execute foreign kernels: {self.name!r} is not one "
                         "of gpuarray's kernels (kernels/), and the simulator runs only those; "
                         "run it on a GPU)")

    def accesses(self, params: Sequence[Any]) -> list[tuple[int, int, bool]]:
        return []  # recorded into a capture only; never run


    def run(self, mem: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
            shared_mem: int, params: Sequence[Any]) -> None:
        raise self.error("cuLaunchKernel")
