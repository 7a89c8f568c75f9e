"""What a driver reports of a PTX module's kernels: the PTX executor's module facts.

One concern: from a parsed module, each entry's parameter layout and its
static shared, constant and local sizes (``cuFuncGetAttribute``), and
which functions an entry reaches.
"""

from __future__ import annotations

from ._ast import Addr, Decl, EntryInfo, Function, Instr, Param, PtxModule, Sym, Vec

__all__ = ["layout", "reachable", "entry_info", "FUNC_BASE", "function_addresses", "signature",
           "indirect_call"]

#: Where function addresses live (``mov.u64 %rd, f;``): ``FUNC_BASE + 16 * (i + 1)`` for the
#: module's i-th function (ptxrt.h's ``kFunc``), a window no data access reaches (it is no
#: allocation, shared, local or parameter address: loads and stores there fault 700), so a
#: data pointer called as a function, or a function address used as data, never aliases.
FUNC_BASE = 0x0004000000000000


def function_addresses(m: PtxModule) -> dict[str, int]:
    """The address of each function of ``m`` (declarations too: unique, never null)."""
    return {name: FUNC_BASE + 16 * (i + 1) for i, name in enumerate(m.functions)}


def signature(rets: list[Param], params: list[Param]) -> tuple:
    """What an indirect call's prototype must share with its callee: the byte size of each
    return value and parameter (their types need not be spelt alike: ``.b64``/``.u64``)."""
    return (tuple(p.size for p in rets), tuple(p.size for p in params))


def indirect_call(it: Instr) -> bool:
    """Whether ``it`` is a call through a register (``call (r), %fp, (a), proto;``)."""
    args = list(it.args)
    if args and isinstance(args[0], Vec) and args[0].kind == "list":
        args.pop(0)
    return it.base == "call" and bool(args) and not isinstance(args[0], Sym)


# -------------------------------------------------------------- entry facts
def layout(params: list[Param]) -> tuple[list[tuple[str, int, int, int]], int]:
    """``(name, size, align, offset)`` of each parameter, and the block's size."""
    out, off = [], 0
    for p in params:
        off = -(-off // p.align) * p.align
        out.append((p.name, p.size, p.align, off))
        off += p.size
    return out, off


def _names(body: list) -> set[str]:
    out: set[str] = set()
    for it in body:
        if isinstance(it, Instr):
            for a in it.args:
                _collect(a, out)
    return out


def _collect(a, out: set[str]) -> None:
    if isinstance(a, Sym):
        out.add(a.name)
    elif isinstance(a, Addr) and isinstance(a.base, Sym):
        out.add(a.base.name)
    elif isinstance(a, Vec):
        for x in a.items:
            _collect(x, out)


def reachable(m: PtxModule, fn: Function) -> list[Function]:
    """``fn`` and every function with a body it may call, in discovery order."""
    seen = {fn.name: fn}
    todo = [fn]
    while todo:
        f = todo.pop()
        listed = {n for names, _line in f.calltargets.values() for n in names}
        for n in sorted(_names(f.body or []) | listed):
            g = m.functions.get(n)
            if g is not None and n not in seen and g.body is not None:
                seen[n] = g
                todo.append(g)
    return list(seen.values())


def _local(m: PtxModule, fn: Function, stack: tuple[str, ...] = ()) -> int:
    own = sum(d.size for d in fn.body or [] if isinstance(d, Decl) and d.space == "local")
    deepest = 0
    for n in _names(fn.body or []):
        g = m.functions.get(n)
        if g is not None and g.body is not None and g.kind == "func" and n not in stack:
            deepest = max(deepest, _local(m, g, stack + (fn.name,)))
    return own + deepest


def _does_nothing(fn: Function) -> bool:
    """Whether the first instruction of ``fn``'s body is an unguarded ``ret`` or ``exit``."""
    for item in fn.body or []:
        if isinstance(item, Instr):
            return item.pred is None and item.base in ("ret", "exit")
    return False  # no body (declared only), or no instruction: not an entry that runs


def entry_info(m: PtxModule, fn: Function) -> EntryInfo:
    """The :class:`EntryInfo` of entry ``fn`` of ``m``."""
    params, size = layout(fn.params)
    dynamic = any(m.globals[n].space == "shared" and m.globals[n].extern
                  and m.globals[n].size == 0
                  for f in reachable(m, fn) for n in _names(f.body or []) if n in m.globals)
    # each module variable counts once even when several functions name it
    shared_vars = {n for f in reachable(m, fn) for n in _names(f.body or [])
                   if n in m.globals and m.globals[n].space == "shared" and m.globals[n].size}
    const_vars = {n for f in reachable(m, fn) for n in _names(f.body or [])
                  if n in m.globals and m.globals[n].space == "const"}
    shared = sum(d.size for f in reachable(m, fn) for d in f.body or []
                 if isinstance(d, Decl) and d.space == "shared")
    shared += sum(m.globals[n].size for n in shared_vars)
    const = sum(m.globals[n].size for n in const_vars)
    nt = fn.perf.get("reqntid") or fn.perf.get("maxntid")
    max_threads = None
    if nt:
        max_threads = 1
        for v in nt:
            max_threads *= v
    return EntryInfo(fn.name, params, size, shared, const, _local(m, fn), max_threads, m.arch,
                     dynamic, fn.line, _does_nothing(fn))
