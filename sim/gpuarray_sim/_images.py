"""Module images on the simulator: what a driver would accept, and kernels it cannot run.

One concern: judging the bytes given to ``cuModuleLoadData`` (and, behind
the stand-in driver, ``cuLinkAddData`` and ``cuLibraryLoadData``) as a
driver does before it runs anything, finding the kernels in them, and the
stand-in for a kernel found in such an image that the simulator cannot
execute.

An image is one of

- PTX text: NUL-terminated, with a ``.version`` and a ``.target`` directive
  (a driver JIT-compiles it; text without them fails to compile).  The
  ``.version`` must be one the simulated driver knows (:data:`DRIVER_VERSION`,
  :func:`ptx_isa_of_driver`): newer is ``CUDA_ERROR_UNSUPPORTED_PTX_VERSION``;
  a ``.target`` newer than the device (``sm_100`` on an sm_90 device) fails
  to compile, as the driver's JIT does;
- an ELF cubin: ``\\x7fELF``, 64-bit, little-endian, machine ``EM_CUDA``
  (190), read defensively (``_cubin.py``), for the device's architecture
  (a cubin runs only on its own major version, minor at most the device's);
- a fatbin (``_fatbin.py``): the fatbin magic ``0xBA55ED50``, its members
  compressed or not; the member loaded is the one :func:`fatbin_member`
  chooses for the device -- the newest PTX the device can JIT, else a cubin
  for it (the simulator executes PTX, never SASS) -- and only that one, as a
  driver loads one; no member for the device is ``NO_BINARY_FOR_GPU``, a
  chosen member whose compression cannot be read here ``INVALID_IMAGE``;
- gpuarray's own placeholder (:data:`PLACEHOLDER`), which gpuarray's kernel
  loader gives the ``sim`` backend when it compiles nothing (the simulator
  runs the host build of ``kernels/``); only the ``sim`` backend takes it,
  never the stand-in driver.

Anything else is refused with :class:`ImageError`, whose ``kind`` is
``"ptx"`` (not an ELF or fatbin: a driver takes it for PTX and fails to
compile it), ``"ptx_version"`` (PTX newer than the driver), ``"binary"``
(an ELF or fatbin it cannot load) or ``"image"`` (a fatbin member the
simulator cannot decompress: ``INVALID_IMAGE``); each call maps the kind to
a code (:func:`code_for`), one its cuda.h documentation lists where one fits.

The kernels of an image (:func:`entries`) are its ``.entry`` functions
only: PTX ``.entry`` directives, the ``STO_CUDA_ENTRY`` function symbols of
an ELF cubin, those of a fatbin's readable members and of the inputs the
stand-in linker kept (``_cubin.link_image``), and the placeholder's name.
A parameter, a shared variable or any other string is not a kernel
(``cuModuleGetFunction``: ``CUDA_ERROR_NOT_FOUND``).  :func:`ptx_of` and
:func:`ptx_texts` give the PTX of a kernel / of an image, which the PTX
executor (``sim/ptx``) runs.  A kernel found in the image that is neither one
of gpuarray's (``gpuarray_sim.kernels``) nor defined by PTX (a kernel
of a cubin) is a :class:`ForeignKernel`: ``cuModuleGetFunction`` gives a
handle, as a driver does, and the launch fails with
``CUDA_ERROR_INVALID_IMAGE``, saying how to get PTX -- one of the
codes cuda.h documents for ``cuLaunchKernel``/``cuLaunchKernelEx`` ("the
device kernel image is invalid": there is no code the simulator can run for
it) and, unlike ``CUDA_ERROR_LAUNCH_FAILED``, not sticky: nothing ran, the
context stays usable.  Launched into a capturing stream, it becomes a graph
node, as on a GPU, and fails (the same code) when the graph runs it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

from gpuarray.errors import CudaError

from . import _cubin, _fatbin
from ._codes import INVALID_IMAGE, INVALID_PTX, NO_BINARY_FOR_GPU, UNSUPPORTED_PTX_VERSION
from ._cubin import BinaryError

__all__ = ["PLACEHOLDER", "ImageError", "validate", "entries", "ptx_of", "code_for",
           "ForeignKernel", "INVALID_IMAGE", "static_sizes", "global_variable", "DRIVER_VERSION",
           "ptx_isa_of_driver", "ptx_target", "ptx_texts", "fatbin_member", "UNRESOLVED_CODE"]

#: The start of the image gpuarray's loader gives the ``sim`` backend.
PLACEHOLDER = b"gpuarray-sim-placeholder\0"

INVALID_VALUE = 1

#: The first CUDA release (``cuDriverGetVersion`` form) whose driver loads each
#: PTX ISA version: the PTX ISA document's release history (CUDA 12.6 brought
#: no new ISA; PTX 8.6 is CUDA 12.7's).  cuda-bindings 13.5 has the same table
#: (``cuda.bindings.utils.get_minimal_required_cuda_ver_from_ptx_ver``).
_PTX_ISA_FIRST_DRIVER = {
    (8, 0): 12000, (8, 1): 12010, (8, 2): 12020, (8, 3): 12030, (8, 4): 12040, (8, 5): 12050,
    (8, 6): 12070, (8, 7): 12080, (8, 8): 12090, (9, 0): 13000, (9, 1): 13010, (9, 2): 13020,
    (9, 3): 13030, (9, 4): 13040, (9, 5): 13050,
}

#: The CUDA version the simulated driver reports (``cuDriverGetVersion``): that
#: of the cuda-bindings (13.5) and NVRTC (13.5, PTX ISA 9.5) gpuarray[cu13]
#: installs, so what a real setup with them accepts is accepted
#: (sim/tests/backend/test_image_rules.py checks the installed NVRTC against it).
DRIVER_VERSION = 13050


def ptx_isa_of_driver(driver: int = DRIVER_VERSION) -> tuple[int, int]:
    """The newest PTX ISA version a driver of CUDA version ``driver`` (e.g. 13050) loads."""
    known = [isa for isa, first in _PTX_ISA_FIRST_DRIVER.items() if first <= driver]
    return max(known) if known else (7, 8)


class ImageError(ValueError):
    """An image a driver would refuse; ``kind``: ``"ptx"``, ``"ptx_version"``, ``"binary"``, ``"image"``."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


