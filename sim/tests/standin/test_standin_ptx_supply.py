"""Where the simulator's PTX comes from under the stand-in (issue 36, item 6).

The simulator executes PTX.  Under ``python -m gpuarray standin`` nvJitLink
is hidden (empty libraries under its names, preloaded), so numba-cuda and
cuda.core link PTX through the driver, which hands it to the simulator; the
stand-in linker's output keeps each PTX input; a kernel of a cubin with no
PTX fails at launch saying how to get PTX.
"""

from __future__ import annotations

import ctypes

import pytest
from gpuarray_sim import SimBackend, _cubin, _images
from gpuarray_sim import standin as _standin

from gpuarray.errors import CudaError
from sim.tests.standin.test_standin import folder, ok, run  # noqa: F401  (the module-scoped fixture)

PTX = (b".version 9.0\n.target sm_90\n.address_size 64\n"
       b".visible .entry supply_k(.param .u64 p)\n{\n ret;\n}\n")


def test_nvjitlink_is_hidden_from_commands_over_the_stand_in(folder):  # noqa: F811
    env = _standin.environment(folder, {"LD_PRELOAD": "/x/other.so"})
    pre = env["LD_PRELOAD"].split(":")
    assert pre[-1] == "/x/other.so" and {p.rsplit("/", 1)[-1] for p in pre[:-1]} == {
        "libnvJitLink.so.12", "libnvJitLink.so.13"}
    kept = _standin.environment(folder, {"GPUARRAY_STANDIN_NVJITLINK": "keep"})
    assert "LD_PRELOAD" not in kept
    again = _standin.environment(folder, {**env, "GPUARRAY_STANDIN_NVJITLINK": "keep"})
    assert again["LD_PRELOAD"] == "/x/other.so"   # from within a command over the stand-in
    # in the command, the library found under nvJitLink's name has no nvJitLink in it
    ok(run(folder, """
        import ctypes, os
        lib = ctypes.CDLL("libnvJitLink.so.13", mode=os.RTLD_NOLOAD)
        assert not hasattr(lib, "__nvJitLinkVersion") and not hasattr(lib, "nvJitLinkCreate")
        print("OK")
    """))


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
