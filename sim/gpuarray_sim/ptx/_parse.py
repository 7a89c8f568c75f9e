"""PTX statements to a module: the syntax layer of the PTX executor.

One concern: read the statements of ``_lex.py`` into a :class:`PtxModule`
-- directives, module variables with their initial bytes, functions with
their parameters, declarations and instructions (each with its PTX line).
It checks syntax and declarations (218), the ISA version (222), and
answers the module facts a driver reports (``EntryInfo``); which
instructions can *execute* is the translator's question (``_context.py``).
"""

from __future__ import annotations

import struct

from .._codes import INVALID_PTX, UNSUPPORTED_PTX_VERSION
from ._ast import (
    HEAP_BYTES,
    HEAP_VAR,
    TYPE_SIZES,
    Addr,
    Decl,
    FImm,
    Function,
    GlobalVar,
    Imm,
    Instr,
    Param,
    PtxModule,
    Reg,
    Sym,
    Vec,
)
from ._errors import PtxError
from ._info import entry_info
from ._lex import Statement, statements, tokens

__all__ = ["parse", "SUPPORTED_VERSION"]

#: The newest ``.version`` the executor reads (CUDA 13.5's NVRTC writes 9.5).
SUPPORTED_VERSION = (9, 5)



# ------------------------------------------------------------------- parser
def _err(line: int, msg: str) -> PtxError:
    return PtxError(INVALID_PTX, f"PTX line {line}: {msg}", line)


def _int(text: str, line: int) -> int:
    t = text.rstrip("U")
    try:
        if t[:2] in ("0x", "0X"):
            return int(t, 16)
        if len(t) > 1 and t[0] == "0" and t.isdigit():
            return int(t, 8)
        return int(t)
    except ValueError:
        raise _err(line, f"{text!r} is not an integer") from None


def _number(words: list[str], i: int, line: int) -> tuple[Imm | FImm, int]:
    """A literal at ``words[i]`` (with a leading ``-``); the index after it."""
    neg = words[i] == "-"
    if neg:
        i += 1
    if i >= len(words):
        raise _err(line, "a number is missing")
    w = words[i]
    if w[:2] in ("0f", "0F"):
        f32 = FImm(int(w[2:], 16), 32)
        v: Imm | FImm = FImm(f32.bits ^ 0x80000000, 32) if neg else f32
    elif w[:2] in ("0d", "0D"):
        f64 = FImm(int(w[2:], 16), 64)
        v = FImm(f64.bits ^ (1 << 63), 64) if neg else f64
    elif any(c in w for c in ".eE") and w[:2] not in ("0x", "0X"):
        f = -float(w) if neg else float(w)
        v = FImm(int.from_bytes(struct.pack("<d", f), "little"), 64)
    else:
        n = _int(w, line)
        v = Imm(-n if neg else n)
    return v, i + 1


def _is_num(w: str) -> bool:
    return w[:1].isdigit()