#: The code each call answers for each kind of bad image: the closest code
#: that cuda.h documents for that call (cuLinkAddData documents none: those a
#: driver's JIT linker answers).
_LOAD = {"ptx": INVALID_PTX, "ptx_version": UNSUPPORTED_PTX_VERSION, "binary": NO_BINARY_FOR_GPU,
         "image": INVALID_IMAGE}
_CODES = {
    "cuModuleLoadData": _LOAD,
    "cuModuleLoadDataEx": _LOAD,
    "cuLibraryLoadData": _LOAD,
    "cuModuleLoad": _LOAD,
    "cuModuleLoadFatBinary": _LOAD,
    "cuLibraryLoadFromFile": _LOAD,
    "cuLinkAddData": {"ptx": INVALID_PTX, "ptx_version": UNSUPPORTED_PTX_VERSION,
                      "binary": INVALID_IMAGE, "image": INVALID_IMAGE},
}

#: What a load answers for PTX that calls a function nothing loaded with it defines
#: (``ptxas fatal: Unresolved extern function``), and ``cuLinkComplete`` for a link whose
#: inputs leave one undefined: ``CUDA_ERROR_NO_BINARY_FOR_GPU`` -- the JIT makes no binary.
#: The code a driver's ``cuModuleLoadData`` answered for it in public reports
#: (rust-lang/rust#38786; AccelerateHS/accelerate#350: "no kernel image is available for
#: execution on the device" with "ptxas fatal : Unresolved extern function 'llabs'").
#: cuda.h lists no code for it at ``cuLinkComplete``: the same one is answered there.
UNRESOLVED_CODE = NO_BINARY_FOR_GPU


