"""Where the simulator's PTX comes from under the stand-in (issue 36, item 6).

The simulator executes PTX.  Under ``python -m gpuarray standin`` an installed
nvJitLink is replaced by the stand-in's (test_standin_nvjitlink.py), or, with
``GPUARRAY_STANDIN_NVJITLINK=hide``, hidden the way an absent library is
(``_hide_nvjitlink.c``), so numba-cuda and cuda.core link PTX through the
driver, which hands it to the simulator; the stand-in linker's output keeps
each PTX input; a cubin NVRTC made in the
process runs from the PTX of the same compile (issue 45); a kernel of any
other cubin with no PTX fails at launch saying how to get PTX.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from gpuarray_sim import SimBackend, _cubin, _images
from gpuarray_sim import standin as _standin

from gpuarray.errors import CudaError
from sim.tests.standin.test_standin import folder, ok, run  # noqa: F401  (the module-scoped fixture)

PTX = (b".version 9.0\n.target sm_90\n.address_size 64\n"
       b".visible .entry supply_k(.param .u64 p)\n{\n ret;\n}\n")


_FAKE_NVJITLINK = """
int __nvJitLinkVersion(unsigned int *major, unsigned int *minor) { *major = 13; *minor = 5; return 0; }
int nvJitLinkVersion(unsigned int *major, unsigned int *minor) { return __nvJitLinkVersion(major, minor); }
"""

_SEEN = """
import ctypes, os, sys
from cuda.bindings import nvjitlink
from cuda.pathfinder import DynamicLibNotFoundError
try:
    print("version", nvjitlink.version())
except DynamicLibNotFoundError as e:
    print("absent", type(e).__name__)
for name in sys.argv[1:]:
    print("isfile", os.path.isfile(name))
    try:
        ctypes.CDLL(name)
        print("loaded", name)
    except OSError as e:
        print("refused", e)
print("OK")
"""


def _installed_nvjitlink(tmp_path):
    """An nvJitLink cuda-pathfinder finds: a conda prefix's ``lib/libnvJitLink.so.13``."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the library under nvJitLink's name")
    (tmp_path / "lib").mkdir()
    lib = tmp_path / "lib" / "libnvJitLink.so.13"
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libnvJitLink.so.13", "-x", "c", "-o",
                    str(lib), "-"], input=_FAKE_NVJITLINK, text=True, check=True, timeout=120)
    return {**os.environ, "CONDA_PREFIX": str(tmp_path)}, lib


def _hidden_here() -> bool:
    """Whether this process runs under a stand-in command that hides nvJitLink (its stat too)."""
    return _standin.HIDE in os.environ.get("LD_AUDIT", "")


_HIDE = {"GPUARRAY_STANDIN_NVJITLINK": "hide"}


def test_a_hidden_nvjitlink_looks_absent_to_commands_over_the_stand_in(folder, tmp_path):  # noqa: F811
    # cuda.core 1.1's Linker falls back to the driver on DynamicLibNotFoundError only; empty
    # libraries preloaded under nvJitLink's names made version() raise FunctionNotFoundError
    pytest.importorskip("cuda.bindings.nvjitlink")
    if _hidden_here():
        pytest.skip("this process runs under a stand-in command that hides nvJitLink: its own "
                    "stat cannot see the library the test builds")
    base, lib = _installed_nvjitlink(tmp_path)
    assert _standin.nvjitlink_findable(base)
    argv = [sys.executable, "-c", _SEEN, str(lib), "libnvJitLink.so.13"]

    kept = _standin.environment(folder, {**base, "GPUARRAY_STANDIN_NVJITLINK": "keep"})
    out = ok(subprocess.run(argv, capture_output=True, text=True, timeout=120, env=kept))
    assert "version (13," in out and f"loaded {lib}" in out    # the condition holds: it is found

    env = _standin.environment(folder, {**base, **_HIDE})
    out = ok(subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env))
    assert "absent DynamicLibNotFoundError" in out, out
    assert "isfile True" not in out and "loaded" not in out, out
    assert out.count("refused") == 2 and "cannot open shared object file" in out, out
    # and so in a command started from within that one (whose stat no longer finds the file)
    inner = _standin.environment(folder, env)
    assert inner["LD_PRELOAD"] == env["LD_PRELOAD"] and inner["LD_AUDIT"] == env["LD_AUDIT"]
    again = _standin.environment(folder, {**env, "GPUARRAY_STANDIN_NVJITLINK": "keep"})
    assert "LD_AUDIT" not in again and again["LD_PRELOAD"] == str(folder / _standin.PTX_RECORD)


