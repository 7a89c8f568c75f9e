"""Module rules of cuda.h the simulator used to bend (issue 38, item 4).

- PTX newer than the driver is ``CUDA_ERROR_UNSUPPORTED_PTX_VERSION``; PTX or
  a cubin for a newer architecture than the device (sm_90) is refused
  (``INVALID_PTX`` / ``NO_BINARY_FOR_GPU``); the reported driver version is
  that of the bindings and NVRTC in use, so their PTX loads.
- ``cuModuleGetFunction``/``cuLibraryGetKernel`` find ``.entry`` functions
  only: a parameter, a shared variable, an instruction, a device function or
  any other string of a cubin is ``NOT_FOUND``.
- static shared memory counts: ``SHARED_SIZE_BYTES``, the dynamic limit of
  48 KiB less it, launches beyond it refused, the opt-in checked against
  ``MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`` less it, and a launch within a
  valid opt-in runs.
- a corrupt ELF header (section table past the image) is refused, never
  read past the image nor crashing the process.
- ``cuKernelGetAttribute``/``SetAttribute``/``SetCacheConfig`` with a device
  that does not exist is ``INVALID_DEVICE``.

On the simulator backend directly, and through the real cuda-bindings over
the stand-in driver in a child process.
"""

from __future__ import annotations

import ctypes
import re
import struct

import pytest
from gpuarray_sim import SimBackend, _cubin, _images
from gpuarray_sim import kernels as sim_kernels

from gpuarray.errors import CudaError
from sim.tests.standin.test_standin import folder, ok, run  # noqa: F401  (the module-scoped fixture)

LEGACY = 1
PTX = (b".version 9.0\n.target sm_90\n.address_size 64\n"
       b".visible .func (.param .b32 r) helper(.param .b32 a)\n{\n ret;\n}\n"
       b".visible .entry h36b_noop(.param .u64 h36b_noop_param_0)\n{\n"
       b" .shared .align 8 .b8 tile[1024];\n ret;\n}\n")


def fatbin(members: list[tuple[str, int, bytes]]) -> bytes:
    """A fatbin of uncompressed members ``(kind "ptx"/"elf", sm arch, payload)``."""
    body = b""
    for kind, arch, payload in members:
        head = bytearray(64)
        struct.pack_into("<HHIQ", head, 0, 1 if kind == "ptx" else 2, 0x101, 64, len(payload))
        struct.pack_into("<I", head, 28, arch)
        body += bytes(head) + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def fake_cubin(names: list[str], arch: int = 90) -> bytes:
    """An ELF cubin for ``sm_<arch>`` whose kernels are ``names`` (symbols only, no code, no PTX)."""
    strtab, shstr, offsets = b"\0", b"\0", []
    for n in names:
        offsets.append(len(strtab))
        strtab += n.encode() + b"\0"
    sec_names = [".shstrtab", ".strtab", ".symtab"] + [f".text.{n}" for n in names]
    name_at = []
    for sn in sec_names:
        name_at.append(len(shstr))
        shstr += sn.encode() + b"\0"
    symtab = bytes(24) + b"".join(struct.pack("<IBBHQQ", off, 0x12, 0x10, 4 + i, 0, 0)
                                  for i, off in enumerate(offsets))
    blobs = [shstr, strtab, symtab] + [b"" for _ in names]
    body, places = b"", []
    for blob in blobs:
        places.append(64 + len(body))
        body += blob + bytes(-len(blob) % 8)
    types = [3, 3, 2] + [1] * len(names)
    table = bytes(64) + b"".join(
        struct.pack("<IIQQQQIIQQ", name_at[i], types[i], 0, 0, places[i], len(blobs[i]),
                    2 if types[i] == 2 else 0, 1 if types[i] == 2 else 0, 8,
                    24 if types[i] == 2 else 0) for i in range(len(blobs)))
    head = bytearray(64)
    head[0:9] = b"\x7fELF\x02\x01\x01\x41\x08"
    struct.pack_into("<HHIQQQI", head, 16, 2, 190, 1, 0, 0, 64 + len(body), arch << 8)
    struct.pack_into("<HHHHHH", head, 0x34, 64, 0, 0, 64, len(blobs) + 1, 1)
    return bytes(head) + body + table


def test_a_fake_cubin_reads_as_a_cubin():
    image = fake_cubin(["a_k", "b_k"])
    assert _cubin.read_elf(image).arch == 90 and _images.entries(image) == ["a_k", "b_k"]