def code_for(call: str, kind: str) -> int:
    """The ``CUresult`` of ``call`` for a bad image of ``kind``."""
    return _CODES.get(call, _LOAD)[kind]


_COMMENTS = re.compile(rb"//[^\n]*|/\*.*?\*/", re.S)


def _ptx_text(image: bytes) -> bytes:
    """PTX up to its NUL, comments removed."""
    return _COMMENTS.sub(b" ", image.split(b"\0", 1)[0])


def _check_ptx(text: bytes, cc: int | None) -> None:
    v = re.search(rb"^\s*\.version\s+(\d+)\.(\d+)", text, re.M)
    if v is None:
        raise ImageError("ptx", "neither an ELF cubin, a fatbin nor PTX (no .version directive)")
    t = re.search(rb"^\s*\.target\s+([\w, ]+)", text, re.M)
    if t is None:
        raise ImageError("ptx", "PTX without a .target directive")
    isa, newest = (int(v.group(1)), int(v.group(2))), ptx_isa_of_driver()
    if isa > newest:
        raise ImageError("ptx_version", f"PTX ISA {isa[0]}.{isa[1]}: the driver (CUDA "
                                        f"{DRIVER_VERSION // 1000}.{DRIVER_VERSION % 1000 // 10}) "
                                        f"loads PTX up to {newest[0]}.{newest[1]}")
    arch = re.match(rb"sm_(\d+)", t.group(1).strip())
    if arch is None:
        raise ImageError("ptx", f"PTX .target {t.group(1).strip().decode(errors='replace')!r} "
                                "names no sm_ architecture")
    if cc is not None and int(arch.group(1)) > cc:
        raise ImageError("ptx", f"PTX for sm_{int(arch.group(1))}, newer than the device "
                                f"(sm_{cc}): the JIT cannot compile it for this device")


def _cubin_runs_on(arch: int, cc: int) -> bool:
    """Whether a cubin built for ``sm_<arch>`` runs on an ``sm_<cc>`` device (same major, minor <=)."""
    return arch // 10 == cc // 10 and arch <= cc


def validate(image: bytes, placeholder_ok: bool = False, cc: int | None = None) -> str:
    """Check ``image`` as a driver would; return ``"ptx"``, ``"elf"``, ``"fatbin"`` or ``"placeholder"``.

    ``cc``: the device's compute capability as ``10 * major + minor`` (None:
    the architecture is not checked).

    Raises
    ------
    ImageError
        The image is none of those, or not for this device or driver.
    """
    if placeholder_ok and image.startswith(PLACEHOLDER):
        return "placeholder"
    if image.startswith(_cubin.ELF_MAGIC):
        try:
            elf = _cubin.read_elf(image)
        except BinaryError as e:
            raise ImageError("binary", str(e)) from None
        if cc is not None and not _cubin_runs_on(elf.arch, cc):
            raise ImageError("binary", f"a cubin for sm_{elf.arch}: no binary for this device "
                                       f"(sm_{cc})")
        for _kind, data in elf.embedded:  # the stand-in linker's inputs, checked at cuLinkAddData
            validate(data, cc=cc)
        return "elf"
    if image.startswith(_fatbin.FATBIN_MAGIC):
        validate(fatbin_member(image, cc), cc=cc)  # the member the device loads
        return "fatbin"
    text = _ptx_text(image)
    if not text.strip():
        raise ImageError("ptx", "an empty image")
    _check_ptx(text, cc)
    return "ptx"


