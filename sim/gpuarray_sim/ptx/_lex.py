"""PTX text to statements: the lexical layer of the PTX executor.

One concern: cut PTX into tokens (comments dropped, each token with its
line) and group them into statements -- a directive or instruction ending
at ``;``, a label ending at ``:``, and the braces that open and close
function bodies and nested scopes.  It knows no instruction; the parser
(``_parse.py``) gives statements their meaning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .._codes import INVALID_PTX
from ._errors import PtxError

__all__ = ["PtxError", "Token", "Statement", "tokens", "statements"]




@dataclass(frozen=True)
class Token:
    """One token: its text and the 1-based PTX line it starts on."""

    text: str
    line: int


_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\f\v]+|\n)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<num>0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}
        |0[xX][0-9a-fA-F]+U?|\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+U?)
  | (?P<word>[%$._A-Za-z][\w$.%]*(?:::[\w$%][\w$.%]*)*)
  | (?P<punct>[{}()\[\],;:@!<>+\-=|*/])
""", re.X | re.S)


def tokens(text: str) -> list[Token]:
    """The tokens of ``text`` (comments and blanks dropped).

    Raises
    ------
    PtxError
        218, naming the line of a character that starts no token.
    """
    out: list[Token] = []
    line, pos, n = 1, 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise PtxError(INVALID_PTX, f"PTX line {line}: unexpected character "
                                        f"{text[pos]!r}", line)
        kind = m.lastgroup
        s = m.group()
        if kind not in ("ws", "comment"):
            out.append(Token(s, line))
        line += s.count("\n")
        pos = m.end()
    return out


@dataclass
class Statement:
    """Tokens up to ``;`` (kind ``"stmt"``), a label (``"label"``) or a brace (``"{"``, ``"}"``).

    ``line`` is the line of the first token; ``toks`` excludes the ``;``.
    """

    kind: str
    toks: list[Token]
    line: int

    @property
    def words(self) -> list[str]:
        return [t.text for t in self.toks]


#: Directives that end at the end of their line (no ``;``).
_LINE_DIRECTIVES = (".version", ".target", ".address_size", ".file", ".loc")


def statements(toks: list[Token]) -> list[Statement]:
    """Group tokens into statements.

    A ``{`` opens a scope unless it belongs to a statement in progress (an
    initialiser ``= {1, 2}``, a vector operand ``{%r1, %r2}``): then it is
    part of that statement.  A label is a word followed by ``:`` at the
    start of a statement.  ``.section`` blocks (debug information) are
    skipped whole.
    """
    out: list[Statement] = []
    cur: list[Token] = []
    depth_in_stmt = 0
    i, n = 0, len(toks)
    while i < n:
        t = toks[i]
        if not cur and t.text == ".section":  # .section name { ... } : debug data
            j = i + 1
            while j < n and toks[j].text != "{":
                j += 1
            d = 0
            while j < n:
                d += toks[j].text == "{"
                d -= toks[j].text == "}"
                j += 1
                if d == 0:
                    break
            i = j
            continue
        if not cur and t.text in _LINE_DIRECTIVES:  # no ';': they end with their line
            j = i + 1
            while j < n and (toks[j].line == t.line or toks[j - 1].text == ","):
                if toks[j].text == ";":
                    break
                j += 1
            out.append(Statement("stmt", toks[i:j], t.line))
            i = j + (j < n and toks[j].text == ";")
            continue
        if t.text == "{" and depth_in_stmt == 0 and not _opens_value(cur):
            if cur:  # a function header ends at its body's brace
                out.append(Statement("stmt", cur, cur[0].line))
                cur = []
            out.append(Statement("{", [t], t.line))
        elif t.text == "}" and depth_in_stmt == 0:
            if cur:
                raise PtxError(INVALID_PTX, f"PTX line {cur[0].line}: statement "
                                            f"{' '.join(x.text for x in cur)!r} lacks its ';'",
                               cur[0].line)
            out.append(Statement("}", [t], t.line))
        elif t.text == ";" and depth_in_stmt == 0:
            if cur:
                out.append(Statement("stmt", cur, cur[0].line))
            cur = []
        elif (t.text == ":" and len(cur) == 1 and depth_in_stmt == 0
              and not cur[0].text.startswith(".")):
            out.append(Statement("label", cur, cur[0].line))
            cur = []
        else:
            if t.text == "{":
                depth_in_stmt += 1
            elif t.text == "}":
                depth_in_stmt -= 1
            cur.append(t)
        i += 1
    if cur:
        raise PtxError(INVALID_PTX, f"PTX line {cur[0].line}: the text ends inside a statement",
                       cur[0].line)
    return out


def _opens_value(cur: list[Token]) -> bool:
    """Whether a ``{`` after ``cur`` is a value (initialiser or vector), not a scope."""
    if not cur:
        return False
    last = cur[-1].text
    if last in ("=", ",", "{"):
        return True
    # an instruction's first operand: `mov.b64 {%r1, %r2}, %rd1;`, `st.v2 [a], {..}`
    first = cur[0].text
    return not first.startswith(".") and first != "@" and len(cur) >= 1 and last not in (")",)