class _Noop:
    """A kernel the simulator runs (registered under the PTX's entry name): does nothing."""

    param_types = (ctypes.c_uint64,)

    def accesses(self, params):
        return []

    def run(self, mem, grid, block, shared_mem, params):
        pass


@pytest.fixture
def sim():
    sim_kernels.register("h36b_noop", _Noop())
    b = SimBackend()
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    return b


def _code(fn, *args):
    with pytest.raises(CudaError) as e:
        fn(*args)
    return e.value.code


def _cubin_from_nvrtc(source: str, arch: str = "sm_90") -> bytes:
    nvrtc = pytest.importorskip("gpuarray._kernels._nvrtc")
    try:
        return nvrtc.compile_program(source, {}, [f"--gpu-architecture={arch}"], "cubin")
    except Exception as e:  # noqa: BLE001  (no NVRTC here: say so)
        pytest.skip(f"NVRTC cannot compile here: {e}")


# ------------------------------------------------------------ versions, archs
def test_ptx_newer_than_the_driver_or_device_is_refused(sim):
    newest = _images.ptx_isa_of_driver()
    assert sim.driver_version() == _images.DRIVER_VERSION == 13050 and newest == (9, 5)
    sim.module_load_data(PTX.replace(b".version 9.0", b".version 9.5"))
    assert _code(sim.module_load_data, PTX.replace(b".version 9.0", b".version 9.6")) == 222
    assert _code(sim.module_load_data, PTX.replace(b".version 9.0", b".version 10.0")) == 222
    assert _code(sim.module_load_data, PTX.replace(b"sm_90", b"sm_100")) == 218
    sim.module_load_data(PTX.replace(b"sm_90", b"sm_80"))     # older PTX: the JIT compiles it
    sim.module_load_data(PTX.replace(b"sm_90", b"sm_90a"))


def test_a_cubin_for_another_architecture_is_no_binary_for_gpu(sim):
    sim.module_load_data(_cubin.link_image([], 90))
    for arch in (100, 120, 80, 0):   # newer, and other majors: cubins do not cross majors
        assert _code(sim.module_load_data, _cubin.link_image([], arch)) == 209, arch
    assert _code(sim.module_load_data, fatbin([("elf", 100, _cubin.link_image([], 100))])) == 209
    sim.module_load_data(fatbin([("elf", 100, _cubin.link_image([], 100)), ("ptx", 90, PTX)]))


def test_the_installed_nvrtc_makes_ptx_the_reported_driver_loads():
    """A newer NVRTC (gpuarray[cu13] pins 13.*) needs DRIVER_VERSION and its table extended."""
    nvrtc = pytest.importorskip("gpuarray._kernels._nvrtc")
    try:
        ptx = nvrtc.compile_program('extern "C" __global__ void k() {}', {},
                                    ["--gpu-architecture=compute_90"], "ptx")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"NVRTC cannot compile here: {e}")
    v = re.search(rb"\.version (\d+)\.(\d+)", ptx)
    assert v is not None
    assert (int(v.group(1)), int(v.group(2))) <= _images.ptx_isa_of_driver()


# ----------------------------------------------------------------- lookups
def test_only_entry_functions_are_kernels_of_ptx(sim):
    m = sim.module_load_data(PTX + b"// .entry commented_out(\n")
    sim.module_get_function(m, "h36b_noop")
    for name in ("h36b_noop_param_0", "tile", "helper", "ret", "sm_90", "commented_out", "entry"):
        assert _code(sim.module_get_function, m, name) == 500, name


def test_only_entry_symbols_are_kernels_of_a_cubin(sim):
    image = _cubin_from_nvrtc(
        "__device__ __noinline__ int helper(int a) { return a + 1; }\n"
        'extern "C" __global__ void kern(int *x) { __shared__ int tile[100];'
        " tile[threadIdx.x] = x[0]; __syncthreads(); x[1] = helper(tile[3]); }\n")
    words = ("ptxas", "NVIDIA", "release", "__nv_reservedSMEM_offset_0_alias")
    for w in words:   # strings of the cubin, whole words: kernels by a text search
        assert re.search(rb"(?<![\w$.])" + w.encode() + rb"(?![\w$])", image), w
    m = sim.module_load_data(image)
    sim.module_get_function(m, "kern")
    for name in (*words, "_Z6helperi", "tile", ".text.kern", "kern_param_0"):
        assert _code(sim.module_get_function, m, name) == 500, name
    assert _images.entries(image) == ["kern"]