@functools.lru_cache(maxsize=32)
def fatbin_member(image: bytes, cc: int | None) -> bytes:
    """The image of the fatbin member a driver loads on an ``sm_<cc>`` device, decompressed:
    NUL-terminated PTX text or an ELF cubin (``_fatbin.choose``; ``cc`` None: any device).

    Raises
    ------
    ImageError
        The fatbin is corrupt or has no member for the device (``"binary"``),
        or the chosen member's compression cannot be read here (``"image"``).
    """
    try:
        members = _fatbin.read_fatbin(image)
    except BinaryError as e:
        raise ImageError("binary", f"fatbin: {e}") from None
    member = _fatbin.choose(members, cc)
    if member is None:
        have = ", ".join(m.label for m in members) or "no member"
        raise ImageError("binary", f"a fatbin with {have}: no binary for this device"
                                   + (f" (sm_{cc})" if cc is not None else ""))
    try:
        data = member.payload()
    except BinaryError as e:
        raise ImageError("image", f"fatbin member {member.label}: {e}") from None
    return data.split(b"\0", 1)[0] + b"\0" if member.kind == "ptx" else data


_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$%][\w$]*)")

@functools.lru_cache(maxsize=128)
def _kernels(image: bytes) -> dict[str, bytes | None]:
    """Kernel name -> the PTX that defines it (None: a kernel of a cubin, no PTX known)."""
    if image.startswith(PLACEHOLDER):
        name = image[len(PLACEHOLDER):].split(b"\0", 1)[0].decode("utf-8", "replace")
        return {name: None} if name else {}
    found: dict[str, bytes | None] = {}
    if image.startswith(_cubin.ELF_MAGIC):
        try:
            elf = _cubin.read_elf(image)
        except BinaryError:
            return {}
        found.update(dict.fromkeys(elf.entries))
        for _kind, data in elf.embedded:
            for k, v in _kernels(data).items():
                found.setdefault(k, v)
        return found
    if image.startswith(_fatbin.FATBIN_MAGIC):  # the member any device loads first
        try:
            return _kernels(fatbin_member(image, None))
        except ImageError:
            return {}
    text = image.split(b"\0", 1)[0]
    for m in _ENTRY.finditer(_ptx_text(image)):
        found[m.group(1).decode()] = text
    return found


def ptx_target(ptx: bytes) -> int:
    """The architecture of PTX text's ``.target`` (``sm_90`` -> 90; 0: none)."""
    t = re.search(rb"^\s*\.target\s+sm_(\d+)", _ptx_text(ptx), re.M)
    return int(t.group(1)) if t else 0


#: Where the PTX of a cubin built without it may be known: callables taking the cubin's bytes
#: and answering the PTX text the same compile made (None: not known).  The stand-in
#: registers the one that asks what NVRTC made (``standin/_ptx_record.c``).
PTX_FINDERS: list[Callable[[bytes], bytes | None]] = []


def recorded_ptx(image: bytes) -> bytes | None:
    """The PTX (without its NUL) that the compile which made cubin ``image`` made too, if a
    :data:`PTX_FINDERS` entry knows it (None: not known, or not a cubin)."""
    if not image.startswith(_cubin.ELF_MAGIC):
        return None
    for finder in PTX_FINDERS:
        found = finder(image)
        if found:
            return found.split(b"\0", 1)[0]
    return None


def ptx_texts(image: bytes) -> list[bytes]:
    """Every PTX text of ``image`` (without NULs), in order: the image itself, the PTX inputs the
    stand-in linker kept, the PTX of a fatbin's chosen member (:func:`fatbin_member`; one
    member, never all: they define the same functions) -- for the PTX executor, which links
    several into one program as the driver's JIT linker does (``ptx.link``)."""
    out: list[bytes] = []
    if image.startswith(PLACEHOLDER):
        return out
    if image.startswith(_fatbin.FATBIN_MAGIC):
        try:
            return ptx_texts(fatbin_member(image, None))
        except ImageError:
            return out
    if image.startswith(_cubin.ELF_MAGIC):
        try:
            parts = [(k, d) for k, d in _cubin.read_elf(image).embedded]
        except BinaryError:
            return out
        for kind, data in parts:
            for text in ([data.split(b"\0", 1)[0]] if kind == "ptx" else ptx_texts(data)):
                if text not in out:
                    out.append(text)
        return out
    return [image.split(b"\0", 1)[0]]


