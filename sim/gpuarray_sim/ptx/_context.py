"""PTX operands to C++: the translator's function context and module layout.

One concern: what the writer of one PTX function knows (:class:`FuncCtx`):
its registers (typed C++ locals), ``.local`` frames, call-site ``.param``
arrays and parameters, and how an operand becomes a C++ expression of a
given PTX type (registers, immediates, special registers, variable
addresses), and the module layout every function shares
(:class:`ModuleLayout`: the launch's table of module variables, the
shared window's static offsets and where dynamic shared memory starts).
The instruction writers (``_ops*.py``) use it; ``_emit.py`` writes
functions and the module.
"""

from __future__ import annotations

import re
from typing import Any

from ._ast import Addr, Decl, FImm, Function, Imm, PtxModule, Reg, Sym, Vec
from ._errors import UnsupportedPtx
from ._info import function_addresses
from ._types import CTYPE, FLOATS, SIZE, STORAGE

__all__ = ["cname", "FuncCtx", "ModuleLayout", "operand_vec",
           "STORAGE", "CTYPE", "SIZE", "FLOATS"]



def cname(prefix: str, name: str) -> str:
    """A C++ identifier for PTX ``name`` (collision-free: odd characters are escaped)."""
    return prefix + re.sub(r"[^A-Za-z0-9]", lambda m: f"_{ord(m.group()):x}_", name)


_SPECIAL = {
    "%tid": "T->rt->thread_idx.{}", "%ntid": "T->rt->block_dim.{}",
    "%ctaid": "T->rt->block_idx.{}", "%nctaid": "T->rt->grid_dim.{}",
}
_SPECIAL_PLAIN = {
    "%laneid": ("T->lane", "uint32_t"), "%warpid": ("T->warp", "uint32_t"),
    "%nwarpid": ("((T->rt->nthreads + 31) / 32)", "uint32_t"),
    "%lanemask_eq": ("(1u << T->lane)", "uint32_t"),
    "%lanemask_lt": ("((1u << T->lane) - 1u)", "uint32_t"),
    "%lanemask_le": ("((2u << T->lane) - 1u)", "uint32_t"),
    "%lanemask_gt": ("(~((2u << T->lane) - 1u))", "uint32_t"),
    "%lanemask_ge": ("(~((1u << T->lane) - 1u))", "uint32_t"),
    "%clock": ("(uint32_t)(++T->L->clock)", "uint32_t"),
    "%clock64": ("(++T->L->clock)", "uint64_t"),
    "%globaltimer": ("ptx::globaltimer()", "uint64_t"),
    "%globaltimer_lo": ("(uint32_t)ptx::globaltimer()", "uint32_t"),
    "%smid": ("0u", "uint32_t"), "%nsmid": ("1u", "uint32_t"), "%gridid": ("(uint64_t)0", "uint64_t"),
    "%dynamic_smem_size": ("(uint32_t)T->L->dyn_size", "uint32_t"),
    "%total_smem_size": ("(uint32_t)T->L->shared_size", "uint32_t"),
}