class _Args:
    """A cursor over one statement's words."""

    def __init__(self, st: Statement) -> None:
        self.w = st.words
        self.i = 0
        self.line = st.line

    def peek(self, k: int = 0) -> str | None:
        j = self.i + k
        return self.w[j] if j < len(self.w) else None

    def take(self, expect: str | None = None) -> str:
        if self.i >= len(self.w):
            raise _err(self.line, f"unexpected end of statement {' '.join(self.w)!r}"
                                  + (f" (expected {expect!r})" if expect else ""))
        w = self.w[self.i]
        if expect is not None and w != expect:
            raise _err(self.line, f"expected {expect!r}, found {w!r} in {' '.join(self.w)!r}")
        self.i += 1
        return w

    def done(self) -> bool:
        return self.i >= len(self.w)

    def dot(self) -> bool:
        """Whether the next word is a directive or qualifier (``.name``)."""
        w = self.peek()
        return w is not None and w.startswith(".")

    # operands
    def operand(self):
        w = self.peek()
        if w is None:
            raise _err(self.line, f"an operand is missing in {' '.join(self.w)!r}")
        if w == "[":
            return self.address()
        if w == "{":
            self.take()
            items = []
            while self.peek() != "}":
                items.append(self.operand())
                if self.peek() == ",":
                    self.take()
            self.take("}")
            return Vec(tuple(items))
        if w == "(":
            self.take()
            items = []
            while self.peek() != ")":
                items.append(self.operand())
                if self.peek() == ",":
                    self.take()
            self.take(")")
            return Vec(tuple(items), "list")
        if w == "!":
            self.take()
            return Reg(self.take(), True)
        if w == "-" or _is_num(w):
            v, self.i = _number(self.w, self.i, self.line)
            return v
        self.take()
        v0: Reg | Sym | None
        if w == "_":
            v0 = None
        elif w.startswith("%"):
            v0 = Reg(w)
        else:
            off = 0
            if self.peek() in ("+", "-") and self.peek(1) is not None and _is_num(self.peek(1) or ""):
                sign = -1 if self.take() == "-" else 1
                off = sign * _int(self.take(), self.line)
            v0 = Sym(w, off)
        if self.peek() == "|":
            self.take()
            return Vec((v0, self.operand()), "pair")
        return v0

    def address(self) -> Addr:
        self.take("[")
        base: Reg | Sym | None = None
        off = 0
        w = self.peek()
        if w is not None and not _is_num(w) and w != "-":
            self.take()
            base = Reg(w) if w.startswith("%") else Sym(w)
        if self.peek() == ",":  # [tex, {coords}]: texture and surface operands
            items: list = [base]
            while self.peek() == ",":
                self.take()
                items.append(self.operand())
            self.take("]")
            return Vec(tuple(items), "addr")  # type: ignore[return-value]
        while self.peek() != "]":
            sign = 1
            if self.peek() in ("+", "-"):
                sign = -1 if self.take() == "-" else 1
            v, self.i = _number(self.w, self.i, self.line)
            if not isinstance(v, Imm):
                raise _err(self.line, "a non-integer address offset")
            off += sign * v.value
        self.take("]")
        return Addr(base, off)


_SPACES = ("global", "const", "shared", "local", "param", "reg", "tex")


def _decl(st: Statement, words: list[str], extern: bool = False) -> Decl:
    """``.space [.align N] [.vN] .type name[<n>|[d]...] [= init]``."""
    a = _Args(Statement("stmt", [], st.line))
    a.w = words
    space = a.take()[1:]
    align, vector = 0, 1
    typ = ""
    while a.dot():
        w = a.take()
        if w == ".align":
            align = _int(a.take(), st.line)
        elif w in (".v2", ".v4", ".v8"):
            vector = int(w[2:])
        elif w[1:] in TYPE_SIZES:
            typ = w[1:]
        elif w in (".ptr", ".global", ".shared", ".const", ".local", ".attribute", ".managed",
                   ".unified"):
            continue
        else:
            raise _err(st.line, f"unknown qualifier {w!r} in a .{space} declaration")
    if not typ:
        raise _err(st.line, f"a .{space} declaration without a type: {' '.join(words)!r}")
    name = a.take()
    d = Decl(st.line, space, typ, name, align=align, vector=vector, extern=extern)
    if a.peek() == "<":
        a.take()
        d.count = _int(a.take(), st.line)
        a.take(">")
    dims: list[int | None] = []
    while a.peek() == "[":
        a.take()
        if a.peek() == "]":
            dims.append(None)
        else:
            dims.append(_int(a.take(), st.line))
        a.take("]")
    d.dims = tuple(dims)
    if a.peek() == "=":
        a.take()
        d.init = words[a.i:]  # type: ignore[assignment]  # raw words; _initial() reads them
        a.i = len(words)
    if not a.done():
        while a.peek() == ",":  # .reg .b32 %a, %b;
            a.take()
            a.take()
        if not a.done():
            raise _err(st.line, f"unexpected {a.peek()!r} in {' '.join(words)!r}")
    return d


