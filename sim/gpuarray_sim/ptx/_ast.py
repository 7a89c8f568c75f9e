"""The PTX executor's syntax tree: operands, instructions, declarations, functions, modules.

One concern: the plain data the parser (``_parse.py``) produces and the
translator (``_context.py``) reads.  No behaviour beyond sizes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

__all__ = ["Reg", "Imm", "FImm", "Sym", "Addr", "Vec", "Instr", "Decl", "Param", "Function",
           "GlobalVar", "EntryInfo", "PtxModule", "TYPE_SIZES", "HEAP_VAR", "HEAP_BYTES"]

#: The device heap of a module that calls ``malloc``/``free`` (CUDA's device-side heap,
#: provided by the executor): a module variable of this name and size (CUDA's default
#: ``cudaLimitMallocHeapSize``, 8 MiB), its first 8 bytes the offset of the next free byte.
HEAP_VAR = "__gpuarray_sim_heap"
HEAP_BYTES = 8 << 20

#: Bytes of each fundamental PTX type.
TYPE_SIZES = {f"{k}{b}": b // 8 for k in "bsuf" for b in (8, 16, 32, 64)}
TYPE_SIZES.update({"pred": 1, "f16x2": 4, "bf16": 2, "bf16x2": 4, "b128": 16, "e4m3x2": 2,
                   "e5m2x2": 2, "tf32": 4})
TYPE_SIZES.pop("f8", None)


# ------------------------------------------------------------------ operands
@dataclass(frozen=True)
class Reg:
    """A register (or special register such as ``%tid.x``); ``neg``: ``!%p``."""

    name: str
    neg: bool = False


@dataclass(frozen=True)
class Imm:
    """An integer literal."""

    value: int


@dataclass(frozen=True)
class FImm:
    """A floating-point literal: its bits and width (32 for ``0f``, 64 for ``0d`` and decimals)."""

    bits: int
    width: int

    @property
    def value(self) -> float:
        if self.width == 32:
            return struct.unpack("<f", self.bits.to_bytes(4, "little"))[0]
        return struct.unpack("<d", self.bits.to_bytes(8, "little"))[0]


@dataclass(frozen=True)
class Sym:
    """A name: label, variable, function or parameter (``offset`` from ``name+4``)."""

    name: str
    offset: int = 0


@dataclass(frozen=True)
class Addr:
    """``[base+offset]``: base a :class:`Reg`, a :class:`Sym` or None (an absolute address)."""

    base: Reg | Sym | None
    offset: int


@dataclass(frozen=True)
class Vec:
    """``{a, b}`` (kind ``"vec"``), ``a|b`` (``"pair"``) or ``(a, b)`` (``"list"``); ``_`` is None."""

    items: tuple
    kind: str = "vec"


@dataclass
class Instr:
    """One instruction: ``opcode`` split at dots into ``base`` and ``mods``."""

    line: int
    base: str
    mods: tuple[str, ...]
    args: list
    pred: Reg | None = None

    @property
    def opcode(self) -> str:
        return ".".join((self.base,) + self.mods)


@dataclass
class Decl:
    """A declaration in a body: ``.reg`` (``space="reg"``) or a ``.local``/``.shared``/``.param`` variable.

    ``count`` is the number of registers of ``.reg .b32 %r<5>`` (names
    ``%r0`` .. ``%r4``), else 0; ``dims`` the array's element counts
    (``None`` for an unsized ``[]``).
    """

    line: int
    space: str
    type: str
    name: str
    count: int = 0
    align: int = 0
    dims: tuple = ()
    vector: int = 1
    init: bytes = b""
    extern: bool = False

    @property
    def elem_size(self) -> int:
        return TYPE_SIZES[self.type] * self.vector

    @property
    def size(self) -> int:
        n = self.elem_size
        for d in self.dims:
            n *= d or 0
        return n

    @property
    def alignment(self) -> int:
        return self.align or self.elem_size


@dataclass
class Param:
    """A ``.param`` of a function: name, type, byte size, alignment, ``.ptr`` space."""

    name: str
    type: str
    size: int
    align: int
    ptr_space: str = ""


@dataclass
class Function:
    """An ``.entry`` or ``.func``: ``body`` is None for a declaration (prototype).

    ``protos`` and ``calltargets`` are the body's label-scoped declarations
    an indirect ``call`` names (``call (r), %fp, (a), label;``).
    """

    name: str
    kind: str
    line: int
    params: list[Param]
    rets: list[Param]
    linkage: str = ""
    perf: dict[str, tuple[int, ...]] = field(default_factory=dict)
    body: list | None = None  # Instr, Decl, ("label", name, line), ("{", line), ("}", line)
    #: ``label: .callprototype (rets) _ (params);`` of the body: label -> (rets, params, line)
    protos: dict[str, tuple[list[Param], list[Param], int]] = field(default_factory=dict)
    #: ``label: .calltargets f, g;`` of the body: label -> (function names, line)
    calltargets: dict[str, tuple[list[str], int]] = field(default_factory=dict)


@dataclass
class GlobalVar:
    """A module variable: ``space`` global, const or shared; ``init`` its initial bytes.

    ``relocs`` lists ``(offset, symbol, addend)`` for initialisers that are
    addresses of other variables (filled in when the module is placed).
    ``extern`` with ``size == 0`` is dynamic shared memory.
    """

    name: str
    space: str
    size: int
    align: int
    init: bytes
    line: int
    extern: bool = False
    relocs: list[tuple[int, str, int]] = field(default_factory=list)
    type: str = "b8"
    #: declared with dimensions (``g[4]``, ``g[]``): an array, not a scalar
    array: bool = False


@dataclass
class EntryInfo:
    """What a driver reports of one ``.entry`` (``cuFuncGetAttribute``, parameter layout).

    ``params``: ``(name, size, align, offset)`` in order; ``param_size``: bytes
    of the parameter block; ``static_shared_bytes``/``const_bytes``: the
    module's ``.shared``/``.const`` variables the kernel (or a function it
    calls) names plus its own; ``local_bytes``: its ``.local`` bytes per
    thread (own and those of the deepest chain of ``.func`` it calls);
    ``max_threads``: the product of ``.maxntid``/``.reqntid`` (None without);
    ``ptx_version``: the virtual architecture, 10*major+minor of the target
    (``sm_90`` -> 90), as ``CU_FUNC_ATTRIBUTE_PTX_VERSION`` reports it;
    ``uses_dynamic_shared``: it names an ``.extern .shared`` array;
    ``does_nothing``: its first instruction is an unguarded ``ret`` or
    ``exit``, so no thread does anything (NVVM folds a kernel whose every
    branch is dead to that).
    """

    name: str
    params: list[tuple[str, int, int, int]]
    param_size: int
    static_shared_bytes: int
    const_bytes: int
    local_bytes: int
    max_threads: int | None
    ptx_version: int
    uses_dynamic_shared: bool
    line: int = 0
    does_nothing: bool = False


@dataclass
class PtxModule:
    """A parsed PTX module.

    ``version`` ``(major, minor)`` of ``.version``; ``target`` the first
    ``.target`` word (``"sm_90"``); ``address_size`` 32 or 64; ``entries``
    the :class:`EntryInfo` of each ``.entry`` with a body; ``functions``
    every ``.entry``/``.func`` (:class:`Function`, declarations too);
    ``globals`` the module variables (:class:`GlobalVar`).
    """

    version: tuple[int, int]
    target: str
    address_size: int
    entries: dict[str, EntryInfo]
    functions: dict[str, Function]
    globals: dict[str, GlobalVar]
    text: str = ""

    @property
    def arch(self) -> int:
        """The target's number: ``sm_90`` -> 90 (0 when it has none)."""
        digits = "".join(c for c in self.target.split("_")[-1] if c.isdigit())
        return int(digits) if digits else 0
