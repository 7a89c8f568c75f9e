"""PTX control flow, synchronisation, warp collectives and calls to C++.

One concern: ``bra``/``ret``/``exit``/``trap``, barriers and fences,
``mbarrier`` objects, ``shfl``/``vote``/``match``/``redux``/``activemask``, and ``call`` with its
``.param`` sequences (``vprintf`` and ``__assertfail`` provided by the
simulator).
"""

from __future__ import annotations

from ._ast import HEAP_VAR, Addr, Instr, Reg, Sym, Vec
from ._context import FuncCtx, cname
from ._info import indirect_call, signature
from ._opbase import type_of
from ._ops_graph import GRAPH_CALLS, graph_call

__all__ = ["BUILTIN_CALLS", "call_target", "indirect_target", "callee_skip"]

#: The device runtime's cooperative-groups calls numba-cuda's ``cg.this_grid()``
#: and ``GridGroup.sync()`` make (libcudadevrt's ``cudaCGGetIntrinsicHandle(scope)``
#: and ``cudaCGSynchronize(handle, flags)``), provided by the executor.
CG_CALLS = ("cudaCGGetIntrinsicHandle", "cudaCGSynchronize")
#: External functions the executor provides itself (the device runtime's graph calls:
#: ``_ops_graph.py``; ``malloc``/``free`` on the module's device heap, ``_ast.HEAP_VAR``).
BUILTIN_CALLS = ("vprintf", "__assertfail", "malloc", "free", *GRAPH_CALLS, *CG_CALLS)


# -------------------------------------------------------- control, sync
def _bra(ctx: FuncCtx, it: Instr) -> str:
    tgt = it.args[0]
    if not isinstance(tgt, Sym):
        raise ctx.error(f"{it.opcode}: indirect branch")
    goto = f"goto {cname('L', tgt.name)};"
    if tgt.name in ctx.labels_seen:  # a loop: a thread may spin here on memory others write
        return (f"if (__builtin_expect(++SPIN_ >= ptx::kSpinEvery, 0)) "
                f"{{ SPIN_ = 0; ptx::spin(T, {it.line}); }} {goto}")
    return goto


def _ret(ctx: FuncCtx, it: Instr) -> str:
    return "goto L__ret_;"


def _exit(ctx: FuncCtx, it: Instr) -> str:
    return "goto L__ret_;" if ctx.fn.kind == "entry" else "throw ptx::Exit();"


def _trap(ctx: FuncCtx, it: Instr) -> str:
    return f'ptx::trap(T, {it.line}, "trap instruction");'


def _nop(ctx: FuncCtx, it: Instr) -> str:
    return ";"


def _fence(ctx: FuncCtx, it: Instr) -> str:
    return "__atomic_thread_fence(__ATOMIC_SEQ_CST);"


def _bar(ctx: FuncCtx, it: Instr) -> str:
    unknown = set(it.mods) - {"sync", "arrive", "red", "popc", "and", "or", "warp", "cta",
                              "aligned", "u32", "pred"}
    if unknown:
        raise ctx.error(f"{it.opcode}: .{sorted(unknown)[0]} barriers are not supported")
    mods = [m for m in it.mods if m not in ("cta", "aligned", "sync") or m == "sync"]
    if it.base == "bar" and "warp" in mods:
        mask = ctx.value(it.args[0], "b32")
        return f"ptx::collective(T, ptx::WARP_SYNC, {mask}, 0, 0, 0, {it.line});"
    arrive = "arrive" in mods
    red = next((m for m in ("popc", "and", "or") if m in mods), None)
    args = list(it.args)
    d = args.pop(0) if red else None
    pred = ctx.value(args.pop(), "pred") if red else "false"
    bid = ctx.value(args[0], "u32")
    cnt = ctx.value(args[1], "u32") if len(args) > 1 else "0u"
    if arrive:
        return f"ptx::bar_arrive(T, {bid}, {cnt});"
    op = {"popc": 1, "and": 2, "or": 3}.get(red or "", 0)
    call = f"ptx::bar_sync(T, {bid}, {cnt}, {op}, {pred}, {it.line})"
    if d is None:
        return call + ";"
    return ctx.assign(d, call if red == "popc" else f"({call} != 0)",
                      "uint32_t" if red == "popc" else "bool")