def test_hiding_nvjitlink_leaves_other_preloads_and_libraries_alone(folder, monkeypatch):  # noqa: F811
    monkeypatch.setattr(_standin, "nvjitlink_findable", lambda env: True)
    env = _standin.environment(folder, {"LD_PRELOAD": "/x/other.so", "LD_AUDIT": "/x/audit.so",
                                        **_HIDE})
    record, hide = str(folder / _standin.PTX_RECORD), str(folder / _standin.HIDE)
    assert env["LD_PRELOAD"] == f"{record}:{hide}:/x/other.so"
    assert env["LD_AUDIT"] == f"{hide}:/x/audit.so"
    kept = _standin.environment(folder, {"GPUARRAY_STANDIN_NVJITLINK": "keep"})
    assert kept["LD_PRELOAD"] == record and "LD_AUDIT" not in kept
    again = _standin.environment(folder, {**env, "GPUARRAY_STANDIN_NVJITLINK": "keep"})
    assert again["LD_PRELOAD"] == f"{record}:/x/other.so" and again["LD_AUDIT"] == "/x/audit.so"
    # other libraries still load and stat as before, the C library's and a path's alike
    res = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import ctypes, os, sys
        ctypes.CDLL("libm.so.6")
        assert os.path.isfile(sys.executable) and os.stat(sys.executable).st_size > 0
        print("OK")
    """)], capture_output=True, text=True, timeout=120, env={**env, "LD_PRELOAD": f"{record}:{hide}",
                                                            "LD_AUDIT": hide})
    ok(res)


def test_with_no_nvjitlink_installed_the_command_sees_it_absent(folder):  # noqa: F811
    if _standin.nvjitlink_findable(os.environ) or _hidden_here():
        pytest.skip("an nvJitLink is installed here: the test above covers that case")
    env = _standin.environment(folder)
    assert _standin.HIDE not in env.get("LD_PRELOAD", "") and "LD_AUDIT" not in env
    assert _standin.REAL_NVJITLINK not in env   # nothing to serve ours in place of
    ok(run(folder, """
        from cuda.bindings import nvjitlink
        from cuda.pathfinder import DynamicLibNotFoundError
        try:
            nvjitlink.version()
        except DynamicLibNotFoundError:
            print("OK")
    """))


def test_cuda_core_linker_links_ptx_through_the_driver_with_nvjitlink_hidden(folder, tmp_path):  # noqa: F811
    # where an nvJitLink is installed and hidden (GPUARRAY_STANDIN_NVJITLINK=hide); the fallback
    # cuda.core 1.1 and 1.2 take when it is absent
    pytest.importorskip("cuda.core", reason="cuda.core is not installed in this environment "
                        "(it is in .venv-peers and .venv-referee)")
    base, _ = _installed_nvjitlink(tmp_path)
    res = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import numpy as np
        from cuda.core import Device, LaunchConfig, Linker, LinkerOptions, ObjectCode, launch
        try:
            from cuda.core import Program, ProgramOptions
        except ImportError:
            from cuda.core.experimental import Program, ProgramOptions
        dev = Device(0)
        dev.set_current()
        s = dev.create_stream()
        arch = "sm_" + "".join(str(v) for v in dev.compute_capability)
        opts = ProgramOptions(arch=arch, relocatable_device_code=True)
        callee = Program('extern "C" __device__ int twice(int v) { return 2 * v; }', "c++",
                         opts).compile("ptx")
        caller = Program('extern "C" __device__ int twice(int); extern "C" __global__ void '
                         'k(int *x) { x[threadIdx.x] = twice(threadIdx.x); }', "c++", opts).compile("ptx")
        import warnings
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            mod = Linker(caller, callee, options=LinkerOptions(arch=arch)).link("cubin")
        assert any("driver APIs will be used" in str(w.message) for w in seen), seen
        buf = dev.allocate(4 * 32, stream=s)
        launch(s, LaunchConfig(grid=1, block=32), mod.get_kernel("k"), buf)
        out = np.zeros(32, np.int32)
        import cuda.bindings.driver as d
        assert d.cuMemcpyDtoHAsync(out.ctypes.data, int(buf.handle), 4 * 32, int(s.handle))[0] == 0
        s.sync()
        assert out.tolist() == [2 * i for i in range(32)], out
        print("OK")
    """)], capture_output=True, text=True, timeout=300,
        env=_standin.environment(folder, {**base, **_HIDE}))
    ok(res)


