"""The documentation: its examples run, and every public name is documented.

1. Every ``>>>`` example of ``docs/**/*.rst`` and ``docs/**/*.md`` runs as a
   doctest, one test per page, on a fresh default simulator (1 device, 4 GiB,
   race detector on, no seed) with the ``GPUARRAY_*`` settings unset, so the
   outputs printed in the pages are the ones a reader gets with
   ``GPUARRAY_BACKEND=sim``.  Examples that need a GPU and a peer library are
   plain code blocks without prompts and are not run.  Pages run on the
   simulator only: their outputs (device names, race reports) are the
   simulator's.
2. Every public name (``gpuarray.__all__``, ``gpuarray.errors.__all__``,
   ``gpuarray.memory.__all__``) has a numpydoc docstring -- a one-line
   summary ending with a period and, when it takes parameters, a
   ``Parameters`` section naming each of them -- and is rendered by the API
   reference (``docs/api.rst``).  ``docs/conf.py`` checks the same against the
   built site under ``make docs``.
3. The configuration page lists every ``GPUARRAY_*`` variable the library
   reads.
"""

from __future__ import annotations

import doctest
import inspect
import os
import re
import types
from pathlib import Path

import pytest

import gpuarray
import gpuarray.errors
import gpuarray.memory

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in [*DOCS.rglob("*.rst"), *DOCS.rglob("*.md")] if "_build" not in p.parts)
# Pages that hold no runnable example by design.
NO_EXAMPLES = {"index.rst", "api.rst", "validation.md", "guide/architecture.rst",  # no user code
               "sim/index.rst",  # a map of the part: its pages hold the examples
               "sim/numba_kernels.rst"}  # runs over the stand-in: tests/interop/test_numba_kernels_page.py
OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _page_id(path: Path) -> str:
    return path.relative_to(DOCS).as_posix()


# --------------------------------------------------------------- doctests
def _doctest(path: Path) -> doctest.DocTest:
    text = path.read_text(encoding="utf-8")
    return doctest.DocTestParser().get_doctest(
        text, {"__name__": "gpuarray_docs"}, _page_id(path), str(path), 0)


def test_docs_exist():
    names = {_page_id(p) for p in PAGES}
    assert {"index.rst", "quickstart.rst", "api.rst", "validation.md", "migrating.rst"} <= names
    assert len(PAGES) >= 11, sorted(names)


def test_pages_without_examples_have_none():
    # Pages left out of test_doc_examples must not hide examples.
    for path in PAGES:
        if _page_id(path) in NO_EXAMPLES:
            assert not _doctest(path).examples, f"{_page_id(path)} has >>> examples: run them"


@pytest.mark.parametrize("path", [p for p in PAGES if _page_id(p) not in NO_EXAMPLES], ids=_page_id)
def test_doc_examples(path, make_sim, monkeypatch):
    # The pages show the defaults: drop any setting of the caller's shell.
    for name in list(os.environ):
        if name.startswith("GPUARRAY_") and name not in (
                "GPUARRAY_BACKEND", "GPUARRAY_KERNEL_CACHE", "GPUARRAY_KERNEL_CACHE_DIR",
                "GPUARRAY_SIM_COMPILE"):
            monkeypatch.delenv(name)
    make_sim(devices=1, memory=4 << 30, racecheck="error", seed=None)
    test = _doctest(path)
    assert test.examples, f"{_page_id(path)} has no >>> example"
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS)
    try:
        result = runner.run(test, out=report.append, clear_globs=True)
    finally:
        test.globs.clear()
    assert result.failed == 0, "".join(report)


# ------------------------------------------------------ public docstrings
def _public_names() -> list[tuple[str, object]]:
    """(qualified name, object) of every public name, first path of each object only."""
    seen: set[int] = set()
    out = []
    for mod in (gpuarray, gpuarray.errors, gpuarray.memory):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if isinstance(obj, (types.FunctionType, type, types.ModuleType)):
                if id(obj) in seen:
                    continue
                seen.add(id(obj))
            out.append((f"{mod.__name__}.{name}", obj))
    return out