def _shfl(ctx: FuncCtx, it: Instr) -> str:
    if "sync" not in it.mods:
        raise ctx.error(f"{it.opcode}: shfl without .sync (removed after sm_6x) is not supported")
    mode = next((m for m in it.mods if m in ("up", "down", "bfly", "idx")), None)
    if mode is None:
        raise ctx.error(f"{it.opcode}: no shuffle mode")
    kind = {"up": "SHFL_UP", "down": "SHFL_DOWN", "bfly": "SHFL_BFLY", "idx": "SHFL_IDX"}[mode]
    d, a, b, c, mask = it.args
    dp = None
    if isinstance(d, Vec):
        d, dp = d.items
    call = (f"ptx::collective(T, ptx::{kind}, {ctx.value(mask, 'b32')}, {ctx.value(a, 'b32')}, "
            f"{ctx.value(b, 'b32')}, {ctx.value(c, 'b32')}, {it.line}, &p_)")
    out = f"{{ bool p_ = false; const uint32_t r_ = (uint32_t){call}; "
    out += ctx.assign(d, "r_", "uint32_t")
    if dp is not None:
        out += " " + ctx.assign(dp, "p_", "bool")
    return out + " }"


def _vote(ctx: FuncCtx, it: Instr) -> str:
    if "sync" not in it.mods:
        raise ctx.error(f"{it.opcode}: vote without .sync is not supported")
    mode = next(m for m in it.mods if m in ("all", "any", "uni", "ballot"))
    d, a, mask = it.args
    kind = {"all": "VOTE_ALL", "any": "VOTE_ANY", "uni": "VOTE_UNI", "ballot": "VOTE_BALLOT"}[mode]
    call = (f"ptx::collective(T, ptx::{kind}, {ctx.value(mask, 'b32')}, "
            f"(uint64_t){ctx.value(a, 'pred')}, 0, 0, {it.line})")
    if mode == "ballot":
        return ctx.assign(d, f"(uint32_t){call}", "uint32_t")
    return ctx.assign(d, f"({call} != 0)", "bool")


def _match(ctx: FuncCtx, it: Instr) -> str:
    mode = next(m for m in it.mods if m in ("any", "all"))
    t = type_of(ctx, it)
    d, a, mask = it.args
    dp = None
    if isinstance(d, Vec):
        d, dp = d.items
    kind = "MATCH_ANY" if mode == "any" else "MATCH_ALL"
    call = (f"ptx::collective(T, ptx::{kind}, {ctx.value(mask, 'b32')}, "
            f"(uint64_t){ctx.value(a, t)}, 0, 0, {it.line}, &p_)")
    out = f"{{ bool p_ = false; const uint32_t r_ = (uint32_t){call}; " + ctx.assign(d, "r_", "uint32_t")
    if dp is not None:
        out += " " + ctx.assign(dp, "p_", "bool")
    return out + " }"


def _redux(ctx: FuncCtx, it: Instr) -> str:
    t = type_of(ctx, it)
    op = next(m for m in it.mods if m in ("add", "min", "max", "and", "or", "xor"))
    if t not in ("u32", "s32", "b32"):
        raise ctx.error(f"{it.opcode} is not supported")
    kind = {"add": "REDUX_ADD", "and": "REDUX_AND", "or": "REDUX_OR", "xor": "REDUX_XOR",
            "min": "REDUX_MIN" if t == "s32" else "REDUX_UMIN",
            "max": "REDUX_MAX" if t == "s32" else "REDUX_UMAX"}[op]
    d, a, mask = it.args
    call = (f"ptx::collective(T, ptx::{kind}, {ctx.value(mask, 'b32')}, "
            f"(uint64_t){ctx.value(a, 'u32')}, 0, 0, {it.line})")
    return ctx.assign(d, f"(uint32_t){call}", "uint32_t")


def _activemask(ctx: FuncCtx, it: Instr) -> str:
    return ctx.assign(it.args[0], f"ptx::activemask(T, {it.line})", "uint32_t")