def test_the_linker_keeps_each_ptx_input_for_the_executor():
    inputs = [("ptx", PTX + b"\0"), ("ptx", PTX.replace(b"supply_k", b"other_k") + b"\0")]
    image = _cubin.link_image(inputs, 90)
    assert sorted(_images.entries(image)) == ["other_k", "supply_k"]
    assert _images.ptx_of(image, "supply_k") == PTX
    assert b"other_k" in _images.ptx_of(image, "other_k")


def test_a_kernel_of_a_cubin_without_ptx_says_how_to_get_ptx():
    nvrtc = pytest.importorskip("gpuarray._kernels._nvrtc")
    try:
        cubin = nvrtc.compile_program('extern "C" __global__ void cubin_k(int *x) { x[0] = 1; }',
                                      {}, ["--gpu-architecture=sm_90"], "cubin")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"NVRTC cannot compile here: {e}")
    # other bytes than this process's compile made: over the stand-in, the PTX of that
    # compile was kept (_ptx_record.c), and its exact bytes would run from it
    cubin = cubin[:-1] + bytes([cubin[-1] ^ 0xFF])
    b = SimBackend()
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    f = b.module_get_function(b.module_load_data(cubin), "cubin_k")
    assert _images.ptx_of(cubin, "cubin_k") is None
    with pytest.raises(CudaError) as e:
        b.launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, 1, [ctypes.c_uint64(0)])
    assert e.value.name == "CUDA_ERROR_INVALID_IMAGE"
    assert "no PTX" in str(e.value) and "Program.compile('ptx')" in str(e.value)
    assert "GPUARRAY_STANDIN_NVJITLINK" in str(e.value)


_CALLER = b""".version 8.0
.target sm_90
.address_size 64
.extern .func  (.param .b32 func_retval0) twice
(
	.param .b32 twice_param_0
)
;
.visible .entry caller_k(.param .u64 out)
{
	.reg .b32 %r<3>;
	.reg .b64 %rd<3>;
	mov.u32 %r1, 21;
	{
	.param .b32 a;
	st.param.b32 [a], %r1;
	.param .b32 r;
	call.uni (r), twice, (a);
	ld.param.b32 %r2, [r];
	}
	ld.param.u64 %rd1, [out];
	cvta.to.global.u64 %rd2, %rd1;
	st.global.u32 [%rd2], %r2;
	ret;
}
"""
_CALLEE = b""".version 9.0
.target sm_90
.address_size 64
.visible .func  (.param .b32 func_retval0) twice(.param .b32 twice_param_0)
{
	.reg .b32 %r<3>;
	ld.param.b32 %r1, [twice_param_0];
	add.s32 %r2, %r1, %r1;
	st.param.b32 [func_retval0], %r2;
	ret;
}
"""


def test_a_cubin_nvrtc_made_in_the_process_runs_from_the_ptx_of_the_same_compile(folder):  # noqa: F811
    # cuda.core's Program.compile("cubin") (-arch=sm_90): machine code only.  Over the stand-in the
    # preloaded recorder kept the PTX NVRTC made with it, and the simulator runs that; a cubin the
    # process did not compile (other bytes) still fails at launch, saying why.
    ok(run(folder, """
        import ctypes
        from cuda.bindings import driver as d, nvrtc
        def chk(r):
            r = r if isinstance(r, tuple) else (r,)
            assert int(r[0]) == 0, r
            return r[1] if len(r) == 2 else r[1:]
        src = b'extern "C" __global__ void rec_k(int *x, int v) { x[threadIdx.x] = v + threadIdx.x; }'
        prog = chk(nvrtc.nvrtcCreateProgram(src, b"rec.cu", 0, [], []))
        chk(nvrtc.nvrtcCompileProgram(prog, 1, [b"--gpu-architecture=sm_90"]))
        n = chk(nvrtc.nvrtcGetCUBINSize(prog)); cubin = b" " * n
        chk(nvrtc.nvrtcGetCUBIN(prog, cubin))
        assert b".entry" not in cubin   # no PTX in it
        chk(d.cuInit(0)); ctx = chk(d.cuDevicePrimaryCtxRetain(chk(d.cuDeviceGet(0))))
        chk(d.cuCtxSetCurrent(ctx))
        f = chk(d.cuModuleGetFunction(chk(d.cuModuleLoadData(cubin)), b"rec_k"))
        out = chk(d.cuMemAlloc(16))
        x, v = ctypes.c_uint64(int(out)), ctypes.c_int(40)
        args = (ctypes.c_void_p * 2)(ctypes.addressof(x), ctypes.addressof(v))
        chk(d.cuLaunchKernel(f, 1, 1, 1, 4, 1, 1, 0, 0, ctypes.addressof(args), 0))
        host = (ctypes.c_int * 4)()
        chk(d.cuMemcpyDtoH(ctypes.addressof(host), out, 16))
        assert list(host) == [40, 41, 42, 43], list(host)
        other = bytearray(cubin); other[-1] ^= 0xFF   # bytes no compile here made
        g = chk(d.cuModuleGetFunction(chk(d.cuModuleLoadData(bytes(other))), b"rec_k"))
        r = d.cuLaunchKernel(g, 1, 1, 1, 1, 1, 1, 0, 0, ctypes.addressof(args), 0)
        assert r[0] == d.CUresult.CUDA_ERROR_INVALID_IMAGE, r
        print("OK")
    """))


