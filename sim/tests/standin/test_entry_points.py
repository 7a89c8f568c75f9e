"""Every entry point of cuda.h 13.x: exported by its ABI name and resolvable (issue 45).

A real ``libcuda.so.1`` exports every function of cuda.h under its ABI name
(``cuMemAlloc_v2``, ``cuMemcpyAsync_ptsz``, and the old forms such as
``cuMemAlloc``), which is how CuPy's loader, PyCUDA and ctypes users find
them, and ``cuGetProcAddress`` resolves every ``(name, version)`` form, which
is how cuda.bindings finds them.  The stand-in serves what the simulator
models and answers ``CUDA_ERROR_NOT_SUPPORTED`` for the rest, so a caller's
"is this supported?" path runs instead of a missing function
(cuda.core reported those as ``SystemError``).  The tables come from cuda.h
by ``sim/tools/cuda_h/gen.py`` (``_cuda_h.c``); the last test checks them
against an installed cuda.h.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from gpuarray_sim import standin as _standin

ROOT = Path(__file__).resolve().parents[3]
GEN = ROOT / "sim" / "tools" / "cuda_h" / "gen.py"


@pytest.fixture(scope="module")
def folder():
    try:
        return _standin.build()
    except _standin.StandinUnavailableError as e:
        pytest.skip(f"the stand-in driver cannot be built here: {e}")


def _table_symbols() -> set[str]:
    return set(re.findall(r"^W\((cu\w+)\)$", _standin.ENTRY_POINTS.read_text(), re.M))


def _table_forms() -> set[tuple[str, int]]:
    return {(n, int(v)) for n, v in
            re.findall(r'^\s+\{"(cu\w+)", (\d+)\},$', _standin.ENTRY_POINTS.read_text(), re.M)}


def _served() -> list[tuple[str, int, str, bool]]:
    """``(name, version, symbol, has_ptsz)`` of each form the stand-in's table serves."""
    src = _standin.SOURCE.read_text()
    body = src.split("static const Entry table[] = {", 1)[1].split("};", 1)[0]
    rows = [(n, int(v), s, kind == "ES") for kind, n, v, s in
            re.findall(r'\b(ES?)\("(\w+)",\s*(\d+),\s*(\w+)\)', body)]
    rows += [(n, int(v), s, False) for n, v, s in
             re.findall(r'\{"(\w+)",\s*(\d+),\s*\(void \*\)(\w+),\s*NULL\}', body)]
    return rows


def test_the_tables_hold_cuda_h_13():
    syms, forms = _table_symbols(), _table_forms()
    # the count of cuda.h 13.x, the old and per-thread forms included
    assert len(syms) > 650 and len(forms) > 600
    for s in ("cuMemAlloc", "cuMemAlloc_v2", "cuMemcpyAsync_ptsz", "cuMemcpyHtoD_v2_ptds",
              "cuGraphAddKernelNode_v2", "cuGraphConditionalHandleCreate", "cuTexObjectCreate"):
        assert s in syms, s
    assert ("cuGraphGetEdges", 12030) in forms and ("cuMemAlloc", 3020) in forms


def test_library_exports_every_cuda_h_symbol_and_nothing_else(folder):
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed: the exported symbols cannot be listed")
    out = subprocess.run(["nm", "-D", "--defined-only", str(folder / "libcuda.so.1")],
                         capture_output=True, text=True, check=True)
    names = {line.split()[-1] for line in out.stdout.splitlines() if line.split()[1:2] != ["A"]}
    assert names == _table_symbols()
    strong = {line.split()[-1] for line in out.stdout.splitlines() if " T " in line}
    # every served form is a strong definition under its ABI name, _ptsz forms too
    for name, _, sym, ptsz in _served():
        assert sym in strong, f"{name}: {sym} is served but not exported"
        if ptsz:
            assert sym + "_ptsz" in strong, f"{name}: {sym}_ptsz"


_PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
gpa = lib.cuGetProcAddress_v2
gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]
requests, symbols = json.loads(sys.stdin.read())
out = []
for name, version, flags in requests:
    p, st = ctypes.c_void_p(), ctypes.c_int(-1)
    rc = gpa(name.encode(), ctypes.byref(p), version, flags, ctypes.byref(st))
    out.append([rc, st.value, p.value or 0])
