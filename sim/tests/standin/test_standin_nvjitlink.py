"""The stand-in nvJitLink (``standin/_libnvjitlink.c``, ``_nvjitlink_calls.py``).

Under ``python -m gpuarray standin`` an installed nvJitLink is replaced by the
stand-in's: cuda-pathfinder finds the installed file and the loader maps the
stand-in's library in its place (``_hide_nvjitlink.c`` built to serve), so
numba-cuda and cuda.core link through nvJitLink as on a GPU machine, into the
simulator's image.  What the real library answers was learnt by calling it
(nvJitLink 13.5, outside the stand-in); :func:`test_the_stand_in_answers_as_the_real_library`
runs the same calls against both where one is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from gpuarray_sim import standin as _standin

from sim.tests.standin.test_standin import folder, ok, run  # noqa: F401  (the module-scoped fixture)

#: Calls made against a library given by path (argv[1]): each scenario's steps,
#: (result code, error log) printed as JSON.  The log is the bytes the size says.
_SCENARIOS = r'''
import ctypes, json, sys
L = ctypes.CDLL(sys.argv[1])
for f in ("nvJitLinkGetErrorLogSize", "nvJitLinkGetLinkedCubinSize", "nvJitLinkGetLinkedPtxSize"):
    getattr(L, f).argtypes = [ctypes.c_void_p, ctypes.c_void_p]
L.nvJitLinkAddData.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                               ctypes.c_char_p]
L.nvJitLinkAddFile.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p]
L.nvJitLinkComplete.argtypes = [ctypes.c_void_p]
PTX = b""".version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 p){ ret; }
"""
UNDEF = b""".version 8.0
.target sm_90
.address_size 64
.extern .func g();
.visible .entry k(.param .u64 p){ call g; ret; }
"""
DEF = b""".version 8.0
.target sm_90
.address_size 64
.visible .func g(){ ret; }
"""

def log(h):
    n = ctypes.c_size_t()
    assert L.nvJitLinkGetErrorLogSize(h, ctypes.byref(n)) == 0
    buf = ctypes.create_string_buffer(n.value + 1)
    if n.value:
        assert L.nvJitLinkGetErrorLog(h, buf) == 0
    return n.value, buf.raw[:n.value].decode()

def create(*opts):
    h = ctypes.c_void_p()
    arr = (ctypes.c_char_p * max(1, len(opts)))(*[o.encode() for o in opts])
    return L.nvJitLinkCreate(ctypes.byref(h), len(opts), arr), h

out = {}
def scenario(name, *opts, steps=()):
    rc, h = create(*opts)
    got = [("create", rc, log(h))]
    for label, fn in steps:
        got.append((label, fn(h), log(h)))
    L.nvJitLinkDestroy(ctypes.byref(h))
    out[name] = got

add = lambda data, kind=2, name=b"a.ptx": lambda h: L.nvJitLinkAddData(h, kind, data, len(data), name)
complete = ("complete", lambda h: L.nvJitLinkComplete(h))
size = lambda f: lambda h: getattr(L, f)(h, ctypes.byref(ctypes.c_size_t()))
for opts in [(), ("-bogus",), ("-arch=sm_90", "-bogus"), ("-arch=sm_91",), ("-arch=sm_52",),
             ("-arch=sm_70",), ("-arch=compute_90",), ("-arch=sm_90", "-ptx"), ("-arch=sm_90", "-O2"),
             ("-arch=sm_xx",), ("-arch=sm_90", "-O3", "-g"), ("-arch=sm_90a",), ("-arch=sm_100f",),
             ("-arch=sm_90f",), ("-arch=sm_90", "-maxrregcount=32", "-lineinfo", "-ftz=1", "-fma=0",
             "-prec-div=1", "-prec-sqrt=0", "-Xptxas=-v", "-no-cache", "-time")]:
    scenario("options " + " ".join(opts), *opts)
scenario("empty link", "-arch=sm_90", steps=[complete])
scenario("ptx", "-arch=sm_90", steps=[
    ("cubin size before", size("nvJitLinkGetLinkedCubinSize")), ("add", add(PTX)), complete,
    ("cubin size", size("nvJitLinkGetLinkedCubinSize")),
    ("ptx size", size("nvJitLinkGetLinkedPtxSize")),
    ("add after", add(PTX, name=b"b.ptx")), ("complete again", lambda h: L.nvJitLinkComplete(h))])
scenario("undefined", "-arch=sm_90", steps=[("add", add(UNDEF, name=b"u.ptx")), complete])
scenario("defined elsewhere", "-arch=sm_90", steps=[
    ("add", add(UNDEF, name=b"u.ptx")), ("add g", add(DEF, name=b"g.ptx")), complete])
scenario("bad inputs", "-arch=sm_90", steps=[
    ("garbage ptx", add(b"garbage here", name=b"g.ptx")),
    ("garbage none", add(b"garbage here", kind=0, name=b"g")),
    ("garbage cubin", add(b"garbage here", kind=1, name=b"g")),
    ("garbage ltoir", add(b"garbage here", kind=3, name=b"g")),
    ("garbage any", add(b"garbage here", kind=10, name=b"g")),
    ("null data", lambda h: L.nvJitLinkAddData(h, 2, None, 0, b"n")),
    ("empty data", lambda h: L.nvJitLinkAddData(h, 2, PTX, 0, b"n")),
    ("missing file", lambda h: L.nvJitLinkAddFile(h, 2, b"/nonexistent/x.ptx")),
    ("null file", lambda h: L.nvJitLinkAddFile(h, 2, None))])
rc, h = create("-arch=sm_80")  # PTX for a newer architecture: the code only (ptxas's words)
out["newer ptx"] = [rc, L.nvJitLinkAddData(h, 2, PTX, len(PTX), b"a.ptx")]
L.nvJitLinkDestroy(ctypes.byref(h))
scenario("lto without ltoir", "-arch=sm_90", "-lto", steps=[("add", add(PTX)), complete])
h = ctypes.c_void_p()
out["null"] = [L.nvJitLinkCreate(None, 0, None), L.nvJitLinkCreate(ctypes.byref(h), 0, None),
               L.nvJitLinkDestroy(None), L.nvJitLinkDestroy(ctypes.byref(h)),
               L.nvJitLinkComplete(None), L.nvJitLinkVersion(None, None),
               L.nvJitLinkGetErrorLogSize(None, ctypes.byref(ctypes.c_size_t()))]
print(json.dumps(out))
'''


def _answers(lib: str, env: dict[str, str]) -> dict:
    res = subprocess.run([sys.executable, "-c", _SCENARIOS, lib], capture_output=True, text=True,
                         timeout=300, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def _clean_env() -> dict[str, str]:
    """This environment without the stand-in's loader settings (a command over it has them)."""
    return {k: v for k, v in os.environ.items()
            if k not in ("LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", _standin.MARK)}


