"""PTX instructions to C++ statements: the translator's instruction set.

One concern: dispatch each PTX instruction to the module that writes its
C++ (``_ops_mem.py`` data movement, ``_ops_alu.py`` values, ``_ops_ctl.py``
control, synchronisation and calls).  An opcode, modifier or type the
translator does not know raises :class:`._context.UnsupportedPtx` naming the
instruction -- nothing unknown is ever dropped.
"""

from __future__ import annotations

from ._ast import Instr
from ._context import FuncCtx
from ._errors import UnsupportedPtx
from ._ops_alu import (
    _arith,
    _bits,
    _copysign,
    _cvt,
    _logic,
    _selp,
    _set,
    _setp,
    _shf,
    _shift,
    _testp,
    _unary,
)
from ._ops_ctl import (
    BUILTIN_CALLS,
    _activemask,
    _bar,
    _bra,
    _call,
    _exit,
    _fence,
    _match,
    _mbarrier,
    _nop,
    _redux,
    _ret,
    _shfl,
    _trap,
    _vote,
)
from ._ops_mem import _atom, _cvta, _isspacep, _ld, _mov, _st
from ._ops_pack import dp, fns, video

__all__ = ["emit", "BUILTIN_CALLS"]


def emit(ctx: FuncCtx, it: Instr) -> str:
    """The C++ statement(s) of instruction ``it``."""
    fn = _HANDLERS.get(it.base)
    if fn is None:
        raise ctx.error(f"the instruction {it.opcode} is not supported by the simulator's PTX "
                        "executor")
    try:
        return fn(ctx, it)
    except UnsupportedPtx:
        raise
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, StopIteration) as e:
        # operands or modifiers of a form the writer does not expect: refused, never guessed
        raise ctx.error(f"{it.opcode}: a form of the instruction the simulator's PTX "
                        f"executor does not support ({type(e).__name__}: {e})") from None


_HANDLERS = {
    "mov": _mov, "cvta": _cvta, "isspacep": _isspacep,
    "ld": _ld, "ldu": _ld, "st": _st, "atom": _atom, "red": _atom,
    "add": _arith, "sub": _arith, "mul": _arith, "mad": _arith, "fma": _arith, "div": _arith,
    "rem": _arith, "min": _arith, "max": _arith, "addc": _arith, "subc": _arith, "madc": _arith,
    "abs": _unary, "neg": _unary, "not": _unary, "cnot": _unary, "popc": _unary, "clz": _unary,
    "brev": _unary, "bfind": _unary, "sqrt": _unary, "rcp": _unary, "rsqrt": _unary,
    "ex2": _unary, "lg2": _unary, "sin": _unary, "cos": _unary, "tanh": _unary,
    "and": _logic, "or": _logic, "xor": _logic, "shl": _shift, "shr": _shift, "shf": _shf,
    "bfe": _bits, "bfi": _bits, "sad": _bits, "prmt": _bits, "lop3": _bits,
    "setp": _setp, "set": _set, "selp": _selp, "testp": _testp, "copysign": _copysign, "cvt": _cvt,
    "bra": _bra, "ret": _ret, "exit": _exit, "trap": _trap, "brkpt": _trap,
    "nanosleep": _nop, "prefetch": _nop, "prefetchu": _nop, "pmevent": _nop,
    "membar": _fence, "fence": _fence, "bar": _bar, "barrier": _bar, "mbarrier": _mbarrier,
    "shfl": _shfl, "vote": _vote, "match": _match, "redux": _redux, "activemask": _activemask,
    "call": _call, "dp4a": dp, "dp2a": dp, "fns": fns,
    **{f"{v}{n}": video for v in ("vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax")
       for n in (2, 4)},
}