def _aliases(obj: object) -> list[str]:
    return [f"{mod.__name__}.{name}" for mod in (gpuarray, gpuarray.errors, gpuarray.memory)
            for name in mod.__all__ if getattr(mod, name) is obj]


_SECTION = re.compile(r"^(?P<title>[A-Z][A-Za-z ]+)\n-{3,}\s*$", re.M)


def _sections(doc: str) -> dict[str, str]:
    heads = list(_SECTION.finditer(doc))
    return {m.group("title").strip(): doc[m.end():heads[i + 1].start() if i + 1 < len(heads) else None]
            for i, m in enumerate(heads)}


def _entries(section: str) -> set[str]:
    """Names documented by a numpydoc Parameters/Attributes section."""
    names: set[str] = set()
    for line in section.splitlines():
        if not line.strip() or line[0].isspace():
            continue
        for part in line.split(" : ")[0].split(","):
            names.add(part.strip().lstrip("*"))
    return names


# Made by factories (get_device, stream(), event()); their constructors refuse
# callers, so they have no public parameters to document.
FACTORY_MADE = {"Device", "Stream", "Event"}


def _parameters(obj: object) -> list[str]:
    if isinstance(obj, type) and obj.__name__ in FACTORY_MADE and obj.__module__.startswith("gpuarray."):
        return []
    try:
        sig = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return []
    out = []
    for p in sig.parameters.values():
        if p.name in ("self", "cls") or p.name.startswith("_") or p.kind is p.VAR_KEYWORD:
            continue
        if p.kind is p.VAR_POSITIONAL and isinstance(obj, type):
            continue  # constructors that refuse (*args, **kwargs) take nothing
        out.append(p.name)
    return out


def docstring_problems(obj: object) -> list[str]:
    """What a numpydoc reader would miss in ``obj``'s docstring (empty: fine)."""
    if not isinstance(obj, (types.FunctionType, type, types.ModuleType)):
        return []  # data: documented by a ``#:`` comment or in api.rst (checked below)
    raw = obj.__doc__  # not inspect.getdoc: a class must not borrow its base's text
    if not raw or not raw.strip():
        return ["no docstring"]
    doc = inspect.cleandoc(raw)
    lines = doc.splitlines()
    problems = []
    if len(lines) > 1 and lines[1].strip():
        problems.append("summary is longer than one line")
    elif not lines[0].rstrip().endswith("."):
        problems.append("summary line does not end with a period")
    if isinstance(obj, types.ModuleType):
        return problems
    params = _parameters(obj)
    if params:
        sections = _sections(doc)
        documented = _entries(sections.get("Parameters", ""))
        if isinstance(obj, type):  # dataclasses / named tuples list their fields as attributes
            documented |= _entries(sections.get("Attributes", ""))
        if not documented:
            problems.append(f"no Parameters section for ({', '.join(params)})")
        else:
            missing = [p for p in params if p not in documented]
            if missing:
                problems.append(f"Parameters section lacks {', '.join(missing)}")
    return problems


# Public names whose docstrings the library still has to complete (found by
# this test; the lead fixes the library).  A name that gets fixed XPASSes,
# which fails (strict): then remove it from this table.
KNOWN_WEAK_DOCSTRINGS: dict[str, str] = {}


def _docstring_params():
    for qualname, obj in _public_names():
        marks = []
        if qualname in KNOWN_WEAK_DOCSTRINGS:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_WEAK_DOCSTRINGS[qualname]))
        yield pytest.param(qualname, obj, marks=marks, id=qualname)


@pytest.mark.parametrize(("qualname", "obj"), list(_docstring_params()))
def test_public_name_has_numpydoc_docstring(qualname, obj):
    assert docstring_problems(obj) == [], f"{qualname}: {'; '.join(docstring_problems(obj))}"


# --------------------------------------------------- rendered by api.rst
# Directives may be nested in another's content (api.rst renders DeviceNDArray inside the
# package's automodule, so that it keeps its place after the module docstring).
_DIRECTIVE = re.compile(r"^[ \t]*\.\. (?P<kind>[\w:]+):: *(?P<arg>\S+)[ \t]*\n(?P<body>(?:[ \t]+\S.*\n?)*)", re.M)