def test_ptx_inputs_that_call_each_other_are_linked_into_one_program():
    image = _cubin.link_image([("ptx", _CALLER + b"\0"), ("ptx", _CALLEE + b"\0")], 90)
    assert _images.ptx_texts(image) == [_CALLER, _CALLEE]
    b = SimBackend()
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    f = b.module_get_function(b.module_load_data(image), "caller_k")
    out = b.mem_alloc(4)
    b.launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, 1, [ctypes.c_uint64(out)])
    got = (ctypes.c_uint32 * 1)()
    b.memcpy_dtoh_async(ctypes.addressof(got), out, 4, 1)
    b.ctx_synchronize()
    assert got[0] == 42


_CUDA_CORE = """
import numpy as np
from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
import gpuarray

dev = Device()
dev.set_current()
src = 'extern "C" __global__ void scale(float *x, float a, int n) {' \\
      ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }'
code = Program(src, "c++", ProgramOptions(arch="sm_90")).compile("ptx")
kernel = code.get_kernel("scale")
x = gpuarray.to_device(np.arange(100, dtype=np.float32))
gpuarray.synchronize()                 # the upload is done before another stream's kernel
s = dev.create_stream()
launch(s, LaunchConfig(grid=4, block=32), kernel, x.__cuda_array_interface__["data"][0],
       np.float32(3), np.int32(100))
s.sync()
assert np.array_equal(x.copy_to_host(), 3 * np.arange(100, dtype=np.float32))
print("OK")
"""


def test_a_cuda_core_program_compiled_to_ptx_runs(folder):  # noqa: F811
    pytest.importorskip("cuda.core", reason="cuda.core is not installed (.venv-peers has it)")
    ok(run(folder, _CUDA_CORE))


_CUDA_CORE_LINK = """
from cuda.core import Device, Linker, LinkerOptions, Program, ProgramOptions
from cuda.core._utils.cuda_utils import CUDAError

Device().set_current()
rdc = ProgramOptions(relocatable_device_code=True)
a = Program("extern __device__ int B(); extern __device__ int C(int a, int b);"
            "__global__ void A() { int result = C(B(), 1); }", "c++", rdc).compile("ptx")
b = Program("__device__ int B() { return 0; }", "c++", rdc).compile("ptx")
c = Program("__device__ int C(int a, int b) { return a + b; }", "c++", rdc).compile("ptx")
linker = Linker(a, b, c, options=LinkerOptions(arch="sm_90"))   # nvJitLink's or the driver's
linker.link("cubin").get_kernel("_Z1Av")                # what each input defines resolves
z = Program("extern __device__ int Z(); extern __device__ int C(int a, int b);"
            "__global__ void A() { int result = C(Z(), 1); }", "c++",
            ProgramOptions(name="CBA", relocatable_device_code=True)).compile("ptx")
linker = Linker(z, b, c, options=LinkerOptions(name="ABC", arch="sm_90"))
try:
    from cuda.bindings.nvjitlink import nvJitLinkError
except ImportError:
    nvJitLinkError = CUDAError
try:
    linker.link("cubin")
except (CUDAError, nvJitLinkError):   # the driver's linker's error, or nvJitLink's
    pass
else:
    raise AssertionError("a link leaving Z undefined completed")
# cuda.core's own test_linker_get_error_log expects these words from the driver's linker;
# nvJitLink 13.5 says the same and adds its own line
log = linker.get_error_log()
if "driver" in str(Linker.which_backend()).lower():
    assert log.rstrip("\\x00") == "error   : Undefined reference to '_Z1Zv' in 'CBA'", repr(log)
else:
    assert log.rstrip("\\x00") == ("error   : Undefined reference to '_Z1Zv' in 'CBA'\\n"
                                 "ERROR 9: complete\\n"), repr(log)
print("OK")
"""