def _multi_names(words: list[str]) -> list[str]:
    """Extra names of ``.reg .b32 %a, %b, %c;`` (the first is the declaration's own)."""
    out = []
    for i, w in enumerate(words):
        if w == "," and i + 1 < len(words):
            out.append(words[i + 1])
    return out


def _initial(d: Decl, line: int) -> tuple[bytes, list[tuple[int, str, int]]]:
    """Initial bytes (and address relocations) of a module variable."""
    size = d.size
    raw: list = d.init if isinstance(d.init, list) else []
    out = bytearray(size)
    relocs: list[tuple[int, str, int]] = []
    if not raw:
        return bytes(out), relocs
    esize = TYPE_SIZES[d.type]
    kind = d.type[0]
    vals: list = []
    i = 0
    while i < len(raw):
        w = raw[i]
        if w in ("{", "}", ","):
            i += 1
            continue
        if w in ("generic", "global") and i + 1 < len(raw) and raw[i + 1] == "(":
            name = raw[i + 2]
            j = i + 3
            add = 0
            if raw[j] == "+":
                add = _int(raw[j + 1], line)
                j += 2
            vals.append(("sym", name, add))
            i = j + 1
            continue
        if w == "-" or _is_num(w):
            v, i = _number(raw, i, line)
            vals.append(v)
            continue
        add = 0
        if i + 2 < len(raw) and raw[i + 1] == "+":
            add = _int(raw[i + 2], line)
            i += 2
        vals.append(("sym", w, add))
        i += 1
    if len(vals) * esize > max(size, esize):
        raise _err(line, f"{len(vals)} initial values for {d.name} of {size} bytes")
    for k, v in enumerate(vals):
        off = k * esize
        if isinstance(v, tuple):
            relocs.append((off, v[1], v[2]))
            continue
        if kind == "f":
            fv = v.value if isinstance(v, FImm) else float(v.value)
            b = struct.pack({2: "<e", 4: "<f", 8: "<d"}[esize], fv)
        else:
            if isinstance(v, FImm):
                iv = v.bits
            else:
                iv = v.value
            b = (iv % (1 << (8 * esize))).to_bytes(esize, "little")
        out[off:off + esize] = b
    return bytes(out), relocs


def _params(a: _Args, line: int) -> list[Param]:
    """``( .param .type name, .param .align 8 .b8 name[16], ... )``."""
    out: list[Param] = []
    a.take("(")
    while a.peek() != ")":
        w = a.take()
        if w == ",":
            continue
        if w not in (".param", ".reg"):
            raise _err(line, f"expected .param in a parameter list, found {w!r}")
        typ, align, ptr, count = "", 0, "", 1
        while a.dot():
            q = a.take()
            if q == ".align":
                align = _int(a.take(), line)
            elif q == ".ptr":
                ptr = "generic"
            elif q in (".global", ".shared", ".const", ".local"):
                ptr = q[1:]
            elif q[1:] in TYPE_SIZES:
                typ = q[1:]
            else:
                raise _err(line, f"unknown parameter qualifier {q!r}")
        name = a.take()
        while a.peek() == "[":
            a.take()
            count *= _int(a.take(), line)
            a.take("]")
        if not typ:
            raise _err(line, f"parameter {name} has no type")
        size = TYPE_SIZES[typ] * count
        out.append(Param(name, typ, size, align or TYPE_SIZES[typ], ptr))
    a.take(")")
    return out


_LINKAGE = (".visible", ".extern", ".weak", ".common")
_PERF = (".maxntid", ".reqntid", ".minnctapersm", ".maxnreg", ".maxnctapersm", ".noreturn",
         ".pragma", ".explicitcluster", ".reqnctapercluster", ".maxclusterrank", ".blocksareclusters")