# ----------------------------------------------------------- shared memory
def test_static_shared_memory_counts_against_the_launch_and_the_opt_in(sim):
    m = sim.module_load_data(PTX)
    f = sim.module_get_function(m, "h36b_noop")
    s = sim.stream_create()
    arg = [ctypes.c_uint64(0)]
    assert sim.function_info(f)[3]["shared"] == 1024
    assert sim.function_max_dynamic_shared(f) == (48 << 10) - 1024
    sim.launch_kernel(f, (1, 1, 1), (32, 1, 1), (48 << 10) - 1024, s, arg)
    assert _code(sim.launch_kernel, f, (1, 1, 1), (32, 1, 1), (48 << 10) - 1023, s, arg) == 1
    optin = sim.device_attribute("max_shared_memory_per_block_optin", 0)
    assert _code(sim.function_set_max_dynamic_shared, f, optin - 1023) == 1
    sim.function_set_max_dynamic_shared(f, optin - 1024)
    sim.launch_kernel(f, (1, 1, 1), (32, 1, 1), optin - 1024, s, arg)   # within the opt-in
    assert _code(sim.launch_kernel, f, (1, 1, 1), (32, 1, 1), optin - 1023, s, arg) == 1
    sim.stream_synchronize(s)


def test_maxntid_bounds_the_block_and_is_the_max_threads_attribute(sim):
    ptx = PTX.replace(b".entry h36b_noop(.param .u64 h36b_noop_param_0)\n",
                      b".entry h36b_noop(.param .u64 h36b_noop_param_0)\n.maxntid 64, 1, 1\n")
    f = sim.module_get_function(sim.module_load_data(ptx), "h36b_noop")
    assert sim.function_info(f)[3]["max_threads"] == 64 and sim.function_info(f)[3]["ptx_version"] == 90
    s = sim.stream_create()
    sim.launch_kernel(f, (1, 1, 1), (64, 1, 1), 0, s, [ctypes.c_uint64(0)])
    assert _code(sim.launch_kernel, f, (1, 1, 1), (65, 1, 1), 0, s, [ctypes.c_uint64(0)]) == 1
    sim.stream_synchronize(s)


# ------------------------------------------------------------ corrupt ELFs
def _with_shoff(image: bytes, shoff: int) -> bytes:
    return image[:0x28] + struct.pack("<Q", shoff) + image[0x30:]


def test_an_elf_whose_section_table_lies_past_the_image_is_refused(sim):
    good = _cubin.link_image([("ptx", PTX + b"\0")], 90)
    sim.module_load_data(good)
    for shoff in (len(good) + 4096, len(good) - 32, 1 << 40, 1 << 63):
        assert _code(sim.module_load_data, _with_shoff(good, shoff)) == 209, shoff