def test_a_cuda_core_link_leaving_a_function_undefined_fails_with_the_linkers_log(folder):  # noqa: F811
    # the link completed, and the kernel failed at launch; cuda.core's culink test reads this log
    pytest.importorskip("cuda.core", reason="cuda.core is not installed (.venv-peers has it)")
    ok(run(folder, _CUDA_CORE_LINK))


def test_kernel_parameter_layout_comes_from_the_ptx_signature(folder):  # noqa: F811
    # cuFuncGetParamInfo / cuKernelGetParamInfo and the counts answered NOT_SUPPORTED before
    ok(run(folder, """
        from cuda.bindings import driver as d
        def chk(r):
            r = r if isinstance(r, tuple) else (r,)
            assert int(r[0]) == 0, r
            return r[1] if len(r) == 2 else r[1:]
        ptx = b'''.version 8.0
        .target sm_90
        .address_size 64
        .visible .entry layout_k(.param .u8 a, .param .u64 b, .param .align 16 .b8 c[24], .param .f32 d)
        { ret; }
        '''
        chk(d.cuInit(0)); ctx = chk(d.cuDevicePrimaryCtxRetain(chk(d.cuDeviceGet(0))))
        chk(d.cuCtxSetCurrent(ctx))
        f = chk(d.cuModuleGetFunction(chk(d.cuModuleLoadData(ptx + b"\\0")), b"layout_k"))
        got = [tuple(int(v) for v in chk(d.cuFuncGetParamInfo(f, i))) for i in range(4)]
        assert got == [(0, 1), (8, 8), (16, 24), (40, 4)], got
        assert int(chk(d.cuFuncGetParamCount(f))) == 4
        lib = chk(d.cuLibraryLoadData(ptx + b"\\0", None, None, 0, None, None, 0))
        k = chk(d.cuLibraryGetKernel(lib, b"layout_k"))
        assert tuple(int(v) for v in chk(d.cuKernelGetParamInfo(k, 2))) == (16, 24)
        assert int(chk(d.cuKernelGetParamCount(k))) == 4
        r = d.cuFuncGetParamInfo(f, 4)          # past the last parameter
        assert r[0] == d.CUresult.CUDA_ERROR_INVALID_VALUE, r
        chk(d.cuCtxSetCurrent(None))            # the kernel is looked up in the current context
        r = d.cuKernelGetParamInfo(k, 0)
        assert r[0] == d.CUresult.CUDA_ERROR_INVALID_CONTEXT, r
        print("OK")
    """))


def test_modules_and_libraries_load_from_files(folder, tmp_path):  # noqa: F811
    # cuModuleLoad, cuLibraryLoadFromFile and cuModuleLoadFatBinary answered NOT_SUPPORTED
    path = tmp_path / "k.ptx"
    path.write_bytes(PTX + b"\0")
    image = PTX + b"\0"
    ok(run(folder, f"""
        from cuda.bindings import driver as d
        def chk(r):
            r = r if isinstance(r, tuple) else (r,)
            assert int(r[0]) == 0, r
            return r[1] if len(r) == 2 else r[1:]
        chk(d.cuInit(0)); ctx = chk(d.cuDevicePrimaryCtxRetain(chk(d.cuDeviceGet(0))))
        chk(d.cuCtxSetCurrent(ctx))
        m = chk(d.cuModuleLoad({str(path).encode()!r}))
        chk(d.cuModuleGetFunction(m, b"supply_k"))
        lib = chk(d.cuLibraryLoadFromFile({str(path).encode()!r}, None, None, 0, None, None, 0))
        chk(d.cuLibraryGetKernel(lib, b"supply_k"))
        chk(d.cuModuleGetFunction(chk(d.cuModuleLoadFatBinary({image!r})), b"supply_k"))
        missing = {str(tmp_path / "absent.ptx").encode()!r}
        assert d.cuModuleLoad(missing)[0] == d.CUresult.CUDA_ERROR_FILE_NOT_FOUND
        r = d.cuLibraryLoadFromFile(missing, None, None, 0, None, None, 0)
        assert r[0] == d.CUresult.CUDA_ERROR_INVALID_VALUE, r   # cuda.h lists no FILE_NOT_FOUND
        print("OK")
    """))