class FuncCtx:
    """What the writer of one function knows: its registers, variables and parameters."""

    def __init__(self, tr: ModuleLayout, fn: Function) -> None:
        self.tr = tr
        self.fn = fn
        self.regs: dict[str, str] = {}      # PTX register -> PTX type
        self.locals: dict[str, Decl] = {}   # .local variable -> decl
        self.params: dict[str, tuple[str, int]] = {}  # call-site .param -> (C name, size)
        self.line = fn.line
        self.labels_seen: set[str] = set()  # labels above the instruction written now
        self.fparams: dict[str, int] = {}   # this .func's parameters -> index in A[]
        if fn.kind == "func":
            for i, p in enumerate(fn.rets + fn.params):
                self.fparams[p.name] = i
        self.eparams: dict[str, int] = {}   # this .entry's parameters -> offset
        if fn.kind == "entry":
            from ._info import layout
            for name, _size, _align, off in layout(fn.params)[0]:
                self.eparams[name] = off

    def error(self, msg: str, line: int | None = None) -> UnsupportedPtx:
        ln = self.line if line is None else line
        return UnsupportedPtx(f"PTX line {ln}: {msg}", ln)

    # ------------------------------------------------------------- operands
    def reg(self, name: str) -> str:
        return cname("R", name)

    def value(self, op, ptype: str) -> str:
        """``op`` as a C++ expression of the C type of PTX type ``ptype``."""
        ct = CTYPE[ptype]
        if isinstance(op, Reg):
            if op.neg:
                return f"(!{self.value(Reg(op.name), 'pred')})"
            base, _, comp = op.name.partition(".")
            if base in _SPECIAL and comp in ("x", "y", "z"):
                return self.cast(_SPECIAL[base].format(comp), "uint32_t", ct)
            if op.name in _SPECIAL_PLAIN:
                expr, t = _SPECIAL_PLAIN[op.name]
                return self.cast(expr, t, ct)
            rt = self.regs.get(op.name)
            if rt is None:
                raise self.error(f"register {op.name} is not declared (or a special register "
                                 "the executor does not provide)")
            return self.cast(self.reg(op.name), STORAGE[rt], ct)
        if isinstance(op, Imm):
            if ct == "bool":
                return "true" if op.value else "false"
            if ct in FLOATS:
                return f"(({ct}){op.value})"
            bits = op.value % (1 << (8 * SIZE[ct]))
            if SIZE[ct] == 16:  # .b128: no C++ literal is that wide (a negative one extends)
                return f"((({ct}){bits >> 64:#x}ull << 64) | ({ct}){bits & (2**64 - 1):#x}ull)"
            return f"(({ct}){bits:#x}ull)"
        if isinstance(op, FImm):
            if ct == "float":
                if op.width == 32:
                    return f"ptx::bits<float>((uint32_t){op.bits:#x}u)"
                return f"(float)ptx::bits<double>((uint64_t){op.bits:#x}ull)"
            if ct == "double":
                if op.width == 64:
                    return f"ptx::bits<double>((uint64_t){op.bits:#x}ull)"
                return f"(double)ptx::bits<float>((uint32_t){op.bits:#x}u)"
            return f"(({ct}){op.bits:#x}ull)"
        if isinstance(op, Sym):
            return self.cast(f"({self.address_of(op.name)} + {op.offset}ull)", "uint64_t", ct)
        if isinstance(op, Addr):
            return self.cast(self.address(op), "uint64_t", ct)
        raise self.error(f"operand {op!r} cannot be a value of type .{ptype}")

    def cast(self, expr: str, src: str, dst: str) -> str:
        if src == dst:
            return expr
        if dst == "bool":
            return f"({expr} != 0)"
        if src == "bool":
            return f"(({dst}){expr})"
        if (src in FLOATS) != (dst in FLOATS):
            if SIZE[src] == SIZE[dst]:
                return f"ptx::bits<{dst}>({expr})"
            if src in FLOATS and SIZE[dst] < SIZE[src]:  # st.b16 of an .f32 register: its low bits
                return f"(({dst})ptx::bits<{'uint32_t' if SIZE[src] == 4 else 'uint64_t'}>({expr}))"
            if src in FLOATS:  # a float register read wider as bits
                raise self.error(f"a .{src} register used as a {SIZE[dst]}-byte value")
            u = {4: "uint32_t", 8: "uint64_t"}.get(SIZE[dst])
            if u is None:
                raise self.error("a register of an unexpected size")
            return f"ptx::bits<{dst}>(({u}){expr})"
        if src in FLOATS:
            raise self.error(f"a .{src} register used as .{dst}")
        return f"(({dst}){expr})"

    def assign(self, op, expr: str, ctype: str) -> str:
        """``op = expr;`` where ``expr`` has C type ``ctype``; ``op`` None (``_``) discards."""
        if op is None:
            return f"(void)({expr});"
        if not isinstance(op, Reg) or op.neg:
            raise self.error(f"destination {op!r} is not a register")
        rt = self.regs.get(op.name)
        if rt is None:
            raise self.error(f"register {op.name} is not declared (or cannot be written)")
        st = STORAGE[rt]
        if st == ctype:
            return f"{self.reg(op.name)} = {expr};"
        if st == "bool":
            return f"{self.reg(op.name)} = ({expr}) != 0;"
        if (st in FLOATS) != (ctype in FLOATS) and SIZE[st] != SIZE[ctype]:
            if ctype in FLOATS:
                raise self.error(f"a .{ctype} value written to a {SIZE[st]}-byte register")
            u = {4: "uint32_t", 8: "uint64_t"}[SIZE[st]]
            return f"{self.reg(op.name)} = ptx::bits<{st}>(({u})({expr}));"
        return f"{self.reg(op.name)} = {self.cast(f'({expr})', ctype, st)};"

    def address_of(self, name: str) -> str:
        """The PTX address (u64) a variable's name stands for."""
        tr = self.tr
        if name in self.locals:
            return cname("V", name)
        if name in tr.global_index:
            return f"T->L->globals[{tr.global_index[name]}]"
        key = tr.shared_key(self.fn, name)
        if key in tr.shared_offsets:
            return f"(uint64_t){tr.shared_offsets[key]}ull"
        if name in tr.dynamic_shared:
            return "(uint64_t)T->L->dyn_offset"
        if name in self.eparams:
            return f"(ptx::kParam + {self.eparams[name]}ull)"
        if name in tr.fn_addr:
            return f"(uint64_t){tr.fn_addr[name]:#x}ull"
        if name == "WARP_SZ":  # the PTX ISA's predefined constant
            return "(uint64_t)32ull"
        raise self.error(f"unknown name {name!r}")

    def address(self, a: Addr) -> str:
        if a.base is None:
            return f"(uint64_t){a.offset % (1 << 64):#x}ull"
        if isinstance(a.base, Reg):
            return f"({self.value(a.base, 'u64')} + (uint64_t){a.offset % (1 << 64):#x}ull)"
        return f"({self.address_of(a.base.name)} + (uint64_t){a.offset % (1 << 64):#x}ull)"

    def param_ptr(self, a: Addr, size: int, write: bool, line: Any) -> str:
        """A host pointer for a ``.param``-space access ``a`` (a name, or a register)."""
        if isinstance(a.base, Sym):
            name, off = a.base.name, a.offset + a.base.offset
            local = self._local_param(name)
            if local is not None:
                psize = local[1]
                if off < 0 or off + size > psize:
                    raise self.error(f"access of {size} bytes at {name}+{off} is outside the "
                                     f"{psize}-byte parameter", line)
                return self._local_param_ptr(local[0], off)
            if name in self.fparams:
                p = (self.fn.rets + self.fn.params)[self.fparams[name]]
                if off < 0 or off + size > p.size:
                    raise self.error(f"access of {size} bytes at {name}+{off} is outside the "
                                     f"{p.size}-byte parameter", line)
                return f"(A[{self.imm(self.fparams[name])}] + {self.imm(off)})"
            if name in self.eparams and not write:
                return f"(T->L->params + {self.imm(self.eparams[name] + off)})"
            raise self.error(f"{name} is not a parameter here", line)
        if isinstance(a.base, Reg) and not write:
            return f"ptx::pptr(T, {self.address(a)}, {size}, 0, {line})"
        raise self.error("a .param access through this address is not supported", line)

    def imm(self, value: int) -> str:
        """An integer constant of the generated code (the interpreter's forms: an operand)."""
        return str(value)

    def _local_param(self, name: str) -> tuple[Any, int] | None:
        """A ``.param`` variable of this function's own (where it lives, bytes), or None."""
        return self.params.get(name)

    def _local_param_ptr(self, where: Any, off: int) -> str:
        return f"({where} + {off})"