def test_the_stand_in_answers_its_own_calls(folder):  # noqa: F811
    # the library itself, loaded by its path in a Python process: no nvJitLink need be installed
    got = _answers(str(folder / _standin.NVJITLINK), _standin.environment(folder))
    assert got["options "][0][1:] == [2, [0, ""]]                        # MISSING_ARCH, no log
    assert got["options -bogus"][0][1:] == [1, [29, "unrecognized option: -bogus\n\0"]]
    assert got["options -arch=sm_91"][0][1] == 16 and got["options -arch=sm_52"][0][1] == 17
    assert got["empty link"][1][1] == 0
    steps = {label: rc for label, rc, _ in got["ptx"]}
    assert steps == {"create": 0, "cubin size before": 6, "add": 0, "complete": 0, "cubin size": 0,
                     "ptx size": 3, "add after": 6, "complete again": 6}
    assert got["undefined"][2][1:] == [6, [67, "error   : Undefined reference to 'g' in 'u.ptx'\n"
                                               "ERROR 9: complete\n\0"]]
    assert got["defined elsewhere"][3][1] == 0
    assert got["null"] == [10, 10, 10, 10, 10, 10, 10]


def test_the_stand_in_answers_as_the_real_library(folder):  # noqa: F811
    real = _standin.nvjitlink_path(os.environ)
    if real is None:
        pytest.skip("no nvJitLink is installed here to compare with (.venv-peers has one)")
    want = _answers(str(real), _clean_env())
    got = _answers(str(folder / _standin.NVJITLINK), _standin.environment(folder))
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name


_CUDA_CORE = """
import warnings
import numpy as np
from cuda.bindings import nvjitlink
from cuda.core import Device, LaunchConfig, Linker, LinkerOptions, ObjectCode, launch
from cuda.core._utils.cuda_utils import CUDAError

dev = Device()
dev.set_current()
assert "nvjitlink" in str(Linker.which_backend()).lower(), Linker.which_backend()
assert nvjitlink.version()[0] >= 12
ptx = b'''.version 8.0
.target sm_90
.address_size 64
.visible .entry put(.param .u64 p)
{
 .reg .u64 %a;
 ld.param.u64 %a, [p];
 cvta.to.global.u64 %a, %a;
 st.global.u32 [%a], 42;
 ret;
}
'''
with warnings.catch_warnings():
    warnings.simplefilter("error")     # no "driver APIs will be used" RuntimeWarning
    mod = Linker(ObjectCode.from_ptx(ptx), options=LinkerOptions(arch="sm_90")).link("cubin")
s = dev.create_stream()
buf = dev.allocate(4, stream=s)
launch(s, LaunchConfig(grid=1, block=1), mod.get_kernel("put"), buf)
out = np.zeros(1, np.uint32)
import cuda.bindings.driver as d
assert d.cuMemcpyDtoHAsync(out.ctypes.data, int(buf.handle), 4, int(s.handle))[0] == 0
s.sync()
assert out[0] == 42, out
undef = ObjectCode.from_ptx(b'''.version 8.0
.target sm_90
.address_size 64
.extern .func g();
.visible .entry k(.param .u64 p){ call g; ret; }
''', name="u.ptx")
linker = Linker(undef, options=LinkerOptions(arch="sm_90"))
try:
    linker.link("cubin")
except nvjitlink.nvJitLinkError as e:
    assert e.status == nvjitlink.Result.ERROR_INTERNAL, e
else:
    raise AssertionError("an undefined function linked")
assert "Undefined reference to 'g' in 'u.ptx'" in linker.get_error_log(), linker.get_error_log()
print("OK")
"""


