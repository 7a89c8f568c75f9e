"""PTX module to C++: the translator of the PTX executor (module and function structure).

One concern: lay out a parsed module for execution and write its C++ --
module variables (an index into the launch's table of device addresses),
the shared window (static variables at fixed offsets, the dynamic
``.extern .shared`` arrays after them), one C++ function per PTX function
(registers as typed locals, labels as ``goto`` targets, ``.local``
variables as frames of the thread's local arena, call-site ``.param``
variables as byte arrays) and one exported wrapper per ``.entry``
(``ga_ptx__k<i>``, the runtime's entry signature).  Instructions are
written by ``_ops.py``.  An instruction the executor cannot run makes the
functions that reach it unlaunchable (:class:`Translation.unsupported`),
never a silently different program.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ._ast import Addr, Decl, FImm, Function, Imm, Instr, PtxModule, Reg, Sym, Vec
from ._info import reachable
from ._lex import PtxError

__all__ = ["Translation", "translate", "TRANSLATOR_VERSION", "UnsupportedPtx", "cname"]

#: Changes whenever the generated C++ changes meaning (part of the cache key).
TRANSLATOR_VERSION = "1"
INVALID_IMAGE = 200

#: Storage C++ type of each register type.
STORAGE = {"pred": "bool", "b8": "uint8_t", "u8": "uint8_t", "s8": "uint8_t",
           "b16": "uint16_t", "u16": "uint16_t", "s16": "uint16_t", "f16": "uint16_t",
           "bf16": "uint16_t", "b32": "uint32_t", "u32": "uint32_t", "s32": "uint32_t",
           "f32": "float", "f16x2": "uint32_t", "bf16x2": "uint32_t", "b64": "uint64_t",
           "u64": "uint64_t", "s64": "uint64_t", "f64": "double"}
#: C++ type an instruction of each PTX type computes in.
CTYPE = {"pred": "bool", "b8": "uint8_t", "u8": "uint8_t", "s8": "int8_t", "b16": "uint16_t",
         "u16": "uint16_t", "s16": "int16_t", "f16": "uint16_t", "bf16": "uint16_t",
         "b32": "uint32_t", "u32": "uint32_t", "s32": "int32_t", "f32": "float",
         "f16x2": "uint32_t", "bf16x2": "uint32_t", "b64": "uint64_t", "u64": "uint64_t",
         "s64": "int64_t", "f64": "double"}
SIZE = {"bool": 1, "uint8_t": 1, "int8_t": 1, "uint16_t": 2, "int16_t": 2, "uint32_t": 4,
        "int32_t": 4, "float": 4, "uint64_t": 8, "int64_t": 8, "double": 8}
FLOATS = ("float", "double")


class UnsupportedPtx(PtxError):
    """An instruction or feature the executor does not run (``code`` 200, ``CUDA_ERROR_INVALID_IMAGE``)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(INVALID_IMAGE, message, line)


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


@dataclass
class Translation:
    """The C++ of a module and how to launch its entries.

    ``source``: the C++ unit; ``exports``: entry name -> exported symbol;
    ``globals``: module variables (global and const) in the order of the
    launch's address table; ``shared_offsets``: static shared variable ->
    offset in the window; ``dyn_offset``: where dynamic shared memory
    starts; ``local_bytes``: entry -> bytes of its thread's local arena;
    ``unsupported``: entry -> the first thing it reaches that the executor
    does not run (message naming the instruction and its line).
    """

    source: str
    exports: dict[str, str]
    globals: list[str]
    shared_offsets: dict[str, int]
    dyn_offset: int
    local_bytes: dict[str, int]
    unsupported: dict[str, str] = field(default_factory=dict)


class FuncCtx:
    """What the writer of one function knows: its registers, variables and parameters."""

    def __init__(self, tr: _Translator, fn: Function) -> None:
        self.tr = tr
        self.fn = fn
        self.regs: dict[str, str] = {}      # PTX register -> PTX type
        self.locals: dict[str, Decl] = {}   # .local variable -> decl
        self.params: dict[str, tuple[str, int]] = {}  # call-site .param -> (C name, size)
        self.line = fn.line
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
            if src in FLOATS:  # a float register read wider/narrower as bits
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
        if name in tr.module.functions:
            raise self.error(f"the address of function {name} (indirect calls are not supported)")
        raise self.error(f"unknown name {name!r}")

    def address(self, a: Addr) -> str:
        if a.base is None:
            return f"(uint64_t){a.offset % (1 << 64):#x}ull"
        if isinstance(a.base, Reg):
            return f"({self.value(a.base, 'u64')} + (uint64_t){a.offset % (1 << 64):#x}ull)"
        return f"({self.address_of(a.base.name)} + (uint64_t){a.offset % (1 << 64):#x}ull)"

    def param_ptr(self, a: Addr, size: int, write: bool, line: int) -> str:
        """A host pointer for a ``.param``-space access ``a`` (a name, or a register)."""
        if isinstance(a.base, Sym):
            name, off = a.base.name, a.offset + a.base.offset
            if name in self.params:
                cn, psize = self.params[name]
                if off < 0 or off + size > psize:
                    raise self.error(f"access of {size} bytes at {name}+{off} is outside the "
                                     f"{psize}-byte parameter", line)
                return f"({cn} + {off})"
            if name in self.fparams:
                p = (self.fn.rets + self.fn.params)[self.fparams[name]]
                if off < 0 or off + size > p.size:
                    raise self.error(f"access of {size} bytes at {name}+{off} is outside the "
                                     f"{p.size}-byte parameter", line)
                return f"(A[{self.fparams[name]}] + {off})"
            if name in self.eparams and not write:
                return f"(T->L->params + {self.eparams[name] + off})"
            raise self.error(f"{name} is not a parameter here", line)
        if isinstance(a.base, Reg) and not write:
            return f"ptx::pptr(T, {self.address(a)}, {size}, 0, {line})"
        raise self.error("a .param access through this address is not supported", line)