def call_target(ctx: FuncCtx, it: Instr) -> tuple[str, list[str], list[str]]:
    """``(callee, .param arrays passed, results' .param arrays)`` of a ``call`` (checked)."""
    args = list(it.args)
    rets: list = []
    if args and isinstance(args[0], Vec) and args[0].kind == "list":
        rets = list(args.pop(0).items)
    if not args or not isinstance(args[0], Sym):
        raise ctx.error(f"{it.opcode}: an indirect call is not supported")
    callee = args.pop(0).name
    params = list(args[0].items) if args and isinstance(args[0], Vec) else []
    if len(args) > 1:
        raise ctx.error(f"{it.opcode}: a call with a prototype (indirect) is not supported")
    for p in rets + params:
        if not isinstance(p, Sym) or p.name not in ctx.params:
            raise ctx.error(f"call of {callee}: argument {p!r} is not a .param variable")
    names = [p.name for p in rets + params]
    if callee in BUILTIN_CALLS:
        return callee, names, [p.name for p in rets]
    g = ctx.tr.module.functions.get(callee)
    if g is None or g.body is None:
        raise ctx.error(f"call of {callee}, which the module declares but does not define")
    if len(rets) == 1 and not g.rets and len(params) == len(g.params):
        # numba declares a C-ABI `void` function with a return value (its
        # `declare_device(..., abi="c")`) and ignores it; the linkers accept
        # that: the result .param is left as it was (undefined, as on a GPU)
        names = names[1:]
    elif len(rets) != len(g.rets) or len(params) != len(g.params):
        raise ctx.error(f"call of {callee} with {len(rets)} results and {len(params)} "
                        f"arguments; it has {len(g.rets)} and {len(g.params)}")
    return callee, names, [p.name for p in rets]


def _matches(have: tuple, want: tuple) -> bool:
    """Whether a function of signature ``have`` may be called through a prototype ``want``:
    the same, or (as numba declares C functions, see :func:`call_target`) a function without a
    result called with one, which is then left as it was."""
    return have == want or (not have[0] and len(want[0]) == 1 and have[1] == want[1])


def callee_skip(ctx: FuncCtx, name: str, nrets: int) -> int:
    """How many leading result arrays an indirect call passes ``name`` fewer (0, or 1 for a
    function without a result called with one)."""
    return nrets if not ctx.tr.module.functions[name].rets else 0


def indirect_target(ctx: FuncCtx, it: Instr) -> tuple[Reg, list[str], list[str]]:
    """``(register holding the callee's address, .param arrays passed (results first), the
    functions it may call)`` of an indirect ``call`` (checked): every function of the module
    whose signature is the prototype's (``.callprototype``), or the listed ones of a
    ``.calltargets`` that have it."""
    args = list(it.args)
    rets: list = []
    if args and isinstance(args[0], Vec) and args[0].kind == "list":
        rets = list(args.pop(0).items)
    fp = args.pop(0)
    if not isinstance(fp, Reg) or fp.neg:
        raise ctx.error(f"{it.opcode}: the callee {fp!r} is not a register")
    params = list(args.pop(0).items) if args and isinstance(args[0], Vec) else []
    if len(args) != 1 or not isinstance(args[0], Sym):
        raise ctx.error(f"{it.opcode}: an indirect call names no .callprototype or .calltargets")
    label = args[0].name
    for p in rets + params:
        if not isinstance(p, Sym) or p.name not in ctx.params:
            raise ctx.error(f"indirect call: argument {p!r} is not a .param variable")
    sig = (tuple(ctx.params[p.name][1] for p in rets), tuple(ctx.params[p.name][1] for p in params))
    m = ctx.tr.module
    if label in ctx.fn.protos:
        prets, pparams, _line = ctx.fn.protos[label]
        if len(prets) != len(rets) or len(pparams) != len(params):
            raise ctx.error(f"indirect call with {len(rets)} results and {len(params)} arguments; "
                            f"its prototype {label} has {len(prets)} and {len(pparams)}")
        want = signature(prets, pparams)
        names = [n for n, g in m.functions.items() if g.body is not None and g.kind == "func"
                 and _matches(signature(g.rets, g.params), want)]
    elif label in ctx.fn.calltargets:
        listed = ctx.fn.calltargets[label][0]
        for n in listed:
            g = m.functions.get(n)
            if g is None or g.kind != "func":
                raise ctx.error(f".calltargets {label} names {n}, which is no .func of the module")
        want = (tuple(p.size for p in m.functions[listed[0]].rets),
                tuple(p.size for p in m.functions[listed[0]].params))
        names = [n for n in listed if m.functions[n].body is not None
                 and _matches(signature(m.functions[n].rets, m.functions[n].params), sig)]
    else:
        raise ctx.error(f"indirect call: {label} is no .callprototype or .calltargets of "
                        f"{ctx.fn.name}")
    if len(want[0]) == len(sig[0]) and len(want[1]) == len(sig[1]):
        for have, need in zip(sig[0] + sig[1], want[0] + want[1], strict=True):
            if have < need:
                raise ctx.error(f"indirect call: a .param of {have} bytes where {label} has "
                                f"{need}")
    return fp, [p.name for p in rets + params], names