def _header(st: Statement) -> Function:
    a = _Args(st)
    linkage = ""
    while a.peek() in _LINKAGE:
        linkage = a.take()[1:]
    kind = a.take()[1:]
    rets: list[Param] = []
    if a.peek() == "(":
        rets = _params(a, st.line)
    name = a.take()
    params = _params(a, st.line) if a.peek() == "(" else []
    fn = Function(name, kind, st.line, params, rets, linkage)
    while not a.done():
        d = a.take()
        if d not in _PERF:
            raise _err(st.line, f"unknown directive {d!r} in the header of {name}")
        vals = []
        while not a.done() and not a.dot():
            w = a.take()
            if w != ",":
                vals.append(_int(w, st.line) if _is_num(w) else 0)
        fn.perf[d[1:]] = tuple(vals)
    return fn


def _instr(st: Statement) -> Instr:
    a = _Args(st)
    pred = None
    if a.peek() == "@":
        a.take()
        neg = a.peek() == "!"
        if neg:
            a.take()
        pred = Reg(a.take(), neg)
    op = a.take()
    parts = op.split(".")
    args = []
    while not a.done():
        args.append(a.operand())
        if not a.done():
            a.take(",")
    return Instr(st.line, parts[0], tuple(p for p in parts[1:]), args, pred)


def _call_decl(st: Statement, body: list, fn: Function) -> None:
    """``label: .callprototype [(ret)] _ (params) [.noreturn];`` or ``label: .calltargets f, g;``:
    the label (just read into ``body``) names the declaration, not an instruction."""
    head = st.words[0]
    if not body or not isinstance(body[-1], tuple) or body[-1][0] != "label":
        raise _err(st.line, f"{head} without a label")
    label = body.pop()[1]
    if label in fn.protos or label in fn.calltargets:
        raise _err(st.line, f"{label} is declared twice")
    a = _Args(st)
    a.take()
    if head == ".calltargets":
        names = []
        while not a.done():
            w = a.take()
            if w != ",":
                names.append(w)
        if not names:
            raise _err(st.line, ".calltargets without a function")
        fn.calltargets[label] = (names, st.line)
        return
    rets = _params(a, st.line) if a.peek() == "(" else []
    a.take("_")
    params = _params(a, st.line) if a.peek() == "(" else []
    while not a.done():
        w = a.take()
        if w != ".noreturn":
            raise _err(st.line, f"unexpected {w!r} in a .callprototype")
    if len(rets) > 1:
        raise _err(st.line, ".callprototype with more than one return parameter")
    fn.protos[label] = (rets, params, st.line)


def _body(stmts: list[Statement], i: int, fn: Function) -> int:
    """Read the body starting after its ``{`` at ``stmts[i]``; the index after its ``}``."""
    body: list = []
    depth = 1
    i += 1
    while i < len(stmts):
        st = stmts[i]
        i += 1
        if st.kind == "{":
            depth += 1
            body.append(("{", st.line))
            continue
        if st.kind == "}":
            depth -= 1
            if depth == 0:
                fn.body = body
                return i
            body.append(("}", st.line))
            continue
        if st.kind == "label":
            body.append(("label", st.words[0], st.line))
            continue
        w = st.words
        head = w[0]
        if head in (".loc", ".pragma", ".file", ".maxnreg", ".dwarf"):
            continue
        if head.startswith((".reg.", ".local.", ".shared.", ".param.")):
            # `.reg.b16 h;` (cuda_fp16's inline assembly): ptxas reads the
            # qualifiers run together as written apart
            w = ["." + p for p in head[1:].split(".")] + w[1:]
            head = w[0]
        if head in (".reg", ".local", ".shared", ".param"):
            d = _decl(st, w)
            body.append(d)
            if head == ".reg":
                for extra in _multi_names(w):
                    body.append(Decl(st.line, "reg", d.type, extra, vector=d.vector))
            continue
        if head in (".callprototype", ".calltargets"):
            _call_decl(st, body, fn)
            continue
        if head.startswith("."):
            raise _err(st.line, f"unknown directive {head!r} in the body of {fn.name}")
        body.append(_instr(st))
    raise _err(fn.line, f"the body of {fn.name} is not closed")