class _Translator:
    def __init__(self, m: PtxModule) -> None:
        self.module = m
        self.global_index: dict[str, int] = {}
        self.shared_offsets: dict[str, int] = {}
        self.dynamic_shared: set[str] = set()
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


def _rename(op, names: dict[str, str]):
    if isinstance(op, Reg):
        return Reg(names.get(op.name, op.name), op.neg)
    if isinstance(op, Sym) and op.name in names:
        return Sym(names[op.name], op.offset)
    if isinstance(op, Addr) and op.base is not None:
        return Addr(_rename(op.base, names), op.offset)
    if isinstance(op, Vec):
        return Vec(tuple(_rename(x, names) for x in op.items), op.kind)
    return op


def _rescope(body: list) -> list:
    """The body with every declaration that shadows an outer one renamed in its scope.

    PTX scopes nest (``{ .reg .pred %p1; ... }`` in inline assembly and call
    sequences); the C++ hoists every declaration to the function's top, so
    a shadowing name gets a unique one (``%p1@3``) for the rest of its scope.
    """
    out: list = []
    scopes: list[dict[str, str]] = [{}]
    seen: set[str] = set()
    count = 0
    for it in body:
        if isinstance(it, tuple) and it[0] == "{":
            scopes.append(dict(scopes[-1]))
        elif isinstance(it, tuple) and it[0] == "}":
            if len(scopes) > 1:
                scopes.pop()
        elif isinstance(it, Decl):
            names = ([f"{it.name}{i}" for i in range(it.count)] if it.count else [it.name])
            if len(scopes) > 1 and any(n in seen for n in names):
                count += 1
                if it.count:  # %r<4> shadowing: rename the whole range by its prefix
                    new = f"{it.name}@{count}@"
                    for n in names:
                        scopes[-1][n] = n.replace(it.name, new, 1)
                    it = Decl(it.line, it.space, it.type, new, it.count, it.align, it.dims,
                              it.vector, it.init, it.extern)
                else:
                    scopes[-1][it.name] = f"{it.name}@{count}"
                    it = Decl(it.line, it.space, it.type, f"{it.name}@{count}", it.count,
                              it.align, it.dims, it.vector, it.init, it.extern)
            seen.update(names)
        elif isinstance(it, Instr) and len(scopes) > 1 and scopes[-1]:
            names_map = scopes[-1]
            it = Instr(it.line, it.base, it.mods, [_rename(x, names_map) for x in it.args],
                       _rename(it.pred, names_map) if it.pred is not None else None)
        out.append(it)
    return out


def _declare(ctx: FuncCtx) -> list[str]:
    """Hoisted declarations of a function: registers, frames, call-site parameters."""
    out = []
    for d in ctx.fn.body or []:
        if not isinstance(d, Decl):
            continue
        if d.space == "reg":
            if d.vector != 1 or d.type not in STORAGE:
                raise ctx.error(f"register {d.name} of type .{d.type} is not supported", d.line)
            names = [f"{d.name}{i}" for i in range(d.count)] if d.count else [d.name]
            for n in names:
                prior = ctx.regs.get(n)
                if prior is not None:
                    if STORAGE[prior] != STORAGE[d.type]:
                        raise ctx.error(f"register {n} declared with two types", d.line)
                    continue
                ctx.regs[n] = d.type
                out.append(f"{STORAGE[d.type]} {ctx.reg(n)} = 0;")
        elif d.space == "local":
            if d.name in ctx.locals:
                continue
            ctx.locals[d.name] = d
            out.append(f"const uint64_t {cname('V', d.name)} = ptx::kLocal + ptx::frame(T, "
                       f"{max(d.size, 1)}, {max(d.alignment, 1)}, {d.line});")
        elif d.space == "param":
            prior_p = ctx.params.get(d.name)
            size = max(d.size, 1)
            if prior_p is not None:
                if prior_p[1] < size:
                    raise ctx.error(f"parameter {d.name} declared twice with different sizes",
                                    d.line)
                continue
            cn = cname("P", d.name)
            ctx.params[d.name] = (cn, size)
            out.append(f"alignas({max(d.alignment, 8)}) char {cn}[{size}] = {{}};")
    return out