def entries(image: bytes) -> list[str]:
    """The names of the kernels (``.entry`` functions) of ``image``."""
    return list(_kernels(image))


def ptx_of(image: bytes, name: str) -> bytes | None:
    """The PTX text (without its NUL) that defines kernel ``name`` of ``image``; None: none known."""
    return _kernels(image).get(name)


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

    Read from the PTX that defines the kernel (:func:`ptx_of`): the
    declarations at module scope and those in the kernel's own ``.entry``
    body (dynamic ``.extern`` arrays count 0).  For a kernel of a cubin
    without PTX, the shared size is its ``.nv.shared.<name>`` section's and
    the others are 0.
    """
    return dict(zip(("shared", "const", "local"), _static_sizes(image, name), strict=True))


@functools.lru_cache(maxsize=256)
def _static_sizes(image: bytes, name: str) -> tuple[int, int, int]:
    sizes = {"shared": 0, "const": 0, "local": 0}
    ptx = ptx_of(image, name)
    if ptx is None:
        return _binary_shared(image, name), 0, 0
    image = ptx
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
    return sizes["shared"], sizes["const"], sizes["local"]


def _binary_shared(image: bytes, name: str) -> int:
    """Static shared bytes of kernel ``name`` of an ELF cubin (or one the stand-in linker kept)."""
    if not image.startswith(_cubin.ELF_MAGIC):
        return 0
    try:
        elf = _cubin.read_elf(image)
    except BinaryError:
        return 0
    if name in elf.entries:
        return elf.shared_size(name)
    return max((_binary_shared(d, name) for k, d in elf.embedded if k == "cubin"), default=0)


class ForeignKernel:
    """A kernel of a loaded image that the simulator cannot execute (not one of ``kernels/``).

    ``has_ptx``: whether the image holds the PTX of the kernel (a kernel of a
    cubin without PTX cannot be executed by any means here; the error says
    how to get PTX).
    """

    #: Nothing to decode: the launch fails before parameters are read.
    param_types: tuple[type, ...] = ()
    foreign = True

    def __init__(self, name: str, has_ptx: bool = True, unrunnable: str = "") -> None:
        self.name = name
        self.has_ptx = has_ptx
        #: Why the PTX recorded for its cubin cannot run here ("": none was recorded).
        self.unrunnable = unrunnable

    def error(self, call: str) -> CudaError:
        """The launch error: CUDA_ERROR_INVALID_IMAGE, saying why."""
        if self.unrunnable:
            return CudaError(INVALID_IMAGE, call, f"(kernel {self.name!r} comes from a cubin; "
                                                  f"{self.unrunnable})")
        if not self.has_ptx:
            return CudaError(INVALID_IMAGE, call, f"(kernel {self.name!r} comes from a cubin with "
                                                  "no PTX: the simulator executes PTX. Load PTX "
                                                  "instead: cuModuleLoadData/cuLibraryLoadData/"
                                                  "cuLinkAddData with PTX text; cuda.core: "
                                                  "Program.compile('ptx'); numba-cuda links into "
                                                  "an image the simulator runs through the "
                                                  "stand-in's nvJitLink, which `python -m gpuarray "
                                                  "standin` serves unless "
                                                  "GPUARRAY_STANDIN_NVJITLINK=keep)")
        return CudaError(INVALID_IMAGE, call,
                         f"(the simulator cannot execute foreign kernels: {self.name!r} is not one "
                         "of gpuarray's kernels (kernels/), and the simulator runs only those; "
                         "run it on a GPU)")

    def accesses(self, params: Sequence[Any]) -> list[tuple[int, int, bool]]:
        return []  # recorded into a capture only; never run


    def run(self, mem: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
            shared_mem: int, params: Sequence[Any]) -> None:
        raise self.error("cuLaunchKernel")