# ---------------------------------------------------------- the stand-in
_CHILD = r"""
import struct, warnings
from cuda.bindings import driver as d
from gpuarray_sim import _cubin

def chk(res, code=0):
    assert int(res[0]) == code, (res, code)
    out = res[1:]
    return out[0] if len(out) == 1 else out

E, FA = d.CUresult, d.CUfunction_attribute
chk(d.cuInit(0))
assert chk(d.cuDriverGetVersion()) == 13050
dev = chk(d.cuDeviceGet(0))
ctx = chk(d.cuDevicePrimaryCtxRetain(dev))
chk(d.cuCtxSetCurrent(ctx))
PTX = PTX_TEXT + b"\0"
chk(d.cuModuleLoadData(PTX.replace(b".version 9.0", b".version 9.6")), E.CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
chk(d.cuModuleLoadData(PTX.replace(b"sm_90", b"sm_100")), E.CUDA_ERROR_INVALID_PTX)
chk(d.cuModuleLoadData(_cubin.link_image([], 100)), E.CUDA_ERROR_NO_BINARY_FOR_GPU)
chk(d.cuLibraryLoadData(PTX.replace(b".version 9.0", b".version 9.6"), [], [], 0, [], [], 0),
    E.CUDA_ERROR_UNSUPPORTED_PTX_VERSION)

# .entry functions only, in modules, libraries and the linker's output
m = chk(d.cuModuleLoadData(PTX))
f = chk(d.cuModuleGetFunction(m, b"h36b_noop"))
for name in (b"h36b_noop_param_0", b"tile", b"helper", b"ret"):
    chk(d.cuModuleGetFunction(m, name), E.CUDA_ERROR_NOT_FOUND)
lib = chk(d.cuLibraryLoadData(PTX, [], [], 0, [], [], 0))
k = chk(d.cuLibraryGetKernel(lib, b"h36b_noop"))
chk(d.cuLibraryGetKernel(lib, b"tile"), E.CUDA_ERROR_NOT_FOUND)
J = d.CUjitInputType
state = chk(d.cuLinkCreate(0, [], []))
chk(d.cuLinkAddData(state, J.CU_JIT_INPUT_PTX, PTX, len(PTX), b"k.ptx", 0, [], []))
chk(d.cuLinkAddData(state, J.CU_JIT_INPUT_PTX, PTX.replace(b"sm_90", b"sm_100"), len(PTX) + 1,
                    b"new.ptx", 0, [], []), E.CUDA_ERROR_INVALID_PTX)
cubin, size = chk(d.cuLinkComplete(state))
linked = chk(d.cuModuleLoadData(cubin))
chk(d.cuModuleGetFunction(linked, b"h36b_noop"))
chk(d.cuModuleGetFunction(linked, b"h36b_noop_param_0"), E.CUDA_ERROR_NOT_FOUND)
chk(d.cuLinkDestroy(state))

# static shared memory, the dynamic limit and the opt-in
assert chk(d.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f)) == 1024
assert chk(d.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f)) == 48 * 1024 - 1024
assert chk(d.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_PTX_VERSION, f)) == 90
optin = chk(d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev))
s = chk(d.cuStreamCreate(0))
import ctypes
arg = ctypes.c_uint64(0)
args = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
launch = lambda smem: d.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, smem, s, ctypes.addressof(args), 0)
chk(launch(48 * 1024 - 1024))
chk(launch(48 * 1024 - 1023), E.CUDA_ERROR_INVALID_VALUE)
MAXDYN = FA.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
chk(d.cuFuncSetAttribute(f, MAXDYN, optin - 1023), E.CUDA_ERROR_INVALID_VALUE)
chk(d.cuFuncSetAttribute(f, MAXDYN, optin - 1024))
assert chk(d.cuFuncGetAttribute(MAXDYN, f)) == optin - 1024
chk(launch(optin - 1024))                      # within the opt-in: it runs
chk(launch(optin - 1023), E.CUDA_ERROR_INVALID_VALUE)
chk(d.cuStreamSynchronize(s))

# a device that does not exist
chk(d.cuKernelGetAttribute(FA.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k, 7), E.CUDA_ERROR_INVALID_DEVICE)
chk(d.cuKernelSetAttribute(MAXDYN, 0, k, 7), E.CUDA_ERROR_INVALID_DEVICE)
chk(d.cuKernelSetCacheConfig(k, d.CUfunc_cache.CU_FUNC_CACHE_PREFER_NONE, 7), E.CUDA_ERROR_INVALID_DEVICE)
assert chk(d.cuKernelGetAttribute(FA.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k, dev)) == 1024

# corrupt ELF headers: refused, the process lives on
good = _cubin.link_image([("ptx", PTX)], 90)
chk(d.cuModuleLoadData(good))
for shoff in (len(good) + 4096, 1 << 40, (1 << 64) - 64):
    bad = good[:0x28] + struct.pack("<Q", shoff) + good[0x30:]
    chk(d.cuModuleLoadData(bad), E.CUDA_ERROR_NO_BINARY_FOR_GPU)
# a bare header with one section 200 KB past it loaded before; 1 GiB past it crashed
hdr = bytearray(64); hdr[0:7] = b"\x7fELF\x02\x01\x01"
struct.pack_into("<HHI", hdr, 16, 2, 190, 1)
struct.pack_into("<HHHHHH", hdr, 0x34, 64, 0, 0, 64, 1, 0)
for shoff in (200000, 1 << 30):
    struct.pack_into("<Q", hdr, 0x28, shoff)
    chk(d.cuModuleLoadData(bytes(hdr) + bytes(64)), E.CUDA_ERROR_NO_BINARY_FOR_GPU)
print("OK")
"""


def test_module_rules_over_the_stand_in(folder):  # noqa: F811
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")
    code = ("from gpuarray_sim import kernels as sim_kernels\n"
            "from sim.tests.backend.test_image_rules import _Noop\n"
            "sim_kernels.register('h36b_noop', _Noop())\n"
            f"PTX_TEXT = {PTX!r}\n" + _CHILD)
    res = run(folder, code)
    ok(res)
    assert "Traceback" not in res.stderr, res.stderr