def _peers(folder):  # noqa: F811
    pytest.importorskip("cuda.core", reason="cuda.core is not installed (.venv-peers has it)")
    if _standin.nvjitlink_path(os.environ) is None:
        pytest.skip("no nvJitLink is installed here: the stand-in serves none (the driver links)")


def test_cuda_core_links_through_the_stand_in_nvjitlink(folder):  # noqa: F811
    _peers(folder)
    ok(run(folder, _CUDA_CORE))


_NUMBA = """
import numpy as np
from numba import cuda
from numba.cuda.cudadrv.driver import _have_nvjitlink
assert _have_nvjitlink()
@cuda.jit                     # LTO by default with nvJitLink: the real one makes its PTX
def axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]
x = np.arange(100, dtype=np.float32)
out = np.zeros_like(x)
axpy[4, 32](out, np.float32(2), x, np.ones_like(x))
assert np.array_equal(out, 2 * x + 1), out
assert axpy.overloads[next(iter(axpy.overloads))]._codelibrary._lto
print("OK")
"""


def test_a_numba_kernel_links_with_lto_and_runs(folder):  # noqa: F811
    _peers(folder)
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed (.venv-peers has it)")
    ok(run(folder, _NUMBA, timeout=300))


def _in_mode(folder, mode: str, code: str) -> str:  # noqa: F811
    env = _standin.environment(folder, {**os.environ, "GPUARRAY_STANDIN_NVJITLINK": mode})
    return ok(subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                             text=True, timeout=180, env=env))


def test_hide_restores_the_driver_link_and_keep_the_real_library(folder):  # noqa: F811
    _peers(folder)
    code = """
        from cuda.core import Linker
        print("backend", str(Linker.which_backend()).lower())
        print("OK")
    """
    assert "backend driver" in _in_mode(folder, "hide", code)
    assert "backend nvjitlink" in _in_mode(folder, "serve", code)
    served = _standin.environment(folder)
    assert served[_standin.REAL_NVJITLINK] == str(_standin.nvjitlink_path(os.environ))
    assert served["LD_AUDIT"].startswith(str(folder / _standin.SERVE))
    kept = _standin.environment(folder, {**os.environ, "GPUARRAY_STANDIN_NVJITLINK": "keep"})
    assert _standin.REAL_NVJITLINK not in kept and _standin.SERVE not in kept.get("LD_AUDIT", "")
    where = """
        from cuda.bindings import nvjitlink
        nvjitlink.version()
        print(sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "libnvJitLink" in ln}))
        print("OK")
    """
    assert str(folder) not in _in_mode(folder, "keep", where)   # the real library only
    # ours, and the real one that answered its version (loaded by _nvjitlink_lto.py)
    assert str(folder / _standin.NVJITLINK) in _in_mode(folder, "serve", where)


def test_a_bad_mode_is_refused_naming_it(folder):  # noqa: F811
    with pytest.raises(_standin.StandinUnavailableError, match="'Keep'"):
        _standin.environment(folder, {"GPUARRAY_STANDIN_NVJITLINK": "Keep"})
    res = subprocess.run([sys.executable, "-m", "gpuarray_sim", "standin", "--", "true"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "GPUARRAY_STANDIN_NVJITLINK": "Keep"})
    assert res.returncode == 2 and "expected serve" in res.stderr, res.stderr


def test_without_python_every_call_is_internal(folder, tmp_path):  # noqa: F811
    # a C program that loads the library: no interpreter to serve it (the bridge's rule)
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = textwrap.dedent("""
        #include <stdio.h>
        int nvJitLinkVersion(unsigned *, unsigned *);
        int __nvJitLinkCreate_13_5(void **, unsigned, const char **);
        int main(void) {
            unsigned a, b; void *h; const char *o = "-arch=sm_90";
            printf("%d %d\\n", nvJitLinkVersion(&a, &b), __nvJitLinkCreate_13_5(&h, 1, &o));
            return 0;
        }
    """)
    exe = tmp_path / "nvjl"
    lib = folder / _standin.NVJITLINK
    subprocess.run([cc, "-o", str(exe), "-x", "c", "-", "-x", "none", str(lib)], input=src, text=True,
                   check=True, timeout=120)
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60,
                         env={**_clean_env(), "LD_LIBRARY_PATH": str(lib.parent)})
    assert res.stdout.split() == ["6", "6"], res.stdout + res.stderr