def _call_params(it: Instr) -> list:
    """The argument operands of a call (after its results and callee)."""
    args = list(it.args)
    if args and isinstance(args[0], Vec) and args[0].kind == "list":
        args.pop(0)
    args.pop(0)
    return list(args[0].items) if args and isinstance(args[0], Vec) else []


def _icall(ctx: FuncCtx, it: Instr) -> str:
    fp, names, callees = indirect_target(ctx, it)
    ptrs = [ctx.params[n][0] for n in names]
    nrets = len(names) - len(_call_params(it))
    cases = " ".join(f"case {ctx.tr.fn_addr[n]:#x}ull: {ctx.tr.fn_cname[n]}(T, av_ + "
                     f"{callee_skip(ctx, n, nrets)}); break;" for n in callees)
    return (f"{{ char* const av_[] = {{{', '.join(ptrs) or 'nullptr'}}}; "
            f"const uint64_t fp_ = {ctx.value(fp, 'u64')}; switch (fp_) {{ {cases} "
            f"default: ptx::bad_call(T, fp_, {it.line}); }} }}")


def _call(ctx: FuncCtx, it: Instr) -> str:
    if indirect_call(it):
        return _icall(ctx, it)
    callee, names, rets = call_target(ctx, it)
    ptrs = [ctx.params[n][0] for n in names]
    if callee == "vprintf":
        if len(names) != 3 or len(rets) != 1:
            raise ctx.error("vprintf called with other than (format, arguments)")
        return (f"ptx::store<uint32_t>({ptrs[0]}, (uint32_t)ptx::vprintf(T, "
                f"ptx::load<uint64_t>({ptrs[1]}), ptx::load<uint64_t>({ptrs[2]}), {it.line}));")
    if callee in GRAPH_CALLS:
        return graph_call(ctx, callee, ptrs, len(rets), len(names) - len(rets), it.line)
    if callee in CG_CALLS:
        return _cg_call(ctx, callee, ptrs, len(rets), len(names) - len(rets), it.line)
    if callee == "malloc":
        if len(names) != 2 or len(rets) != 1:
            raise ctx.error("malloc called with other than (size) -> pointer")
        return (f"ptx::store<uint64_t>({ptrs[0]}, ptx::dev_malloc(T, {ctx.address_of(HEAP_VAR)}, "
                f"ptx::load<uint64_t>({ptrs[1]}), {it.line}));")
    if callee == "free":
        if len(names) - len(rets) != 1:
            raise ctx.error("free called with other than (pointer)")
        return (f"ptx::dev_free(T, {ctx.address_of(HEAP_VAR)}, ptx::load<uint64_t>({ptrs[-1]}), "
                f"{it.line});")
    if callee == "__assertfail":
        return f"T->rt->line = {it.line}; T->rt->fault(T->rt, 710, 0, 0, 0);"
    return (f"{{ char* const av_[] = {{{', '.join(ptrs) or 'nullptr'}}}; "
            f"{ctx.tr.fn_cname[callee]}(T, av_); }}")


def _cg_call(ctx: FuncCtx, callee: str, ptrs: list[str], nrets: int, nparams: int,
             line: int) -> str:
    """C++ of a cooperative-groups call (:data:`CG_CALLS`) with ``.param`` pointers."""
    if callee == "cudaCGGetIntrinsicHandle":
        if nrets != 1 or nparams != 1:
            raise ctx.error(f"{callee} called with other than (scope) -> handle")
        # scope 1 is the grid (the only one numba-cuda asks for); the handle is opaque
        return (f"{{ if (ptx::load<uint32_t>({ptrs[1]}) != 1) ptx::trap(T, {line}, "
                f"\"cudaCGGetIntrinsicHandle: a scope other than the grid (1)\"); "
                f"ptx::store<uint64_t>({ptrs[0]}, 1); }}")
    if nparams != 2 or nrets > 1:
        raise ctx.error(f"{callee} called with other than (handle, flags)")
    out = f"ptx::grid_sync(T, {line});"
    if nrets:
        out += f" ptx::store<uint32_t>({ptrs[0]}, 0);"
    return "{ " + out + " }"