def _options(body: str) -> dict[str, str]:
    """The ``:name: value`` options at the top of a directive body (values may wrap)."""
    opts: dict[str, str] = {}
    key = None
    for line in body.splitlines():
        text = line.strip()
        m = re.match(r":([\w-]+):(.*)", text)
        if m:
            key = m.group(1)
            opts[key] = m.group(2).strip()
        elif key is not None and text:
            opts[key] += " " + text
        else:
            break
    return opts


def _api_directives() -> list[tuple[str, str, dict[str, str]]]:
    """(directive, qualified argument, options) of every directive of the .rst pages."""
    out = []
    for page in DOCS.rglob("*.rst"):
        if "_build" in page.parts:
            continue
        module = ""
        for m in _DIRECTIVE.finditer(page.read_text(encoding="utf-8")):
            kind, arg = m.group("kind"), m.group("arg")
            if kind in ("automodule", "py:module", "module", "currentmodule", "py:currentmodule"):
                module = arg
            elif "." not in arg and module:
                arg = f"{module}.{arg}"
            out.append((kind, arg, _options(m.group("body"))))
    return out


def _has_doc_comment(module: types.ModuleType, name: str) -> bool:
    """Whether ``name = ...`` in ``module``'s own source has a ``#:`` comment (autodoc shows it)."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return False
    return re.search(rf"^#:.*\n(?:#:.*\n)*{re.escape(name)}\b\s*(?::[^=\n]*)?=", source, re.M) is not None


def _rendered(qualname: str, obj: object, directives) -> bool:
    for alias in _aliases(obj) or [qualname]:
        modname, _, name = alias.rpartition(".")
        module = __import__(modname, fromlist=["_"])
        for kind, arg, opts in directives:
            if arg == alias and kind != "automodule":
                return True  # an explicit directive for the name
            if kind == "automodule" and arg == alias and isinstance(obj, types.ModuleType):
                return True
            if kind == "automodule" and arg == modname and "members" in opts:
                members = [m.strip() for m in opts["members"].split(",") if m.strip()]
                excluded = [m.strip() for m in opts.get("exclude-members", "").split(",")]
                if (members and name not in members) or name in excluded:
                    continue
                if isinstance(obj, (types.FunctionType, type)) and obj.__doc__:
                    return True  # autodoc renders documented members of __all__
                if not isinstance(obj, (types.FunctionType, type, types.ModuleType)) \
                        and _has_doc_comment(module, name):
                    return True
    return False


@pytest.mark.parametrize(("qualname", "obj"), _public_names(), ids=[q for q, _ in _public_names()])
def test_public_name_is_in_the_api_reference(qualname, obj):
    assert _rendered(qualname, obj, _api_directives()), (
        f"{qualname} is not rendered by docs/api.rst: give it a docstring (or a #: comment for "
        "data) or an explicit directive")


# ------------------------------------------------------- configuration
def test_configuration_page_lists_every_environment_variable():
    used = set()
    for src in [*(ROOT / "gpuarray").rglob("*.py"), *(ROOT / "sim" / "gpuarray_sim").rglob("*.py")]:
        used |= set(re.findall(r"GPUARRAY_[A-Z][A-Z0-9_]*[A-Z0-9]", src.read_text(encoding="utf-8")))
    used.discard("GPUARRAY_SIM")  # the prefix, as in "GPUARRAY_SIM_*"
    page = (DOCS / "guide" / "configuration.rst").read_text(encoding="utf-8")
    table = page.split(".. list-table::", 1)[1]
    listed = set(re.findall(r"^\s+\* - ``(GPUARRAY_[A-Z0-9_]+)", table, re.M))
    assert used - listed == set(), f"missing from the configuration table: {sorted(used - listed)}"
    assert listed - used == set(), f"the table lists variables the library never reads: {sorted(listed - used)}"
    assert len(re.findall(r"^\.\. list-table::", page, re.M)) == 1  # ONE table