def parse(text: str) -> PtxModule:
    """Parse PTX ``text`` into a :class:`PtxModule`.

    Raises
    ------
    PtxError
        ``code`` 218 (``CUDA_ERROR_INVALID_PTX``) for text that is not valid
        PTX, 222 (``CUDA_ERROR_UNSUPPORTED_PTX_VERSION``) for a ``.version``
        newer than :data:`SUPPORTED_VERSION`; the message names the line.
    """
    stmts = statements(tokens(text))
    version: tuple[int, int] | None = None
    target = ""
    address_size = 64
    functions: dict[str, Function] = {}
    gvars: dict[str, GlobalVar] = {}
    i = 0
    while i < len(stmts):
        st = stmts[i]
        if st.kind != "stmt":
            raise _err(st.line, f"unexpected {st.words[0]!r} at module scope")
        w = st.words
        i += 1
        head = w[0]
        if head == ".version":
            try:
                major, minor = (int(x) for x in w[1].split("."))
            except (IndexError, ValueError):
                raise _err(st.line, f"bad .version {' '.join(w[1:])!r}") from None
            version = max(version or (0, 0), (major, minor))  # linked modules: the newest
            if version > SUPPORTED_VERSION:
                raise PtxError(UNSUPPORTED_PTX_VERSION,
                               f"PTX line {st.line}: .version {major}.{minor} is newer than the "
                               f"simulator's PTX executor reads ({SUPPORTED_VERSION[0]}."
                               f"{SUPPORTED_VERSION[1]})", st.line)
            continue
        if head == ".target":
            target = target or (w[1] if len(w) > 1 else "")  # linked modules: the first
            continue
        if head == ".address_size":
            address_size = _int(w[1], st.line)
            if address_size != 64:
                raise PtxError(INVALID_PTX, f"PTX line {st.line}: .address_size {address_size}: "
                                            "the simulator executes 64-bit PTX only", st.line)
            continue
        if head in (".file", ".loc", ".pragma"):
            continue
        j = 0
        extern = False
        while j < len(w) and w[j] in _LINKAGE:
            extern = extern or w[j] == ".extern"
            j += 1
        if j < len(w) and w[j] in (".entry", ".func"):
            fn = _header(st)
            if i < len(stmts) and stmts[i].kind == "{":
                i = _body(stmts, i, fn)
            prior = functions.get(fn.name)
            if prior is None or prior.body is None:
                if prior is not None and fn.body is None:
                    continue  # a second declaration
                functions[fn.name] = fn
            elif fn.body is not None and prior.linkage == "weak":
                functions[fn.name] = fn  # a strong definition replaces a weak one (linking)
            elif fn.body is not None and fn.linkage != "weak":
                raise _err(st.line, f"function {fn.name} is defined twice (line {prior.line})")
            continue
        if j < len(w) and w[j] in (".global", ".const", ".shared", ".local"):
            d = _decl(st, w[j:], extern)
            init, relocs = _initial(d, st.line)
            if d.dims and d.dims[-1] is None and not (d.space == "shared" and extern):
                n = len(init) // d.elem_size if init else 0
                d.dims = d.dims[:-1] + (n,)
                init, relocs = _initial(d, st.line)
            gvars[d.name] = GlobalVar(d.name, d.space, d.size if d.dims[-1:] != (None,) else 0,
                                      d.alignment, init, st.line, extern, relocs, d.type,
                                      bool(d.dims))
            continue
        raise _err(st.line, f"unknown statement {' '.join(w[:4])!r} at module scope")
    if version is None:
        raise PtxError(INVALID_PTX, "PTX without a .version directive", 1)
    if not target:
        raise PtxError(INVALID_PTX, "PTX without a .target directive", 1)
    if any(n in functions and functions[n].body is None for n in ("malloc", "free")):
        # the device heap malloc/free use (ptxrt.h dev_malloc): top offset 0 = empty
        gvars.setdefault(HEAP_VAR, GlobalVar(HEAP_VAR, "global", HEAP_BYTES, 16, bytes(8), 0))
    m = PtxModule(version, target, address_size, {}, functions, gvars, text)
    for fn in functions.values():
        if fn.kind == "entry" and fn.body is not None:
            m.entries[fn.name] = entry_info(m, fn)
    return m