# ------------------------------------------------------------- mbarrier
#: Modifiers of each mbarrier operation the translator runs (besides ``.b64``, the
#: state space and the ignored ``.sem``/``.scope`` ones): ptxas judges the spelling
#: (``_check.py``), this refuses what the runtime does not implement.
_MB_OPS = {"init": set(), "inval": set(), "arrive": {"noComplete", "expect_tx"},
           "arrive_drop": {"noComplete", "expect_tx"}, "test_wait": {"parity"},
           "try_wait": {"parity"}, "pending_count": set(), "expect_tx": set(),
           "complete_tx": set()}
_MB_SPACES = ("shared", "shared::cta", "shared::cluster")
_MB_IGNORED = {"release", "acquire", "relaxed", "cta", "cluster", "b64"}


def _mbarrier(ctx: FuncCtx, it: Instr) -> str:
    """mbarrier objects in shared memory (``ptx_sync.h``, ``mb_*``): init, inval, arrive
    (count, ``.noComplete``, ``.expect_tx``), arrive_drop, expect_tx, complete_tx,
    test_wait/try_wait (state or ``.parity``), pending_count."""
    op = it.mods[0] if it.mods else ""
    if op not in _MB_OPS or "b64" not in it.mods:
        raise ctx.error(f"{it.opcode}: a form of mbarrier the simulator's PTX executor does not "
                        "support")
    spaces = [m for m in it.mods if m in _MB_SPACES]
    for m in it.mods[1:]:
        if m not in _MB_OPS[op] and m not in _MB_SPACES and m not in _MB_IGNORED:
            raise ctx.error(f"{it.opcode}: the modifier .{m} is not supported")
    generic = "false" if spaces else "true"
    args = list(it.args)
    line = it.line
    if op == "pending_count":
        d, s = args
        return ctx.assign(d, f"ptx::mb_pending_count(T, {ctx.value(s, 'b64')}, {line})",
                          "uint32_t")
    if op in ("test_wait", "try_wait"):
        d, a, v = args[:3]
        if not isinstance(a, Addr) or len(args) > 4:
            raise ctx.error(f"{it.opcode}: operands not (waitComplete, [addr], state)")
        parity = "parity" in it.mods
        val = ctx.value(v, "b32" if parity else "b64")
        if len(args) == 4:  # the suspend-time hint (ns): a GPU's, not observable here
            ctx.value(args[3], "b32")
        call = (f"ptx::mb_wait(T, {ctx.address(a)}, {generic}, (uint64_t){val}, "
                f"{'true' if parity else 'false'}, {'true' if op == 'try_wait' else 'false'}, "
                f"{line})")
        return ctx.assign(d, call, "bool")
    d = None
    if op in ("arrive", "arrive_drop"):
        d = args.pop(0)
    if not args or not isinstance(args[0], Addr):
        raise ctx.error(f"{it.opcode}: the address operand is not [...]")
    addr = ctx.address(args.pop(0))
    if op == "init":
        (n,) = args
        return f"ptx::mb_init(T, {addr}, {generic}, {ctx.value(n, 'u32')}, {line});"
    if op == "inval":
        if args:
            raise ctx.error(f"{it.opcode}: operands after the address")
        return f"ptx::mb_inval(T, {addr}, {generic}, {line});"
    if op in ("expect_tx", "complete_tx"):
        (n,) = args
        tx = f"(int64_t){ctx.value(n, 'u32')}"
        return (f"(void)ptx::mb_arrive(T, {addr}, {generic}, false, 0u, "
                f"{tx if op == 'expect_tx' else '-' + tx}, false, false, {line}, \"{op}\");")
    if len(args) > 1:
        raise ctx.error(f"{it.opcode}: too many operands")
    if "expect_tx" in it.mods:  # arrive.expect_tx state, [addr], txCount: one arrival
        count, tx = "1u", f"(int64_t){ctx.value(args[0], 'u32')}"
    else:
        count = ctx.value(args[0], "u32") if args else "1u"
        tx = "0"
        if "noComplete" in it.mods and not args:
            raise ctx.error(f"{it.opcode}: .noComplete without a count")
    call = (f"ptx::mb_arrive(T, {addr}, {generic}, true, {count}, {tx}, "
            f"{'true' if op == 'arrive_drop' else 'false'}, "
            f"{'true' if 'noComplete' in it.mods else 'false'}, {line}, \"{op}\")")
    return ctx.assign(d, call, "uint64_t")
