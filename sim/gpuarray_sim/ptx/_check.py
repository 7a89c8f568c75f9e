"""What a GPU driver's PTX JIT refuses, refused at load: the executor's form checks.

One concern: between parsing and translation, refuse (218,
``CUDA_ERROR_INVALID_PTX``, naming the PTX line and the reason) every
instruction a driver's JIT (``ptxas``) would refuse at
``cuModuleLoadData`` although the translator could run it -- the simulator
may be stricter than a driver, never more lenient.  The checks:

* the instruction's spelling: for each opcode of :data:`._forms.LEGAL`
  (the arithmetic, logic, compare, select and convert instructions), the
  set of its modifiers and its types must be one ptxas accepts
  (``.rz`` on ``f16`` arithmetic, ``.ftz`` on ``f64``, ``mul.u32`` without
  ``.lo``/``.hi``/``.wide``, ``cvt.f32.s32`` without a rounding modifier...
  are refused).  The table is generated from ptxas by
  ``sim/tools/ptx_forms/gen.py``; a spelling it does not list is refused
  (stricter than ptxas where ptxas would accept it);
* operand types (the ISA's "Type checking" rules): a register operand
  must be of a type compatible with the type the instruction gives that
  operand -- same size, and ``.f`` only with ``.f``/``.b``, ``.s``/``.u``
  with ``.s``/``.u``/``.b``, ``f16x2``/``bf16x2`` with ``.b32``, predicates
  only with ``.pred``; ``cvt``, ``ld`` and ``st`` may use wider integer
  registers for integer types, and ``ld``/``st`` of a bit-size type any
  register at least as wide, floats too ("Operand size exceeding
  instruction-type size"); an integer literal is not a float operand;
* ld/st/ldu's modifiers: one of those ptxas was asked about (``_forms.MODSET``)
  that it never accepts with the opcode (``_forms.MODS``: ``st.sat``,
  ``ld.aligned``...) is refused, and so is an operand count it does not take
  (``_forms.BASEARITY``, forms without a cache-hint or level qualifier); the
  memory-order qualifiers combine as ptxas allows (``_memory_order``); a
  variable's address only in its own state space (generic: ``.global``,
  ``.shared`` or ``.local`` ones), never a store to a kernel parameter;
* every register named is declared (``_undeclared``: a ``.reg`` of the
  function or a ``.func``'s register parameter) or a special register;
* the operands themselves (``_operands``): the count (``_forms.ARITY``),
  ld/st/ldu's state space, vector width and type (``_forms.LDST``), the
  guard a predicate, an address register an integer or bit one, immediate
  ranges and barrier counts; and the module's ``.version`` against its
  ``.target`` (``_forms.MINVER``) and positive entry directives;
* mbarrier: its spellings are rows of the table like any opcode's (every
  operation with each state space, ordering, scope and
  ``.noComplete``/``.expect_tx``/``.parity``), its operands typed (32-bit
  integer counts and parities, 64-bit integer states, a predicate
  waitComplete), a literal arrival count positive and a literal parity 0 or
  1, an arrive on a ``.shared::cluster`` object writes the sink ``_``, and a qualifier newer than the module's ``.version`` is refused
  (``_mbarrier_version``: ``.relaxed`` 8.6, the others 8.0).  The
  tables come from ptxas (``sim/tools/ptx_forms/gen.py``), whose probe rows
  ``sim/tests/ptx/test_ptx_check.py`` also checks every rule against.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._ast import Addr, Decl, FImm, Function, Imm, Instr, PtxModule, Reg, Sym, Vec
from ._errors import PtxError
from ._forms import ARITY, BASEARITY, LDST, LEGAL, MINVER, MODS, MODSET
from ._info import indirect_call
from ._types import CTYPE

__all__ = ["check", "problems", "form_key", "ldst_key"]

_TYPES = set(CTYPE)
_SIZE = {"pred": 0, "b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2,
         "bf16": 2, "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4,
         "b64": 8, "u64": 8, "s64": 8, "f64": 8, "s16x2": 4, "u16x2": 4, "e4m3x2": 2,
         "e5m2x2": 2, "b128": 16}
#: Register types PTX declares (ptxas refuses ``.reg .bf16``, ``.reg .bf16x2``, the
#: packed integer and fp8 types).
REG_TYPES = set(_SIZE) - {"bf16", "bf16x2", "s16x2", "u16x2", "e4m3x2", "e5m2x2"}


def form_key(it: Instr) -> str:
    """The spelling of ``it`` the table lists: opcode, sorted modifiers, then its types."""
    mods = sorted(m for m in it.mods if m not in _TYPES)
    types = [m for m in it.mods if m in _TYPES]
    return ".".join([it.base, *mods]) + "|" + ".".join(types)


def _compatible(want: str, have: str, relaxed: bool) -> bool:
    """Whether a register of type ``have`` may be an operand of type ``want``."""
    if want == "pred~":  # vote's predicate operands: ptxas takes an .f16x2 register too
        return have in ("pred", "f16x2")
    if want == "pred" or have == "pred":
        return want == have
    fixed = want.startswith("=")  # an operand type the instruction's type does not set
    want = want.lstrip("=")
    if have == "f16x2":
        if fixed or want in ("f16", "f32", "f64", "bf16", "bf16x2"):
            return False
        have = "b32"  # an f16x2 register is a b32 one to integer and bit-size types
    if relaxed and have[0] == "b" and _SIZE[have] >= _SIZE[want]:
        return True  # cvt: a wider bit-size register holds any type
    kw, kh = want[0], have[0]
    if relaxed and kw == "b" and not fixed and _SIZE[have] >= _SIZE[want]:
        return True  # ld/st of a bit-size type: any register at least as wide, floats too
    if want == "f16x2":
        return have in ("b32", "f16x2")
    if want == "bf16x2":
        return have == "b32"
    if want == "bf16":
        return have == "b16"
    if relaxed and kw in "bsu" and kh in "bsu" and _SIZE[have] >= _SIZE[want]:
        return True
    if _SIZE[have] != _SIZE[want]:
        return False
    if kw == "b":
        return True
    if kw == "f":
        return kh == "b" or have == want
    return kh in "bsu"


def _wide(t: str) -> str:
    return t[0] + str(2 * int(t[1:])) if t[1:].isdigit() else t


def _roles(it: Instr) -> Sequence[str | None]:
    """The type each operand of ``it`` has (None: not checked; ``=``: fixed, not the instruction's)."""
    types = [m for m in it.mods if m in _TYPES]
    if not types:
        return []
    t = types[-1]
    b = it.base
    n = len(it.args)
    if b == "cvt":
        d = types[0]
        return [d] + [types[-1]] * (n - 1)
    if b in ("ld", "ldu"):  # a register at least as wide as the type (ints), "b" for floats
        return [t, None]
    if b == "st":
        return [None, t]
    if b == "set":
        return [types[0], t, t, "pred"]
    if b == "setp":
        return ["pred", t, t, "pred"]
    if b == "selp":
        return [t, t, t, "pred"]
    if b == "testp":
        return ["pred", t]
    if b in ("popc", "clz", "bfind"):
        return ["=u32", t]
    if b in ("shl", "shr"):
        return [t, t, "=u32"]
    if b == "bfe":
        return [t, t, "=u32", "=u32"]
    if b == "bfi":
        return [t, t, t, "=u32", "=u32"]
    if b == "lop3":  # lop3{.BoolOp}.b32 d{|p}, a, b, c, immLut{, q}
        return ["b32", "b32", "b32", "b32", None, "pred"]
    if b in ("prmt", "shf"):
        return ["b32"] * n
    if "wide" in it.mods and b in ("mul", "mad"):
        return [_wide(t), t, t, _wide(t)]
    if b in ("mov", "add", "sub", "mul", "mad", "fma", "div", "rem", "min", "max", "abs",
             "neg", "and", "or", "xor", "not", "cnot", "brev", "copysign", "sqrt", "rcp",
             "rsqrt", "ex2", "lg2", "sin", "cos", "tanh", "addc", "subc", "madc", "cvta", "sad"):
        return [t] * n
    # the warp collectives: a member mask (and match's result) is an integer or bit register
    if b == "shfl":  # shfl.sync.mode.b32 d[|p], a, b, c, membermask
        return [t, t, "b32", "b32", "=u32"]
    if b == "vote":  # vote.sync.mode.pred d, {!}a, membermask (.ballot: a .b32 d); ptxas
        # also takes an .f16x2 register for .pred ones of .all/.any/.uni ("pred~")
        return (["pred~", "pred~", "=u32"] if t == "pred" else [t, "pred", "=u32"])
    if b == "match":  # match.mode.sync.type d[|p], a, membermask
        return ["=u32", t, "=u32"]
    if b == "redux":  # redux.sync.op.type d, a, membermask: integer registers only
        return ["=u" + t[1:], "=u" + t[1:], "=u32"]
    if b == "mbarrier":  # .b64 is the object's size: counts and parities are 32-bit integers,
        op = it.mods[0] if it.mods else ""  # states 64-bit ones, waitComplete a predicate
        if op in ("init", "expect_tx", "complete_tx"):
            return [None, "=u32"]
        if op in ("arrive", "arrive_drop"):
            return ["=u64", None, "=u32"]
        if op in ("test_wait", "try_wait"):
            return ["pred", None, "=u32" if "parity" in it.mods else "=u64", "=u32"]
        if op == "pending_count":
            return ["=u32", "=u64"]
    return []


def _reg_types(fn: Function) -> dict[str, str | None]:
    """Register name -> declared type (None where scopes declare it with two types)."""
    out: dict[str, str | None] = {}
    for d in fn.body or []:
        if isinstance(d, Decl) and d.space == "reg":
            for n in ([f"{d.name}{i}" for i in range(d.count)] if d.count else [d.name]):
                out[n] = d.type if out.get(n, d.type) == d.type else None
    return out


_LDST_SPACES = ("global", "shared", "local", "const", "param")
_LDST_TYPES = {"b8", "u8", "s8", "b16", "u16", "s16", "f16", "b32", "u32", "s32", "f32", "b64",
               "u64", "s64", "f64", "pred", "b128", "f16x2", "bf16"}
#: Immediate operands ptxas bounds: (opcode, operand index) -> (low, high).
_IMM_RANGE = {("bfe", 2): (0, 255), ("bfe", 3): (0, 255), ("bfi", 3): (0, 255),
              ("bfi", 4): (0, 255), ("bar", 0): (0, 15),
              ("barrier", 0): (0, 15)}


def ldst_key(it: Instr) -> str | None:
    """``base.space.vN.type`` of an ld/st/ldu (``generic`` without a space; cache and order
    modifiers dropped), the key of ``_forms.LDST``; None for another opcode."""
    if it.base not in ("ld", "st", "ldu"):
        return None
    space = next((m for m in it.mods if m in _LDST_SPACES), "generic")
    vec = next((m for m in it.mods if m in ("v2", "v4", "v8")), "v1")
    types = [m for m in it.mods if m in _LDST_TYPES]
    if len(types) != 1 or vec == "v8":
        return None
    return f"{it.base}.{space}.{vec}.{types[0]}"


_SCOPES = frozenset({"cta", "gpu", "sys", "cluster"})
_ORDERS = frozenset({"relaxed", "acquire", "release"})
_CACHE = frozenset({"ca", "cg", "cs", "lu", "cv", "wb", "wt"})


def _memory_order(it: Instr) -> str | None:
    """ld/st's memory-order qualifiers as ptxas combines them (each modifier once;
    ``.weak``, ``.volatile`` or ``.relaxed``/``.acquire``/``.release`` with one scope, the
    last not with a cache operator or ``.nc``; a scope only with one of those; one cache
    operator; ``.nc`` in ``.global`` only): ``sim/tests/ptx/test_ptx_check.py`` checks
    these rules against ptxas's verdicts on the probes of ``sim/tools/ptx_forms/gen.py``."""
    if len(set(it.mods)) != len(it.mods):
        return f"{it.opcode}: a modifier given twice"
    mods = set(it.mods)
    orders, scopes = mods & _ORDERS, mods & _SCOPES
    if "nc" in mods and "global" not in mods:
        return f"{it.opcode}: .nc needs the .global state space"
    if orders and (mods & (_CACHE | {"nc"})):
        return f"{it.opcode}: .{min(orders)} cannot be combined with a cache operator or .nc"
    sem = len(orders) + ("volatile" in mods) + ("weak" in mods)
    if sem > 1:
        return f"{it.opcode}: more than one of .weak, .volatile, .relaxed, .acquire, .release"
    if orders and len(scopes) != 1:
        return f"{it.opcode}: .{min(orders)} needs one scope (.cta, .cluster, .gpu, .sys)"
    if scopes and not orders:
        return f"{it.opcode}: a scope without .relaxed, .acquire or .release"
    if len(mods & _CACHE) > 1:
        return f"{it.opcode}: more than one cache operator"
    return None


_GENERIC = frozenset({"global", "shared", "local"})  # what a generic address may name


def _symbol_space(it: Instr, syms: dict[str, str]) -> str | None:
    """ld/st/ldu of a variable's address in another state space than the variable's (a
    generic one names only .global, .shared or .local variables); st to an entry's
    parameter, which is read-only."""
    if it.base not in ("ld", "st", "ldu"):
        return None
    for a in it.args:
        if isinstance(a, Addr) and isinstance(a.base, Sym) and a.base.name in syms:
            have = syms[a.base.name]
            spaces = [m.split("::")[0] for m in it.mods if m.split("::")[0] in _LDST_SPACES]
            want = spaces[0] if spaces else ""
            if want != have.removeprefix("entry ") and not (want == "" and have in _GENERIC):
                return (f"{it.opcode}: {a.base.name} is a .{have.removeprefix('entry ')} "
                        f"variable, not in the instruction's {'.' + want if want else 'generic'} "
                        "state space (state space mismatch)")
            if it.base == "st" and have == "entry param":
                return f"{it.opcode}: {a.base.name} is a kernel parameter, which is read-only"
    return None


def _registers_of(it: Instr) -> list[Reg]:
    """The registers ``it`` names: operands, vector and pair items, address bases."""
    out: list[Reg] = []
    for a in it.args:
        items = a.items if isinstance(a, Vec) else (a.base if isinstance(a, Addr) else a,)
        out += [x for x in items if isinstance(x, Reg)]
    return out


#: The PTX ISA's special registers (``%tid.x`` is ``%tid``'s component).
_SPECIAL = re.compile(
    r"%(tid|ntid|laneid|warpid|nwarpid|ctaid|nctaid|smid|nsmid|gridid|is_explicit_cluster|"
    r"clusterid|nclusterid|cluster_ctaid|cluster_nctaid|cluster_ctarank|cluster_nctarank|"
    r"lanemask_(eq|le|lt|ge|gt)|clock|clock_hi|clock64|pm[0-7](_64)?|envreg([0-9]|[12][0-9]|3[01])|"
    r"globaltimer(_lo|_hi)?|reserved_smem_offset_(begin|end|cap|[01])|total_smem_size|"
    r"aggr_smem_size|dynamic_smem_size|current_graph_exec)")


def _undeclared(it: Instr, regs: dict[str, str | None], families: dict[str, int],
                syms: dict[str, str]) -> str | None:
    """A register no ``.reg`` of the function declares and no special register: ptxas
    refuses it (``%p3`` of ``.reg .pred %p<3>``, ``%p1`` where no ``%p`` is declared)."""
    for r in _registers_of(it):
        if r.name in regs or r.name in syms or _SPECIAL.fullmatch(r.name.split(".")[0]):
            continue
        stem = r.name.rstrip("0123456789")
        if stem in families:
            return (f"{it.opcode}: register {r.name} is not declared (.reg {stem}<"
                    f"{families[stem]}> declares {stem}0..{stem}{families[stem] - 1})")
        return f"{it.opcode}: register {r.name} is not declared"
    return None


def _operands(it: Instr, regs: dict[str, str | None], syms: dict[str, str] | None = None) -> str | None:
    """Operand rules of ptxas beyond the types: guard, count, ld/st, addresses, immediates."""
    if it.pred is not None and it.pred.name not in regs:
        return f"{it.opcode}: the guard {it.pred.name} is not a declared register"
    if it.pred is not None and regs.get(it.pred.name, "pred") != "pred":
        return (f"{it.opcode}: the guard {it.pred.name} is a .{regs[it.pred.name]} register, "
                "not a predicate (predicate expression expected)")
    counts = ARITY.get(form_key(it))
    if counts is not None and len(it.args) not in counts:
        return (f"{it.opcode}: {len(it.args)} operands; ptxas takes "
                f"{' or '.join(str(n) for n in sorted(counts))} (arguments mismatch)")
    taken = MODS.get(it.base)
    if taken is not None:
        bad = [m for m in it.mods if m in MODSET and m not in taken]
        if bad:
            return (f"{it.opcode}: modifier .{bad[0]}, which {it.base} does not take (illegal "
                    "modifier)")
        why = _memory_order(it)
        if why is not None:
            return why
        counts = BASEARITY.get(it.base)
        if counts is not None and not any("::" in m for m in it.mods) and len(it.args) not in counts:
            return (f"{it.opcode}: {len(it.args)} operands; ptxas takes "
                    f"{' or '.join(str(n) for n in sorted(counts))} (arguments mismatch)")
    if (it.base == "mbarrier" and it.mods and it.mods[0] in ("arrive", "arrive_drop")
            and "shared::cluster" in it.mods and it.args and it.args[0] is not None):
        return (f"{it.opcode}: the state of an arrive on a .shared::cluster object is the sink "
                "'_' (Sink '_' is expected as a destination operand)")
    if it.base == "mbarrier" and it.mods and len(it.args) > 2 and isinstance(it.args[2], Imm):
        op, v = it.mods[0], it.args[2].value
        if op in ("arrive", "arrive_drop") and "expect_tx" not in it.mods and v <= 0:
            return f"{it.opcode}: an arrival count of {v} (a literal count must be positive)"
        if op in ("test_wait", "try_wait") and "parity" in it.mods and v not in (0, 1):
            return f"{it.opcode}: a phase parity of {v} (a literal parity is 0 or 1)"
    if it.base == "bra" and it.args and not isinstance(it.args[0], Sym):
        return f"{it.opcode}: a label expected as the target (a register target is brx.idx's)"
    why = _symbol_space(it, syms or {})
    if why is not None:
        return why
    k = ldst_key(it)
    if k is not None and LDST.get(k) is False:
        return (f"{it.opcode}: state space, vector width or type that {it.base} does not take "
                "(not a form a driver's PTX JIT accepts)")
    for a in it.args:  # an address operand's register is an integer or bit register
        if isinstance(a, Addr) and isinstance(a.base, Reg):
            rt = regs.get(a.base.name)
            if rt is not None and (rt in ("pred", "b128") or rt[0] == "f"):
                return (f"{it.opcode}: register {a.base.name} of type .{rt} as an address "
                        "(integer or bit registers only)")
    for (op, k2), (lo, hi) in _IMM_RANGE.items():
        if it.base == op and "warp" not in it.mods and k2 < len(it.args) and isinstance(it.args[k2], Imm):
            v = it.args[k2].value
            if not lo <= v <= hi:
                return (f"{it.opcode}: operand {k2 + 1} is {v}, out of the range "
                        f"[{lo}..{hi}] ptxas accepts")
    if (it.base in ("bar", "barrier") and len(it.args) > 1 and isinstance(it.args[1], Imm)
            and "red" not in it.mods and "warp" not in it.mods and it.args[1].value % 32):
        return (f"{it.opcode}: a thread count of {it.args[1].value}, not a multiple of the "
                "warp size (32)")
    return None


def _instr(it: Instr, regs: dict[str, str | None], syms: dict[str, str] | None = None) -> str | None:
    """Why ptxas refuses ``it`` (None: it does not)."""
    legal = LEGAL.get(it.base)
    if legal is not None and form_key(it) not in legal:
        return (f"{it.opcode}: a modifier, rounding mode or type that {it.base} does not take "
                "(not a form a driver's PTX JIT accepts)")
    why = _operands(it, regs, syms)
    if why is not None:
        return why
    if (it.base == "setp" and it.args and isinstance(it.args[0], Vec)
            and ("f16" in it.mods or "bf16" in it.mods)):
        return f"{it.opcode}: a predicate pair output is for .f16x2/.bf16x2, not a scalar type"
    relaxed = (it.base == "cvt" and "bf16x2" not in it.mods) or it.base in ("ld", "ldu", "st")
    for k, (role, a) in enumerate(zip(_roles(it), it.args, strict=False)):
        if role is None:
            continue
        want = role.lstrip("=").rstrip("~")
        if isinstance(a, Reg):
            have = regs.get(a.name)
            if have is not None and not _compatible(role, have, relaxed):
                return (f"{it.opcode}: operand {k + 1} is register {a.name} of type .{have}, "
                        f"which does not match the operand's type .{want} (arguments mismatch)")
        elif isinstance(a, Imm) and want[0] == "f":
            return (f"{it.opcode}: operand {k + 1} is the integer literal {a.value}, not a "
                    f"floating-point literal of .{want}")
        elif isinstance(a, (Imm, FImm)) and want in ("f16", "bf16", "f16x2", "bf16x2"):
            return f"{it.opcode}: operand {k + 1}: a literal is not a .{want} operand"
        elif isinstance(a, FImm) and (want == "pred" or want[0] in "su"):
            return f"{it.opcode}: operand {k + 1}: a floating-point literal is not a .{want} operand"
        elif isinstance(a, FImm) and want[0] == "b" and a.width != 8 * _SIZE[want]:
            return (f"{it.opcode}: operand {k + 1}: a {a.width}-bit floating-point literal is "
                    f"not a .{want} operand")
    return None


#: mbarrier's qualifiers newer than the oldest .version of sm_90 (7.8): ptxas's verdicts on
#: every accepted spelling of the table at .version 7.8, 8.0, 8.5 and 8.6.
_MB_V80 = frozenset({"expect_tx", "complete_tx", "release", "acquire", "relaxed", "cta", "cluster",
                     "shared::cluster"})


def _mbarrier_version(it: Instr, version: tuple[int, int]) -> str | None:
    """An mbarrier qualifier the module's ``.version`` does not have yet (``.relaxed``: 8.6,
    but 8.0 on expect_tx/complete_tx; the orderings, scopes, tx-counts, ``.shared::cluster``:
    8.0)."""
    if it.base != "mbarrier" or not it.mods:
        return None
    mods = set(it.mods)
    need = None
    if "relaxed" in mods and it.mods[0] not in ("expect_tx", "complete_tx"):
        need, what = (8, 6), "relaxed"
    elif mods & _MB_V80:
        need, what = (8, 0), min(mods & _MB_V80)
    if need is None or version >= need:
        return None
    return (f"{it.opcode}: .{what} needs PTX ISA .version {need[0]}.{need[1]} or newer (the "
            f"module's is {version[0]}.{version[1]})")


#: .b128 (PTX ISA 8.3): the oldest .version of the type, of a .b128 access with scope .sys
#: (8.4), the oldest target of its atomics, and those atomics' operations and state spaces --
#: ptxas 13.0's verdicts (sim/tests/ptx/test_ptx_b128.py names each).
_B128_VERSION, _B128_SYS_VERSION, _B128_ATOM_SM = (8, 3), (8, 4), 90
_B128_ATOM_OPS = frozenset({"cas", "exch"})
_B128_ATOM_SPACES = frozenset({"global", "shared", "shared::cta", "shared::cluster"})


def _sm(target: str) -> int:
    """The number of ``sm_90a`` (0 for a target that names none)."""
    digits = re.match(r"sm_(\d+)", target)
    return int(digits.group(1)) if digits else 0


def _b128(it: Instr, regs: dict[str, str | None], m: PtxModule) -> str | None:
    """Why ptxas refuses ``it`` for its .b128 type or registers (None: it does not): the type
    before .version 8.3, with .sys before 8.4; an atomic other than atom.cas/atom.exch, in
    another state space, as a vector, before sm_90, or with operands that are not .b128
    registers (exch's value may be a literal); a .b128 register as a value of an atomic or
    red of another type (instructions with typed operands refuse it by size)."""
    b128 = "b128" in it.mods
    if b128 and m.version < _B128_VERSION:
        return (f"{it.opcode}: type .b128 needs PTX ISA .version 8.3 or newer (the module's is "
                f"{m.version[0]}.{m.version[1]})")
    if b128 and "sys" in it.mods and m.version < _B128_SYS_VERSION:
        return (f"{it.opcode}: .b128 with .sys needs PTX ISA .version 8.4 or newer (the "
                f"module's is {m.version[0]}.{m.version[1]})")
    if it.base == "mov":
        return _b128_mov(it, regs)
    if b128 and it.base in ("ld", "st", "ldu") and not any(x in ("v2", "v4") for x in it.mods):
        if any(isinstance(a, Vec) for a in it.args):
            return f"{it.opcode}: a vector operand of a scalar .b128 access (vector size mismatch)"
    if it.base not in ("atom", "red"):
        return None
    values = [it.args[0], *it.args[2:]] if it.base == "atom" else it.args[1:]
    if not b128:
        for a in values:
            if isinstance(a, Reg) and regs.get(a.name) == "b128":
                return (f"{it.opcode}: register {a.name} is a .b128 one, which the operand's "
                        "type does not take (arguments mismatch)")
        return None
    op = next((x for x in it.mods if x in _ATOM_OPS_ALL), None)
    if it.base == "red" or op not in _B128_ATOM_OPS:
        return f"{it.opcode}: .b128 atomics are atom.cas and atom.exch only"
    spaces = [x for x in it.mods if x.split("::")[0] in _LDST_SPACES]
    if spaces and spaces[0] not in _B128_ATOM_SPACES:
        return f"{it.opcode}: atom.b128 in .{spaces[0]} (global, shared or generic only)"
    if any(x in ("v2", "v4", "v8") for x in it.mods):
        return f"{it.opcode}: a vector atom of .b128"
    if _sm(m.target) < _B128_ATOM_SM:
        return f"{it.opcode}: atom.{op}.b128 needs .target sm_90 or newer (the module's is {m.target})"
    for k, a in enumerate(it.args):
        if k == 1:
            continue  # the address
        if isinstance(a, Reg) and regs.get(a.name, "b128") != "b128":
            return (f"{it.opcode}: operand {k + 1} is register {a.name} of type "
                    f".{regs[a.name]}, not .b128 (arguments mismatch)")
        if not isinstance(a, Reg) and not (k >= 2 and isinstance(a, Imm)):
            return f"{it.opcode}: operand {k + 1} is not a .b128 register or a literal"
    return None


def _b128_mov(it: Instr, regs: dict[str, str | None]) -> str | None:
    """mov and .b128 vectors: mov.b128 packs and unpacks two 64-bit or four 32-bit registers
    (an unpack may discard an element into the sink ``_``, a pack may not read one); a .b128
    register is no element of another type's vector."""
    for k, a in enumerate(it.args):
        if not isinstance(a, Vec):
            continue
        if k > 0 and None in a.items and "b128" in it.mods:
            return f"{it.opcode}: the sink '_' as a source of a pack (sink not allowed as a source)"
        sizes = [_SIZE.get(regs.get(x.name) or "", 0) if isinstance(x, Reg)
                 else (16 // len(a.items) if x is None else 0) for x in a.items]
        if "b128" not in it.mods:
            if any(isinstance(x, Reg) and regs.get(x.name) == "b128" for x in a.items):
                return (f"{it.opcode}: a .b128 register as an element of a vector "
                        "(arguments mismatch)")
            continue
        n = len(a.items)
        if n not in (2, 4) or any(z not in (0, 16 // n) for z in sizes) or not all(sizes):
            return (f"{it.opcode}: mov.b128 packs or unpacks two 64-bit or four 32-bit "
                    f"registers, not {{{', '.join(str(getattr(x, 'name', x)) for x in a.items)}}}")
    return None


_ATOM_OPS_ALL = frozenset({"add", "and", "or", "xor", "exch", "cas", "inc", "dec", "min", "max"})


def _types_version(m: PtxModule) -> list[tuple[int, str]]:
    """Declarations of type .b128 (registers, scalar variables, parameters) in a module older
    than PTX ISA 8.3.  (ptxas 13.0 takes an array of .b128 there -- ``.global .b128 g[2]``,
    ``.local .b128 l[2]`` -- and refuses a scalar one: so does this.)"""
    if m.version >= _B128_VERSION:
        return []
    why = (f"type .b128 needs PTX ISA .version 8.3 or newer (the module's is "
           f"{m.version[0]}.{m.version[1]})")
    out = [(g.line, f"{g.name}: {why}") for g in m.globals.values()
           if g.type == "b128" and not g.array]
    for fn in m.functions.values():
        out += [(fn.line, f"parameter {p.name} of {fn.name}: {why}")
                for p in fn.params + fn.rets if p.type == "b128"]
        out += [(d.line, f"{d.name}: {why}") for d in fn.body or []
                if isinstance(d, Decl) and d.type == "b128" and not d.dims]
    return out


def _indirect(it: Instr, fn: Function, m: PtxModule, psizes: dict[str, int]) -> str | None:
    """Why ptxas refuses an indirect ``call`` (None: it does not): a prototype label that is no
    ``.callprototype``/``.calltargets`` of the function, or results and arguments that are not
    the prototype's in number and size (``.calltargets``: the first target's signature)."""
    if not indirect_call(it):
        return None
    args = list(it.args)
    rets = list(args.pop(0).items) if isinstance(args[0], Vec) and args[0].kind == "list" else []
    args.pop(0)
    params = list(args.pop(0).items) if args and isinstance(args[0], Vec) else []
    if len(args) != 1 or not isinstance(args[0], Sym):
        return "an indirect call names no .callprototype or .calltargets"
    label = args[0].name
    if label in fn.protos:
        prets, pparams, _line = fn.protos[label]
    elif label in fn.calltargets:
        for n in fn.calltargets[label][0]:
            if n not in m.functions or m.functions[n].kind != "func":
                return f".calltargets {label} names {n}, which is no .func"
        sigs = {(tuple(p.size for p in m.functions[n].rets),
                 tuple(p.size for p in m.functions[n].params)) for n in fn.calltargets[label][0]}
        if len(sigs) > 1:
            return f".calltargets {label} lists functions of different signatures"
        first = m.functions[fn.calltargets[label][0][0]]
        prets, pparams = first.rets, first.params
    else:
        return f"indirect call: {label} is no .callprototype or .calltargets of {fn.name}"
    if len(rets) != len(prets) or len(params) != len(pparams):
        return (f"indirect call with {len(rets)} results and {len(params)} arguments; its "
                f"prototype {label} has {len(prets)} and {len(pparams)}")
    for a, p in zip(rets + params, prets + pparams, strict=True):
        if isinstance(a, Sym) and a.name in psizes and psizes[a.name] != p.size:
            return (f"indirect call: {a.name} of {psizes[a.name]} bytes where {label} has a "
                    f"{p.size}-byte .param")
    return None


def problems(m: PtxModule) -> list[tuple[int, str]]:
    """Every ``(PTX line, reason)`` a driver's JIT refuses in module ``m``."""
    out: list[tuple[int, str]] = _types_version(m)
    least = MINVER.get(m.target)
    if least is not None and m.version < least:
        out.append((1, f".version {m.version[0]}.{m.version[1]} does not support .target "
                       f"{m.target} (it needs {least[0]}.{least[1]} or newer)"))
    for fn in m.functions.values():
        for d, vals in fn.perf.items():
            if d in ("maxntid", "reqntid", "minnctapersm", "maxnreg") and any(v <= 0 for v in vals):
                out.append((fn.line, f".{d} {', '.join(map(str, vals))} of {fn.name}: ptxas "
                                     "expects positive non-zero values"))
        regs = _reg_types(fn)
        for p in fn.params + fn.rets:  # a .func's .reg parameters are registers too
            regs.setdefault(p.name, None)
        families: dict[str, int] = {}
        for d in fn.body or []:
            if isinstance(d, Decl) and d.space == "reg" and d.count:
                families[d.name] = max(families.get(d.name, 0), d.count)
        syms = {g.name: g.space for g in m.globals.values()}
        syms.update((p.name, "entry param" if fn.kind == "entry" else "param") for p in fn.params)
        syms.update((d.name, d.space) for d in fn.body or []
                    if isinstance(d, Decl) and d.space in ("local", "shared", "param"))
        psizes = {d.name: d.size for d in fn.body or [] if isinstance(d, Decl) and d.space == "param"}
        for it in fn.body or []:
            if isinstance(it, Decl) and it.space == "reg" and it.type not in REG_TYPES:
                out.append((it.line, f"register {it.name} of type .{it.type}: PTX declares no "
                                     "such register"))
            elif isinstance(it, Instr):
                why = (_undeclared(it, regs, families, syms) or _b128(it, regs, m)
                       or _instr(it, regs, syms) or _mbarrier_version(it, m.version)
                       or _indirect(it, fn, m, psizes))
                if why is not None:
                    out.append((it.line, why))
    return out


def check(m: PtxModule) -> None:
    """Raise :class:`PtxError` (218) for the first thing in ``m`` a driver's JIT refuses."""
    found = problems(m)
    if found:
        line, why = min(found)
        raise PtxError(218, f"PTX line {line}: {why}", line)
