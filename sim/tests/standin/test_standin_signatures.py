"""Every C entry point of the stand-in driver has cuda.h's signature (issue 38).

The stand-in's wrappers (``_libcuda.c``) are written by hand; a parameter in
the wrong place (``cuDevicePrimaryCtxGetState`` took ``(flags*, active*,
dev)`` where cuda.h has ``(CUdevice dev, unsigned int *flags, int *active)``)
makes every call of it fail or write through a device ordinal.  This test
compares them mechanically, never by eye: the C compiler's preprocessor
expands both ``_libcuda.c`` (its wrapper macros) and cuda.h (with and
without ``__CUDA_API_VERSION_INTERNAL``, which declares the older forms and
the ``_ptsz``/``_ptds`` forms under their exported names; cudaProfiler.h
declares the profiler switches), and each
wrapper's parameters are compared with the declaration of the symbol it is
served as, by how they are passed: a pointer, an integer of 8, 16, 32 or 64
bits, a float, or a structure by value (its members).

cuda.h comes with the CUDA toolkit, not with the Python packages: the test
skips, saying so, without one.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from gpuarray_sim import standin as _standin

from sim.tests.backend.test_error_code_audit import _cuda_h

_INTEGER_WORDS = {"signed", "unsigned", "char", "short", "int", "long"}


def _scalar(t: str) -> str | None:
    """How a C scalar type named by ``t`` is passed (LP64), or None if ``t`` is not one."""
    words = t.split()
    if t in ("float", "double", "void"):
        return {"float": "f32", "double": "f64", "void": "void"}[t]
    if not words or not set(words) <= _INTEGER_WORDS:
        return None
    if "char" in words:
        return "i8"
    if "short" in words:
        return "i16"
    return "i64" if "long" in words else "i32"


def _cc() -> str:
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return name
    pytest.skip("no C compiler (cc, gcc, clang) to preprocess cuda.h and the stand-in's source")


def _preprocess(cc: str, path: Path, *defines: str) -> str:
    res = subprocess.run([cc, "-E", "-P", *defines, "-I", str(path.parent), str(path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _strip_attributes(text: str) -> str:
    return re.sub(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)", " ", text)


class _Types:
    """The typedefs of a preprocessed translation unit, resolved to how a value is passed."""

    def __init__(self, text: str) -> None:
        self.typedefs: dict[str, str] = {}
        text = _strip_attributes(text)
        # typedef struct/enum/union X { ... } Name;  (bodies without nested braces suffice here)
        for m in re.finditer(r"typedef\s+(struct|union|enum)\s*(\w*)\s*\{([^{}]*)\}\s*([^;]+);", text):
            kind, body = m.group(1), " ".join(m.group(3).split())
            for name in m.group(4).split(","):
                name = name.strip()
                self.typedefs[name.lstrip("*").strip()] = (
                    "ptr" if name.startswith("*") else "i32" if kind == "enum" else f"{kind}{{{body}}}")
            if m.group(2):
                self.typedefs[f"{kind} {m.group(2)}"] = "i32" if kind == "enum" else f"{kind}{{{body}}}"
        for m in re.finditer(r"typedef[^;{}()]*\(\s*(?:\w+\s+)?\*\s*(\w+)\s*\)\s*\(", text):
            self.typedefs[m.group(1)] = "ptr"  # a function pointer
        for m in re.finditer(r"typedef\s+([^;{}()]+?)\s*(\**)\s*(\w+)\s*;", text):
            base, stars, name = " ".join(m.group(1).split()), m.group(2), m.group(3)
            self.typedefs.setdefault(name, "ptr" if stars else base)

    def kind(self, ctype: str) -> str:
        t = " ".join(ctype.replace("const", " ").replace("volatile", " ").split())
        if "*" in t or "[" in t:
            return "ptr"
        for _ in range(20):
            scalar = _scalar(t)
            if scalar is not None:
                return scalar
            if t.startswith(("struct{", "union{")) or t in ("ptr", "i32"):
                return t
            nxt = self.typedefs.get(t)
            if nxt is None:
                raise AssertionError(f"cannot resolve the C type {ctype!r}")
            t = " ".join(nxt.replace("const", " ").split())
        raise AssertionError(f"typedef loop at {ctype!r}")


def _param_types(params: str) -> list[str]:
    params = " ".join(params.split())
    if params in ("", "void"):
        return []
    out = []
    for p in params.split(","):
        p = p.strip()
        m = re.match(r"(.*?[\s*])(\w+)(\s*\[[^\]]*\])?$", p)
        out.append(m.group(1) + ("*" if m.group(3) else "") if m else p)
    return out


def _declarations(text: str) -> dict[str, list[str]]:
    text = _strip_attributes(text)
    return {m.group(1): _param_types(m.group(2))
            for m in re.finditer(r"\bCUresult\s+(cu\w+)\s*\(([^()]*)\)\s*;", text)}


def test_every_stand_in_entry_point_has_the_signature_cuda_h_declares():
    header = _cuda_h()
    if header is None:
        pytest.skip("no CUDA toolkit here: cuda.h (CUDA_HOME, /usr/local/cuda*) is not installed")
    cc = _cc()
    public = _preprocess(cc, header)
    internal = _preprocess(cc, header, "-D__CUDA_API_VERSION_INTERNAL")
    profiler = header.with_name("cudaProfiler.h")  # cuProfilerStart/Stop
    if profiler.is_file():
        public += _preprocess(cc, profiler)
    h_types = _Types(public)
    declared = {**_declarations(internal), **_declarations(public)}
    source = _preprocess(cc, _standin.SOURCE)
    s_types = _Types(source)

    defs = {m.group(2): _param_types(m.group(3)) for m in re.finditer(
        r"\bCUresult\s+(w_)?(cu\w+)\s*\(([^()]*)\)\s*\{", _strip_attributes(source))}
    served = set(re.findall(r"\(void \*\)\s*(?:w_)?(cu\w+)", source))
    assert len(served) > 150 and served <= set(defs), sorted(served - set(defs))

    problems = []
    header_version = int(re.search(r"#define\s+CUDA_VERSION\s+(\d+)", header.read_text()).group(1))
    table_version = int(re.search(r"GA_CUDA_H_VERSION (\d+)",
                                  _standin.ENTRY_POINTS.read_text()).group(1))
    for name in sorted(served):
        if name not in declared and header_version < table_version:
            continue  # newer than this cuda.h (CUDA 13.0's lacks cuGraphNodeGetParams, 13.2)
        if name not in declared:
            problems.append(f"{name}: cuda.h ({header}) declares no such symbol")
            continue
        want = [h_types.kind(t) for t in declared[name]]
        got = [s_types.kind(t) for t in defs[name]]
        if want != got:
            problems.append(f"{name}: cuda.h {declared[name]} ({want}), stand-in {defs[name]} ({got})")
    assert not problems, "\n".join(problems)


def test_the_comparison_sees_a_swapped_parameter():
    # The check itself: the signature of cuDevicePrimaryCtxGetState before issue 38 is refused.
    types = _Types("typedef int CUdevice;")
    want = [types.kind(t) for t in _param_types("CUdevice dev, unsigned int *flags, int *active")]
    old = [types.kind(t) for t in _param_types("unsigned int * a1, int * a2, CUdevice a3")]
    assert want == ["i32", "ptr", "ptr"] and old != want