class ModuleLayout:
    def __init__(self, m: PtxModule) -> None:
        self.module = m
        self.global_index: dict[str, int] = {}
        self.shared_offsets: dict[str, int] = {}
        self.dynamic_shared: set[str] = set()
        #: C++ name of each function: by its place in the module, never by its PTX name
        #: (numba-cuda's names hold object addresses and counters of the process that
        #: compiled them: the C++, and so its build, must not change with them).
        self.fn_cname = {name: f"F{i}" for i, name in enumerate(m.functions)}
        #: each function's address, as a value (``mov.u64 %rd, f;``) and an indirect call's target
        self.fn_addr = function_addresses(m)
        off = 0
        dyn_align = 16
        for g in m.globals.values():
            if g.space in ("global", "const"):
                self.global_index[g.name] = len(self.global_index)
            elif g.space == "shared":
                if g.extern and g.size == 0:
                    self.dynamic_shared.add(g.name)
                    dyn_align = max(dyn_align, g.align)
                else:
                    off = -(-off // g.align) * g.align
                    self.shared_offsets[g.name] = off
                    off += g.size
        for fn in m.functions.values():
            for d in fn.body or []:
                if isinstance(d, Decl) and d.space == "shared":
                    if d.extern or (d.dims and d.dims[-1] is None):
                        self.dynamic_shared.add(d.name)
                        continue
                    off = -(-off // d.alignment) * d.alignment
                    self.shared_offsets[self.shared_key(fn, d.name)] = off
                    off += d.size
        self.dyn_offset = -(-off // dyn_align) * dyn_align

    def shared_key(self, fn: Function, name: str) -> str:
        return f"{fn.name}/{name}" if f"{fn.name}/{name}" in self.shared_offsets else name


def operand_vec(op) -> list:
    """The items of a vector operand (a single operand as a list of one)."""
    return list(op.items) if isinstance(op, Vec) else [op]
