"""PTX operands as slots: the translator's writers, made to write the interpreter's handlers.

One concern: a :class:`~._context.FuncCtx` whose operands are not written
into the C++ but read at run time -- a register from the frame's register
file ``R`` (``R[K[j]]``, its slot), an immediate, an address offset, a
variable's place or a parameter's offset from the instruction's constants
``K`` -- so that the C++ the instruction writers of ``_ops*.py`` produce
for one instruction is a *form*, shared by every instruction that differs
only in those values.  The interpreter (``_interp.py``) compiles each form
once into a handler ``void H(Thread* T, uint64_t* R, const uint64_t* K,
char* const* A, char* PB)``: the same writers, so the same C++ per
instruction, as the translated build -- the tiers cannot disagree on what an
instruction does, on its faults or on what they name.

Conventions of a handler: ``K[0]`` is the instruction's PTX line (``LN_``,
where the writers put the line); ``R[0]`` holds the carry flag ``CC`` of
``addc``/``subc``; ``A`` the arguments of a ``.func`` (pointers to the
caller's ``.param`` arrays); ``PB`` the frame's ``.param`` arrays.
"""

from __future__ import annotations

from typing import Any

from ._ast import Addr, FImm, Imm, Instr, Reg, Sym
from ._context import FuncCtx
from ._types import CTYPE, FLOATS, STORAGE, U128

__all__ = ["SlotCtx", "LINE"]

#: The carry flag's slot (``R[0]``); registers start at 1.
CC_SLOT = 0


class _Line:
    """An instruction's line inside a form: formats as ``LN_`` (the handler's K[0])."""

    def __format__(self, spec: str) -> str:
        return "LN_"

    __str__ = __repr__ = lambda self: "LN_"  # noqa: E731


LINE = _Line()


class _Params(dict):
    """Call-site ``.param`` arrays as the writers see them: ``name -> (C expression, size)``.

    Looking one up allocates a constant holding the array's offset in the
    frame's ``.param`` area (``PB``).
    """

    def __init__(self, ctx: SlotCtx) -> None:
        super().__init__()
        self._ctx = ctx

    def __contains__(self, name: object) -> bool:
        return name in self._ctx.param_offsets

    def __getitem__(self, name: str) -> tuple[str, int]:
        off, size = self._ctx.param_offsets[name]
        return f"(PB + {self._ctx.k(off)})", size

    def get(self, name, default=None):
        return self[name] if name in self else default


class SlotCtx(FuncCtx):
    """A function's writer context whose operands live in slots (see the module docstring).

    ``slots`` maps each register (and ``.local`` variable, whose value is its
    address) to its slot in ``R``; ``param_offsets`` each call-site ``.param``
    array to ``(offset in PB, size)``.  :meth:`form` writes one instruction.
    """

    def __init__(self, tr, fn) -> None:
        super().__init__(tr, fn)
        self.slots: dict[str, int] = {}
        self.nslots = 1  # the register file's size: the next free slot
        self.param_offsets: dict[str, tuple[int, int]] = {}
        self._k: list[int] | None = None

    # ------------------------------------------------------------ one form
    def form(self, emit, it: Instr) -> tuple[str, list[int]]:
        """``(C++ of the form, K)`` of instruction ``it`` written by ``emit(ctx, it)``."""
        self._k = [it.line]
        self.line = it.line
        saved = self.params
        self.params = _Params(self)
        try:
            code = emit(self, Instr(LINE, it.base, it.mods, it.args, None))  # type: ignore[arg-type]
            return code, self._k
        finally:
            self.params = saved
            self._k = None

    def k(self, value: int) -> str:
        """A constant of the form: ``K[j]`` (``value`` as 64 bits)."""
        assert self._k is not None
        self._k.append(int(value) % (1 << 64))
        return f"K[{len(self._k) - 1}]"

    def slot(self, name: str) -> int:
        s = self.slots.get(name)
        if s is None:  # R[0] is the carry flag; a .b128 register takes two slots
            s = self.slots[name] = self.nslots
            self.nslots += 2 if STORAGE.get(self.regs.get(name, ""), "") == U128 else 1
        return s

    # ------------------------------------------------------------ operands
    def reg(self, name: str) -> str:
        if self._k is None:  # declarations (_emit._declare): no form is written
            return super().reg(name)
        st = STORAGE[self.regs[name]]
        if st == U128:  # two slots, 8-byte aligned (ptxrt.h's u128s)
            st = "ptx::u128s"
        return f"(*({st}*)(R + {self.k(self.slot(name))}))"

    def value(self, op, ptype: str) -> str:
        if self._k is None or not isinstance(op, (Imm, FImm, Sym)):
            return super().value(op, ptype)
        ct = CTYPE[ptype]
        if isinstance(op, Imm):
            k = self.k(op.value)
            if ct == "bool":
                return f"({k} != 0)"
            if ct in FLOATS:
                return f"(({ct})(long long){k})"
            if ct == U128:  # .b128: the high 64 bits a second constant (a negative one extends)
                return f"((({ct}){self.k(op.value >> 64)} << 64) | ({ct}){k})"
            return f"(({ct}){k})"
        if isinstance(op, FImm):
            k = self.k(op.bits)
            if ct == "float":
                return (f"ptx::bits<float>((uint32_t){k})" if op.width == 32
                        else f"(float)ptx::bits<double>((uint64_t){k})")
            if ct == "double":
                return (f"ptx::bits<double>((uint64_t){k})" if op.width == 64
                        else f"(double)ptx::bits<float>((uint32_t){k})")
            return f"(({ct}){k})"
        return self.cast(f"({self.address_of(op.name)} + {self.k(op.offset)})", "uint64_t", ct)

    def address_of(self, name: str) -> str:
        if self._k is None:
            return super().address_of(name)
        tr = self.tr
        if name in self.locals:
            return f"R[{self.k(self.slot(name))}]"
        if name in tr.global_index:
            return f"T->L->globals[{self.k(tr.global_index[name])}]"
        key = tr.shared_key(self.fn, name)
        if key in tr.shared_offsets:
            return f"(uint64_t){self.k(tr.shared_offsets[key])}"
        if name in self.eparams:
            return f"(ptx::kParam + {self.k(self.eparams[name])})"
        if name in tr.fn_addr and name not in self.fparams:
            return f"(uint64_t){self.k(tr.fn_addr[name])}"
        return super().address_of(name)  # dynamic shared, WARP_SZ, or the error

    def address(self, a: Addr) -> str:
        if self._k is None:
            return super().address(a)
        off = self.k(a.offset)
        if a.base is None:
            return f"(uint64_t){off}"
        if isinstance(a.base, Reg):
            return f"({self.value(a.base, 'u64')} + (uint64_t){off})"
        return f"({self.address_of(a.base.name)} + (uint64_t){off})"

    def param_ptr(self, a: Addr, size: int, write: bool, line) -> str:
        if self._k is None:
            return super().param_ptr(a, size, write, line)
        return super().param_ptr(a, size, write, self.line)

    def imm(self, value: int) -> str:
        return self.k(value) if self._k is not None else str(value)

    def _local_param(self, name: str) -> tuple[Any, int] | None:
        if self._k is None:
            return super()._local_param(name)
        return self.param_offsets.get(name)

    def _local_param_ptr(self, where: Any, off: int) -> str:
        if self._k is None:
            return super()._local_param_ptr(where, off)
        return f"(PB + {self.k(where + off)})"
