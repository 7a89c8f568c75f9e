"""What a driver reports of a PTX module's kernels: the PTX executor's module facts.

One concern: from a parsed module, each entry's parameter layout and its
static shared, constant and local sizes (``cuFuncGetAttribute``), and
which functions an entry reaches.
"""

from __future__ import annotations

from ._ast import Addr, Decl, EntryInfo, Function, Instr, Param, PtxModule, Sym, Vec

__all__ = ["layout", "reachable", "entry_info"]


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
        for n in _names(f.body or []):
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
                     dynamic, fn.line)
