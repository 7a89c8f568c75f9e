"""The host driver API numba-cuda's and cuda.core's driver layers call, over the stand-in (issue 29).

Each behaviour is checked through the real cuda-bindings in one child process
over the stand-in ``libcuda.so.1`` (``python -m gpuarray standin``): the
context stack and created contexts, synchronous copies and memsets, address
ranges, every device and pointer attribute, error strings, images checked as
a driver does, foreign kernels failing at launch, the linker and libraries,
function attributes and occupancy -- and the codes cuda.h documents for bad
input, with no traceback printed by the stand-in for an ordinary error.
NULL outputs are driven through the serving side in-process.
"""

from __future__ import annotations

import ctypes

import pytest
from gpuarray_sim.standin import _serve as _standin_serve

from sim.tests.standin.test_standin import folder, ok, run  # noqa: F401  (the module-scoped fixture)

pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")

_CHILD = r"""
import numpy as np
from cuda.bindings import driver as d

def chk(res, code=0):
    assert int(res[0]) == code, (res, code)
    out = res[1:]
    return out[0] if len(out) == 1 else out

DA, PA, E = d.CUdevice_attribute, d.CUpointer_attribute, d.CUresult
chk(d.cuInit(0))
dev = chk(d.cuDeviceGet(0))
for a in DA:  # every device attribute has a value
    if a.name != "CU_DEVICE_ATTRIBUTE_MAX":
        chk(d.cuDeviceGetAttribute(a, dev))
assert chk(d.cuDeviceGetAttribute(DA.CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT, dev)) == 0
assert chk(d.cuDeviceGetAttribute(DA.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) == 132
assert chk(d.cuDeviceGetAttribute(DA.CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev)) == 0
assert chk(d.cuDeviceGetAttribute(DA.CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED, dev)) == 0

# the context stack, created and destroyed contexts
ctx = chk(d.cuDevicePrimaryCtxRetain(dev))
chk(d.cuCtxPopCurrent(), E.CUDA_ERROR_INVALID_CONTEXT)  # empty stack
chk(d.cuCtxPushCurrent(ctx))
assert int(chk(d.cuCtxGetCurrent())) == int(ctx)
assert chk(d.cuCtxGetStreamPriorityRange()) == (0, -5)
new = chk(d.cuCtxCreate(None, 0, dev))
assert int(chk(d.cuCtxGetCurrent())) == int(new)
chk(d.cuCtxDestroy(new))                                 # popped as it was current
assert int(chk(d.cuCtxGetCurrent())) == int(ctx)
for call in (lambda: d.cuCtxSetCurrent(new), lambda: d.cuCtxPushCurrent(new),
             lambda: d.cuCtxDestroy(new), lambda: d.cuCtxDestroy(ctx)):
    chk(call(), E.CUDA_ERROR_INVALID_CONTEXT)                # destroyed / primary
assert int(chk(d.cuCtxPopCurrent())) == int(ctx)
chk(d.cuCtxSetCurrent(ctx))

# streams; a destroyed stream is an invalid handle
s = chk(d.cuStreamCreate(0))
assert chk(d.cuStreamGetPriority(s)) == 0
hi = chk(d.cuStreamCreateWithPriority(0, -100))
assert chk(d.cuStreamGetPriority(hi)) == -5              # clamped, as CUDA does
chk(d.cuStreamDestroy(hi))
chk(d.cuStreamSynchronize(hi), E.CUDA_ERROR_INVALID_HANDLE)

# cuda.core's allocations: the default pool of the stream's device
pool = chk(d.cuDeviceGetDefaultMemPool(dev))
pp = chk(d.cuMemAllocFromPoolAsync(256, pool, s))
assert int(chk(d.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, pp))) == int(pool)
chk(d.cuMemFreeAsync(pp, s))
chk(d.cuMemAllocFromPoolAsync(256, 0x1234, s), E.CUDA_ERROR_INVALID_VALUE)

# synchronous copies and memsets, address ranges, pointer attributes
p = chk(d.cuMemAlloc(64))
a = np.arange(16, dtype=np.int32)
out = np.zeros_like(a)
chk(d.cuMemcpyHtoD(p, a.ctypes.data, 64))
chk(d.cuMemcpyDtoH(out.ctypes.data, p, 64))
assert (out == a).all()
q = chk(d.cuMemAlloc(64))
chk(d.cuMemcpyDtoD(q, p, 64))
chk(d.cuMemsetD8(p, 1, 64))
chk(d.cuMemcpyDtoH(out.ctypes.data, p, 64))
assert (out == 0x01010101).all()
chk(d.cuMemcpyDtoH(out.ctypes.data, q, 64))
assert (out == a).all()
chk(d.cuMemcpyHtoDAsync(p, a.ctypes.data, 128, s), E.CUDA_ERROR_INVALID_VALUE)  # past the end
chk(d.cuMemsetD32(p, 0, 17), E.CUDA_ERROR_INVALID_VALUE)
chk(d.cuCtxSynchronize())                                # not sticky
assert tuple(map(int, chk(d.cuMemGetAddressRange(int(p) + 8)))) == (int(p), 64)
chk(d.cuMemGetAddressRange(12345), E.CUDA_ERROR_NOT_FOUND)
assert int(chk(d.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_CONTEXT, p))) == int(ctx)
assert int(chk(d.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p))) == int(p)
assert chk(d.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_MAPPED, p))
chk(d.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_HOST_POINTER, p), E.CUDA_ERROR_INVALID_VALUE)
chk(d.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_CONTEXT, 12345), E.CUDA_ERROR_INVALID_VALUE)
def marshalled(x):  # cuda-bindings 13.3 cannot pass e.g. MAPPING_SIZE (its TypeError)
    try:
        d.cuPointerGetAttributes(1, [x], p)
    except TypeError:
        return False
    return True
every = [x for x in PA if x != PA.CU_POINTER_ATTRIBUTE_P2P_TOKENS and marshalled(x)]
got = chk(d.cuPointerGetAttributes(len(every), every, p))
assert len(got) == len(every)

# error strings
assert chk(d.cuGetErrorName(E.CUDA_ERROR_INVALID_VALUE)) == b"CUDA_ERROR_INVALID_VALUE"
assert chk(d.cuGetErrorString(E.CUDA_ERROR_OUT_OF_MEMORY)) == b"out of memory"

# images as a driver judges them; a kernel of a PTX image resolves and runs
chk(d.cuModuleLoadData(b"this is not a module\0"), E.CUDA_ERROR_INVALID_PTX)
chk(d.cuModuleLoadData(b"\x7fELF" + bytes(60)), E.CUDA_ERROR_NO_BINARY_FOR_GPU)
ptx = (b".version 8.0\n.target sm_90\n.address_size 64\n.visible .global .align 4 .u32 counter = 42;\n"
       b".visible .entry foreign_k()\n{\n .shared .align 4 .b8 buf[400];\n ret;\n}\n\0")
m = chk(d.cuModuleLoadData(ptx))
f = chk(d.cuModuleGetFunction(m, b"foreign_k"))
chk(d.cuModuleGetFunction(m, b"not_there"), E.CUDA_ERROR_NOT_FOUND)
gp, gsize = chk(d.cuModuleGetGlobal(m, b"counter"))
v = np.zeros(1, np.uint32)
chk(d.cuMemcpyDtoH(v.ctypes.data, gp, 4))
assert gsize == 4 and v[0] == 42
chk(d.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, 0, 0))     # PTX: runs on the PTX executor
chk(d.cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, s, 0, 0), E.CUDA_ERROR_INVALID_VALUE)
# cooperative: the whole grid resident (1024-thread blocks: 2 per SM, 132 SMs), else too large
chk(d.cuLaunchCooperativeKernel(f, 264, 1, 1, 1024, 1, 1, 0, s, 0))
chk(d.cuLaunchCooperativeKernel(f, 265, 1, 1, 1024, 1, 1, 0, s, 0),
    E.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
cfg = d.CUlaunchConfig()
cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (
    265, 1, 1, 1024, 1, 1)
cfg.hStream = s
chk(d.cuLaunchKernelEx(cfg, f, 0, 0))                    # not cooperative: any grid
attr = d.CUlaunchAttribute()
attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
attr.value.cooperative = 1
cfg.attrs, cfg.numAttrs = [attr], 1
chk(d.cuLaunchKernelEx(cfg, f, 0, 0), E.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
chk(d.cuCtxSynchronize())                                # a refused launch is not sticky
FA = d.CUfunction_attribute
assert chk(d.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f)) == 400
assert chk(d.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f)) == 1024
chk(d.cuFuncSetAttribute(f, FA.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50))
chk(d.cuFuncSetAttribute(f, FA.CU_FUNC_ATTRIBUTE_NUM_REGS, 50), E.CUDA_ERROR_INVALID_VALUE)
assert chk(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, 256, 0)) == 8
assert chk(d.cuOccupancyMaxPotentialBlockSize(f, None, 0, 0))[1] > 0

# the linker and the library API
J = d.CUjitInputType
state = chk(d.cuLinkCreate(0, [], []))
chk(d.cuLinkAddData(state, J.CU_JIT_INPUT_PTX, ptx, len(ptx), b"k.ptx", 0, [], []))
chk(d.cuLinkAddData(state, J.CU_JIT_INPUT_PTX, b"garbage\0", 8, b"g", 0, [], []),
    E.CUDA_ERROR_INVALID_PTX)
chk(d.cuLinkAddData(state, J.CU_JIT_INPUT_CUBIN, b"\x7fELF" + bytes(60), 64, b"c", 0, [], []),
    E.CUDA_ERROR_INVALID_IMAGE)
cubin, size = chk(d.cuLinkComplete(state))
lib = chk(d.cuLibraryLoadData(cubin, [], [], 0, [], [], 0))
k = chk(d.cuLibraryGetKernel(lib, b"foreign_k"))
assert chk(d.cuKernelGetName(k)) == b"foreign_k"
chk(d.cuLinkDestroy(state))
chk(d.cuLinkDestroy(state), E.CUDA_ERROR_INVALID_HANDLE)
chk(d.cuLibraryUnload(lib))
chk(d.cuModuleUnload(m))
chk(d.cuModuleGetFunction(m, b"foreign_k"), E.CUDA_ERROR_INVALID_VALUE)
print("OK")
"""


