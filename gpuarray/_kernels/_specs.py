"""Kernel specialisations: what is compiled, its symbol name and its parameters.

A :class:`KernelSpec` names one instantiation of a template of ``kernels/``.
Its ``extern "C"`` symbol encodes every template argument, because the
simulator finds reference implementations by symbol name:

- ``ga_copy__<dst>__<src>__<ndim>__<index>__<variant>`` -- N-d copy with
  conversion (destination type first, as in ``memcpy(dst, src)``); variants
  ``g`` general, ``d`` destination C-contiguous, ``u`` unaligned (byte
  access), ``c`` both contiguous (``ndim`` 1, vectorised);
- ``ga_fill__<type>__<ndim>__<index>__<variant>`` -- fill with a raw unit
  (``u1``, ``u2``, ``u4``, ``u8``, ``v16``); variants ``g`` and ``c``;
- ``ga_transpose__<dst>__<src>__<index>`` -- tiled (batched) 2-D transpose,
  one element per thread per access (variant ``""``);
- ``ga_transpose__<dst>__<src>__<index>__w`` -- the same moved as 4-byte
  (1 and 2-byte elements) or 8-byte (4-byte elements) words, transposed in
  registers (variant ``w``; equal element sizes; both pointers, pitches and
  batch strides must be multiples of the word size, see :func:`transpose_word`).

``<index>`` is ``i32`` or ``i64``.  The kernel parameter block is one
``ctypes.Structure`` (built here, mirroring the C structs ``ga_nd_args``,
``ga_fill_args`` and ``ga_tr_args``) passed by value.

Pure: no CUDA, no driver.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools

from ._dtypes import CAST_CODES, RAW_CODES, code_itemsize

__all__ = [
    "KernelSpec",
    "MAX_NDIM",
    "BLOCK",
    "UNROLL",
    "TILE",
    "TILE_ROWS",
    "copy_spec",
    "fill_spec",
    "transpose_spec",
    "transpose_word",
    "transpose_tile",
    "WORD_TRANSPOSE_WORDS",
    "WORD_TRANSPOSE_MIN_BLOCKS",
    "params_type",
    "parse_symbol",
    "divider",
    "program_source",
]

#: Most dimensions an N-d kernel takes; the launcher loops over outer ones.
MAX_NDIM = 8
#: Threads per block of the N-d and fill kernels (``GA_BLOCK``).
BLOCK = 256
#: Elements per thread per grid-stride step of the N-d kernels (``GA_UNROLL``).
UNROLL = 4
#: Transpose tile edge and rows of threads per block (``GA_TILE``, ``GA_TILE_ROWS``).
TILE = 32
TILE_ROWS = 8
#: Element size -> word size of the ``w`` transpose kernel (``ga_transpose_w``).
WORD_TRANSPOSE_WORDS = {1: 4, 2: 4, 4: 8}
#: ``__launch_bounds__(BLOCK, 4)`` for the ``w`` transposes: lets ptxas use up
#: to 64 registers, so that all 16 (8) word loads of a thread are issued
#: before the first is used.  With ``__launch_bounds__(BLOCK)`` alone, ptxas
#: (CUDA 13, sm_90) fits the uint8 and 4-byte kernels in 32 registers by
#: splitting the loads into 4 rounds that each wait for memory (seen in the
#: SASS); 4 resident blocks x 256 threads x 64 B is still 64 KB in flight
#: per SM.
WORD_TRANSPOSE_MIN_BLOCKS = 4

_INDEX_C = {"i32": "int", "i64": "long long"}
_INDEX_CT = {"i32": ctypes.c_int32, "i64": ctypes.c_int64}
_ALL_CODES = set(CAST_CODES) | set(RAW_CODES.values())
_HEADERS = {"copy": "ga_copy.cuh", "fill": "ga_fill.cuh", "transpose": "ga_transpose.cuh"}


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """One kernel instantiation.

    Attributes
    ----------
    family : {"copy", "fill", "transpose"}
    dst : str
        Destination type code.
    src : str
        Source type code (``""`` for fill).
    ndim : int
        Dimensions of the N-d kernels (0 for transpose).
    index : {"i32", "i64"}
        Index and offset arithmetic width.
    variant : str
        ``g``, ``d``, ``u`` or ``c`` for copies; ``""`` or ``w`` for transposes.
    """

    family: str
    dst: str
    src: str
    ndim: int
    index: str
    variant: str

    @property
    def symbol(self) -> str:
        """The ``extern "C"`` kernel name."""
        if self.family == "copy":
            return f"ga_copy__{self.dst}__{self.src}__{self.ndim}__{self.index}__{self.variant}"
        if self.family == "fill":
            return f"ga_fill__{self.dst}__{self.ndim}__{self.index}__{self.variant}"
        if self.variant:
            return f"ga_transpose__{self.dst}__{self.src}__{self.index}__{self.variant}"
        return f"ga_transpose__{self.dst}__{self.src}__{self.index}"

    @property
    def header(self) -> str:
        """The file of ``kernels/`` that holds the template."""
        return _HEADERS[self.family]

    def instantiation(self) -> str:
        """The C++ line that defines this kernel from its template."""
        idx = _INDEX_C[self.index]
        sym = self.symbol
        bounds = f"{BLOCK}, {WORD_TRANSPOSE_MIN_BLOCKS}" if self.variant == "w" else f"{BLOCK}"
        head = f'extern "C" __global__ void __launch_bounds__({bounds}) {sym}'
        if self.family == "copy":
            args = f"ga_nd_args<{self.ndim}, {idx}>"
            if self.variant == "c":
                body = f"ga_copy_contig<ga_{self.dst}, ga_{self.src}, {idx}>(a);"
            else:
                dc = "true" if self.variant == "d" else "false"
                al = "false" if self.variant == "u" else "true"
                body = (f"ga_copy_nd<ga_{self.dst}, ga_{self.src}, {self.ndim}, {idx}, "
                        f"{dc}, {al}>(a);")
        elif self.family == "fill":
            args = f"ga_fill_args<{self.ndim}, {idx}>"
            if self.variant == "c":
                body = f"ga_fill_contig<ga_{self.dst}, {idx}>(a);"
            else:
                body = f"ga_fill_nd<ga_{self.dst}, {self.ndim}, {idx}>(a);"
        else:
            args = f"ga_tr_args<{idx}>"
            if self.variant == "w":
                body = (f"ga_transpose_w<ga_{self.dst}, ga_{self.src}, {idx}, "
                        f"{transpose_word(self)}>(a);")
            else:
                body = f"ga_transpose<ga_{self.dst}, ga_{self.src}, {idx}>(a);"
        return f"{head}({args} a) {{ {body} }}"


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(f"invalid kernel specialisation: {what}")


@functools.lru_cache(maxsize=4096)
def copy_spec(dst: str, src: str, ndim: int, index: str, variant: str) -> KernelSpec:
    """Spec of an N-d copy kernel (see the module docstring)."""
    _check(dst in _ALL_CODES and src in _ALL_CODES, f"types {dst!r}, {src!r}")
    _check(index in _INDEX_C, f"index {index!r}")
    _check(variant in ("g", "d", "u", "c"), f"variant {variant!r}")
    _check(1 <= ndim <= MAX_NDIM and (variant != "c" or ndim == 1), f"ndim {ndim}")
    _check(("v16" not in (dst, src)) or dst == src, "v16 is only moved")
    return KernelSpec("copy", dst, src, int(ndim), index, variant)


@functools.lru_cache(maxsize=1024)
def fill_spec(unit: str, ndim: int, index: str, variant: str) -> KernelSpec:
    """Spec of a fill kernel for a raw unit code."""
    _check(unit in RAW_CODES.values(), f"fill unit {unit!r}")
    _check(index in _INDEX_C, f"index {index!r}")
    _check(variant in ("g", "c"), f"variant {variant!r}")
    _check(1 <= ndim <= MAX_NDIM and (variant != "c" or ndim == 1), f"ndim {ndim}")
    return KernelSpec("fill", unit, "", int(ndim), index, variant)


@functools.lru_cache(maxsize=1024)
def transpose_spec(dst: str, src: str, index: str, variant: str = "") -> KernelSpec:
    """Spec of a tiled transpose kernel (variant ``""`` per element, ``w`` in words)."""
    _check(dst in _ALL_CODES and src in _ALL_CODES, f"types {dst!r}, {src!r}")
    _check(("v16" not in (dst, src)) or dst == src, "v16 is only moved")
    _check(index in _INDEX_C, f"index {index!r}")
    _check(variant in ("", "w"), f"variant {variant!r}")
    if variant == "w":
        size = code_itemsize(dst)
        _check(size == code_itemsize(src) and size in WORD_TRANSPOSE_WORDS,
               f"word transpose of {dst!r} <- {src!r} (equal sizes of 1, 2 or 4 bytes)")
    return KernelSpec("transpose", dst, src, 0, index, variant)


def parse_symbol(symbol: str) -> KernelSpec:
    """The :class:`KernelSpec` whose :attr:`KernelSpec.symbol` is ``symbol``.

    The inverse of ``KernelSpec.symbol``, with the same checks as the
    factories (:func:`copy_spec`, :func:`fill_spec`, :func:`transpose_spec`).

    Parameters
    ----------
    symbol : str
        A kernel name such as ``"ga_copy__f4__f8__2__i32__g"``.

    Returns
    -------
    KernelSpec

    Raises
    ------
    ValueError
        If ``symbol`` is not the name of a gpuarray kernel specialisation;
        the message names it.

    Examples
    --------
    >>> parse_symbol("ga_fill__u4__1__i64__c") == fill_spec("u4", 1, "i64", "c")
    True
    """
    parts = str(symbol).split("__")
    try:
        if parts[0] == "ga_copy" and len(parts) == 6 and parts[3].isdigit():
            spec = copy_spec(parts[1], parts[2], int(parts[3]), parts[4], parts[5])
        elif parts[0] == "ga_fill" and len(parts) == 5 and parts[2].isdigit():
            spec = fill_spec(parts[1], int(parts[2]), parts[3], parts[4])
        elif parts[0] == "ga_transpose" and len(parts) in (4, 5):
            spec = transpose_spec(parts[1], parts[2], parts[3], parts[4] if len(parts) == 5 else "")
        else:
            spec = None
    except ValueError as e:
        raise ValueError(f"{symbol!r} is not a gpuarray kernel: {e}") from None
    if spec is None or spec.symbol != symbol:
        raise ValueError(f"{symbol!r} is not a gpuarray kernel symbol (ga_copy__D__S__ND__I__V, "
                         "ga_fill__T__ND__I__V or ga_transpose__D__S__I[__w])")
    return spec


def transpose_word(spec: KernelSpec) -> int:
    """Word size in bytes of a ``w`` transpose kernel.

    The kernel needs both pointers, both pitches and both batch strides to be
    multiples of it (the planner checks; the simulator's reference too).
    """
    _check(spec.family == "transpose" and spec.variant == "w", f"{spec.symbol} has no words")
    return WORD_TRANSPOSE_WORDS[code_itemsize(spec.src)]


def transpose_tile(spec: KernelSpec) -> int:
    """Edge, in elements, of a transpose kernel's square tile (``GA_TILE`` x elements per word).

    Examples
    --------
    >>> transpose_tile(transpose_spec("u1", "u1", "i32", "w")), transpose_tile(
    ...     transpose_spec("f4", "f4", "i32"))
    (128, 32)
    """
    if spec.variant == "w":
        return TILE * WORD_TRANSPOSE_WORDS[code_itemsize(spec.src)] // code_itemsize(spec.src)
    return TILE


def program_source(specs) -> str:
    """One translation unit defining every kernel of ``specs`` (an iterable of KernelSpec).

    The ``#include`` names refer to the files of ``kernels/``, handed to NVRTC
    as named headers.
    """
    specs = list(specs)
    headers = sorted({s.header for s in specs})
    lines = ["// gpuarray kernels, generated per specialisation"]
    lines += [f'#include "{h}"' for h in headers]
    lines += [s.instantiation() for s in specs]
    return "\n".join(lines) + "\n"


@functools.cache
def params_type(family: str, ndim: int, index: str) -> type:
    """The ``ctypes.Structure`` mirroring the kernel parameter block.

    Parameters
    ----------
    family : {"copy", "fill", "transpose"}
    ndim : int
        Dimensions (ignored for transpose).
    index : {"i32", "i64"}

    Returns
    -------
    type
        A ``ctypes.Structure`` subclass whose layout equals the C struct's.
    """
    it = _INDEX_CT[index]
    ptr = ctypes.c_uint64
    if family == "copy":
        fields = [("dst", ptr), ("src", ptr), ("n", it), ("shape", it * ndim),
                  ("dst_strides", it * ndim), ("src_strides", it * ndim),
                  ("magic", ctypes.c_uint32 * ndim), ("shift", ctypes.c_uint32 * ndim)]
        name = f"ga_nd_args_{ndim}_{index}"
    elif family == "fill":
        fields = [("dst", ptr), ("pat_lo", ctypes.c_uint64), ("pat_hi", ctypes.c_uint64),
                  ("n", it), ("shape", it * ndim), ("strides", it * ndim),
                  ("magic", ctypes.c_uint32 * ndim), ("shift", ctypes.c_uint32 * ndim)]
        name = f"ga_fill_args_{ndim}_{index}"
    elif family == "transpose":
        fields = [("dst", ptr), ("src", ptr)] + [
            (f, it) for f in ("rows", "cols", "batch", "dst_pitch", "src_pitch",
                              "dst_bstride", "src_bstride")]
        name = f"ga_tr_args_{index}"
    else:
        raise ValueError(f"unknown kernel family {family!r}")
    return type(name, (ctypes.Structure,), {"_fields_": fields})


@functools.lru_cache(maxsize=4096)
def divider(d: int) -> tuple[int, int]:
    """Magic multiplier and shift for dividing 31-bit numbers by ``d``.

    The kernel computes ``q = (umulhi(n, magic) + n) >> shift`` (32-bit
    unsigned arithmetic), which equals ``n // d`` for ``0 <= n < 2**31``
    and ``1 <= d < 2**31`` (Granlund-Montgomery; PyTorch's ``IntDivider``).

    Examples
    --------
    >>> m, s = divider(7)
    >>> n = 1000
    >>> ((((n * m) >> 32) + n) & 0xFFFFFFFF) >> s
    142
    """
    if not 1 <= d < 2**31:
        raise ValueError(f"divisor {d} out of range for 32-bit index division")
    shift = (d - 1).bit_length()  # ceil(log2(d)); 0 for d == 1
    magic = ((1 << 32) * ((1 << shift) - d)) // d + 1
    return magic, shift
