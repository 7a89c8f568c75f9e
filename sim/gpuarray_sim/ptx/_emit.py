"""PTX module to C++: the translator's functions and module unit.

One concern: write the C++ unit of a parsed module -- one C++ function per
PTX function (declarations hoisted, nested scopes renamed, labels as
``goto`` targets, each instruction through ``_ops.emit``) and one exported
wrapper per ``.entry`` (``ga_ptx__k<i>``, the fiber runtime's entry
signature) -- and list what each entry cannot run (:class:`Translation`).
An instruction the executor cannot run makes the functions that reach it
unlaunchable, never a silently different program.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from . import _ops
from ._ast import Addr, Decl, Function, Instr, PtxModule, Reg, Sym, Vec
from ._context import FuncCtx, ModuleLayout, cname
from ._errors import UnsupportedPtx
from ._info import indirect_call, reachable
from ._types import STORAGE

__all__ = ["Translation", "translate", "entry_facts", "LOCAL_ON_STACK"]

#: Largest local arena per thread kept on the fiber's stack (128 KiB); beyond,
#: the launch gives each thread of a block a slice of a pool.
LOCAL_ON_STACK = 16 << 10


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
    # A register's name need not start with `%` (`.reg .pred __$temp3;` in
    # libdevice's inline assembly): the parser read such operands as names.
    regs = {n for d in out if isinstance(d, Decl) and d.space == "reg" and not d.name.startswith("%")
            for n in ([f"{d.name}{i}" for i in range(d.count)] if d.count else [d.name])}
    if regs:
        out = [Instr(it.line, it.base, it.mods, [_as_reg(x, regs) for x in it.args],
                     _as_reg(it.pred, regs) if it.pred is not None else None)
               if isinstance(it, Instr) else it for it in out]
    return out


def _as_reg(op, regs: set[str]):
    if isinstance(op, Sym) and op.name in regs and not op.offset:
        return Reg(op.name)
    if isinstance(op, Addr) and op.base is not None:
        return Addr(_as_reg(op.base, regs), op.offset)
    if isinstance(op, Vec):
        return Vec(tuple(_as_reg(x, regs) for x in op.items), op.kind)
    return op


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
                out.append(f"{STORAGE[d.type]} {ctx.reg(n)};")
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


def _function(tr: ModuleLayout, fn: Function, ops) -> tuple[str, str | None]:
    """C++ of one function with a body; and the first unsupported thing (or None)."""
    if fn.body is not None:
        fn = replace(fn, body=_rescope(fn.body))
    ctx = FuncCtx(tr, fn)
    name = tr.fn_cname[fn.name]
    head = f"static void {name}(ptx::Thread* T, char* const* A)"
    try:
        lines = ["    " + x for x in _declare(ctx)]
        lines.append("    (void)A;")
        lines.append("    const uint64_t sp0_ = T->sp; (void)sp0_;")
        lines.append("    uint32_t CC = 0; (void)CC;")
        lines.append("    uint32_t SPIN_ = 0; (void)SPIN_;")
        for it in fn.body or []:
            if isinstance(it, tuple):
                if it[0] == "label":
                    lines.append(f"{cname('L', it[1])}:;")
                    ctx.labels_seen.add(it[1])
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
    tr = ModuleLayout(m)
    decls, bodies = [], []
    broken: dict[str, str] = {}
    defined = {n: f for n, f in m.functions.items() if f.body is not None}
    for fn in defined.values():
        nm = tr.fn_cname[fn.name]
        decls.append(f"static void {nm}(ptx::Thread* T, char* const* A);")
        code, why = _function(tr, fn, _ops)
        bodies.append(code)
        if why is not None:
            broken[fn.name] = why
    exports, local, unsupported = entry_facts(m, broken)
    wrappers = []
    for name, sym in exports.items():
        nbytes = local[name]
        if nbytes <= LOCAL_ON_STACK:  # on the fiber's stack
            arena = (f"    alignas(16) char local_[{nbytes}];\n"
                     f"    ptx::begin(&t, rt, L, local_, {nbytes});\n")
        else:  # large local arrays: a per-launch pool, one slice per thread of the block
            arena = (f"    ptx::begin(&t, rt, L, nullptr, {nbytes});\n"
                     f"    t.local = ptx::pool_slice(&t, {nbytes}ull);\n")
        wrappers.append(
            f"GA_HOST_EXPORT void {sym}(ga_host_rt* rt, const void* p) {{\n"
            f"    ptx::Thread t;\n    ptx::Launch* L = (ptx::Launch*)p;\n{arena}"
            f"    try {{ {tr.fn_cname[name]}(&t, nullptr); }} catch (const ptx::Exit&) {{}}\n"
            f"    ptx::end(&t);\n}}\n")
    src = ("// Translated from PTX by gpuarray_sim.ptx.\n#include \"ptxrt.h\"\n\n"
           + "\n".join(decls) + "\n\n" + "\n".join(bodies) + "\n" + "\n".join(wrappers))
    shared = {k: v for k, v in tr.shared_offsets.items()}
    return Translation(src, exports, list(tr.global_index), shared, tr.dyn_offset, local,
                       unsupported)


def entry_facts(m: PtxModule, broken: dict[str, str]
                ) -> tuple[dict[str, str], dict[str, int], dict[str, str]]:
    """Per entry: its exported symbol, its thread's local arena (bytes) and why it cannot run.

    ``broken`` maps each function that holds something the executor does not
    run to the message naming it; an entry that reaches one, or calls a
    function the module declares but does not define, cannot run.  The same
    for both tiers (the translated build and the interpreter).
    """
    exports: dict[str, str] = {}
    local: dict[str, int] = {}
    unsupported: dict[str, str] = {}
    for i, (name, info) in enumerate(m.entries.items()):
        fn = m.functions[name]
        exports[name] = f"ga_ptx__k{i}"
        reach = reachable(m, fn)
        for f in reach:
            if f.name in broken:
                unsupported[name] = broken[f.name]
                break
            for it in f.body or []:
                if isinstance(it, Instr) and it.base == "call" and not indirect_call(it):
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
        # an indirect call may reach any function whose address the entry's code takes
        recursive = recursive or any(isinstance(x, Instr) and indirect_call(x)
                                     for g in reach for x in g.body or [])
        local[name] = -(-(info.local_bytes + (16 << 10 if recursive else 0) + 64) // 16) * 16
    return exports, local, unsupported


def _callee(it: Instr) -> str | None:
    if indirect_call(it):
        return None
    for a in it.args:
        if isinstance(a, Sym):
            return a.name
    return None