addr = {s: ctypes.cast(getattr(lib, s), ctypes.c_void_p).value for s in symbols}
print(json.dumps([out, addr]))
"""


def _resolve(folder: Path, requests: list[tuple[str, int, int]],
             symbols: list[str] = ()) -> tuple[list[list[int]], dict[str, int]]:
    """``cuGetProcAddress_v2`` of each request, and where ``symbols`` are (in one child:
    a library named libcuda.so.1 loaded here would be what cuda.bindings gets)."""
    import json
    res = subprocess.run([sys.executable, "-c", _PROBE, str(folder / "libcuda.so.1")],
                         input=json.dumps([requests, list(symbols)]), capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    got, addr = json.loads(res.stdout)
    return got, addr


def test_get_proc_address_gives_the_exported_function_of_each_served_form(folder):
    served = _served()
    reqs = [(n, v, 0) for n, v, _, _ in served] + [(n, v, 2) for n, v, _, p in served if p]
    syms = [s for _, _, s, _ in served] + [s + "_ptsz" for _, _, s, p in served if p]
    got, addr = _resolve(folder, reqs, syms)
    wrong = [f"{r[0]}@{r[1]} flags={r[2]}: {g} (want {s} at {addr[s]:#x})"
             for r, g, s in zip(reqs, got, syms, strict=False) if g != [0, 0, addr[s]]]
    assert not wrong, "\n".join(wrong)


def test_every_form_of_cuda_h_resolves_unmodelled_ones_to_not_supported(folder):
    forms = sorted(_table_forms())
    got, _ = _resolve(folder, [(n, v, 0) for n, v in forms])
    unresolved = [f"{n}@{v}" for (n, v), (rc, st, p) in zip(forms, got, strict=False) if rc != 0 or st != 0 or not p]
    assert not unresolved, unresolved
    # one function answers every form the simulator does not model; a name cuda.h lacks is not found
    served = {n for n, _, _, _ in _served()}
    shared = {p for (n, _), (_, _, p) in zip(forms, got, strict=False) if n not in served}
    assert len(shared) == 1
    (rc, st, p), = _resolve(folder, [("cuNoSuchFunction", 13000, 0)])[0]
    assert (rc, st, p) == (500, 1, 0)  # CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND


def test_an_unmodelled_entry_point_answers_not_supported_through_the_bindings(folder):
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")
    code = textwrap.dedent("""
        from cuda.bindings import driver as d
        assert d.cuInit(0)[0] == d.CUresult.CUDA_SUCCESS
        # external semaphores are not simulated: the call is there and says so
        err, = d.cuSignalExternalSemaphoresAsync([], [], 0, 0)
        print(err.name)
    """)
    e = _standin.environment(folder)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=180, env=e)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "CUDA_ERROR_NOT_SUPPORTED"


def test_the_tables_agree_with_an_installed_cuda_h(tmp_path):
    spec = importlib.util.spec_from_file_location("cuda_h_gen", GEN)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    include = gen.find_include()
    if include is None or shutil.which("cc") is None:
        pytest.skip("no CUDA 13.x include folder (the nvidia-cuda-runtime wheel or a toolkit) "
                    "and C compiler here to derive the tables from")
    version = gen.cuda_version(include)
    ours = int(re.search(r"GA_CUDA_H_VERSION (\d+)", _standin.ENTRY_POINTS.read_text()).group(1))
    if version // 1000 != ours // 1000:
        pytest.skip(f"the cuda.h here is CUDA {version}, not {ours // 1000}.x")
    syms, forms = set(gen.symbols(include)), set(gen.forms(include))
    if version == ours:
        assert (syms, forms) == (_table_symbols(), _table_forms())
    else:  # an older 13.x header (the toolkit's 13.0): ours has every entry point it has
        assert syms <= _table_symbols(), sorted(syms - _table_symbols())
        assert forms <= _table_forms(), sorted(forms - _table_forms())
        assert version < ours, f"cuda.h {version} is newer than the table's {ours}: regenerate it"