def test_the_driver_api_of_numba_cuda_and_cuda_core_is_served_with_cuda_h_codes(folder):  # noqa: F811
    res = run(folder, _CHILD)
    ok(res)
    # ordinary errors are return codes: the stand-in prints nothing
    assert "Traceback" not in res.stderr and "CUDA_ERROR_UNKNOWN" not in res.stderr, res.stderr


def test_null_outputs_and_bad_handles_are_invalid_value_never_a_crash():
    serve = _standin_serve.serve
    assert serve("cuInit", (0,)) == 0
    for name, args in [
        ("cuDeviceGetAttribute", (0, 16, 0)),                 # NULL int *
        ("cuCtxGetStreamPriorityRange", (0, 0)) and ("cuCtxCreate_v2", (0, 0, 0)),
        ("cuStreamCreate", (0, 0)),
        ("cuMemGetAddressRange_v2", (0, 0, 0x12345)) and ("cuPointerGetAttribute", (0, 1, 0)),
        ("cuGetErrorName", (1, 0)),
        ("cuModuleLoadData", (0, 0)),
        ("cuLinkCreate_v2", (0, 0, 0, 0)),
        ("cuOccupancyMaxPotentialBlockSize", (0, 0, 0, 0, 0, 0)),
        ("cuLaunchKernelEx", (0, 0, 0, 0)),
    ]:
        assert serve(name, args) == 1, (name, _standin_serve.last_error())
    box = ctypes.c_uint64()
    assert serve("cuGetErrorName", (123456, ctypes.addressof(box))) == 1  # not a CUresult
    assert serve("cuLibraryGetKernel", (ctypes.addressof(box), 0xDEAD, 0)) == 1  # NULL name
    assert serve("cuLinkComplete", (0xDEAD, ctypes.addressof(box), ctypes.addressof(box))) == 400
    assert serve("cuFuncGetAttribute", (ctypes.addressof(box), 0, 0xDEAD)) == 400
    assert serve("cuCtxPushCurrent_v2", (0xDEAD,)) == 201