def _function(tr: _Translator, fn: Function, ops) -> tuple[str, str | None]:
    """C++ of one function with a body; and the first unsupported thing (or None)."""
    if fn.body is not None:
        fn = Function(fn.name, fn.kind, fn.line, fn.params, fn.rets, fn.linkage, fn.perf,
                      _rescope(fn.body))
    ctx = FuncCtx(tr, fn)
    name = cname("F", fn.name) if fn.kind == "func" else cname("K", fn.name)
    head = f"static void {name}(ptx::Thread* T, char* const* A)"
    try:
        lines = ["    " + x for x in _declare(ctx)]
        lines.append("    (void)A;")
        lines.append("    const uint64_t sp0_ = T->sp; (void)sp0_;")
        lines.append("    uint32_t CC = 0; (void)CC;")
        for it in fn.body or []:
            if isinstance(it, tuple):
                if it[0] == "label":
                    lines.append(f"{cname('L', it[1])}:;")
                continue
            if isinstance(it, Decl):
                continue
            ctx.line = it.line
            code = ops.emit(ctx, it)
            if it.pred is not None:
                code = f"if ({ctx.value(it.pred, 'pred')}) {{ {code} }}"
            lines.append(f"    {code}  // {it.line}")
        lines.append("L__ret_:;")
        lines.append("    T->sp = sp0_;")
    except UnsupportedPtx as e:
        body = (f"{head} {{ (void)A; ptx::trap(T, {e.line}, \"unsupported PTX\"); }}\n")
        return body, e.message
    return head + " {\n" + "\n".join(lines) + "\n}\n", None


def translate(m: PtxModule) -> Translation:
    """The C++ of module ``m`` (see :class:`Translation`)."""
    from . import _ops

    tr = _Translator(m)
    decls, bodies = [], []
    broken: dict[str, str] = {}
    defined = {n: f for n, f in m.functions.items() if f.body is not None}
    for fn in defined.values():
        nm = cname("F", fn.name) if fn.kind == "func" else cname("K", fn.name)
        decls.append(f"static void {nm}(ptx::Thread* T, char* const* A);")
        code, why = _function(tr, fn, _ops)
        bodies.append(code)
        if why is not None:
            broken[fn.name] = why
    exports: dict[str, str] = {}
    local: dict[str, int] = {}
    unsupported: dict[str, str] = {}
    wrappers = []
    for i, (name, info) in enumerate(m.entries.items()):
        fn = m.functions[name]
        sym = f"ga_ptx__k{i}"
        exports[name] = sym
        reach = reachable(m, fn)
        for f in reach:
            if f.name in broken:
                unsupported[name] = broken[f.name]
                break
            for it in f.body or []:
                if isinstance(it, Instr) and it.base == "call":
                    callee = _callee(it)
                    g = m.functions.get(callee or "")
                    if callee not in _ops.BUILTIN_CALLS and (g is None or g.body is None):
                        unsupported.setdefault(
                            name, f"PTX line {it.line}: call of {callee}, which the module "
                                  "declares but does not define (an external function the "
                                  "simulator does not provide)")
        recursive = any(f.name in {_callee(x) for g in reach for x in g.body or []
                                   if isinstance(x, Instr) and x.base == "call"}
                        for f in reach if f.kind == "func")
        nbytes = info.local_bytes + (16 << 10 if recursive else 0) + 64
        local[name] = nbytes
        wrappers.append(
            f"GA_HOST_EXPORT void {sym}(ga_host_rt* rt, const void* p) {{\n"
            f"    ptx::Thread t;\n    alignas(16) char local[{nbytes}];\n"
            f"    ptx::begin(&t, rt, (ptx::Launch*)p, local, {nbytes});\n"
            f"    try {{ {cname('K', name)}(&t, nullptr); }} catch (const ptx::Exit&) {{}}\n"
            f"    ptx::end(&t);\n}}\n")
    src = ("// Translated from PTX by gpuarray/_driver/sim/ptx (translator "
           f"{TRANSLATOR_VERSION}).\n#include \"ptxrt.h\"\n\n"
           + "\n".join(decls) + "\n\n" + "\n".join(bodies) + "\n" + "\n".join(wrappers))
    shared = {k: v for k, v in tr.shared_offsets.items()}
    return Translation(src, exports, list(tr.global_index), shared, tr.dyn_offset, local,
                       unsupported)


def _callee(it: Instr) -> str | None:
    for a in it.args:
        if isinstance(a, Sym):
            return a.name
    return None


def operand_vec(op) -> list:
    """The items of a vector operand (a single operand as a list of one)."""
    return list(op.items) if isinstance(op, Vec) else [op]
