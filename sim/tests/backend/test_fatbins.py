"""Fatbins as nvcc writes them, and PTX calling a function nothing defines (issue 45, item 4).

- nvcc 13's fatbins (``fatbins/``, made by the commands in its README) load:
  uncompressed, ZSTD (CUDA 13's default) and LZ4 members; a driver loads
  one member -- the simulator the newest PTX the device can JIT -- where the
  stand-in linked every PTX member into one program ("defined twice") and
  could not read a compressed one;
- a fatbin with no member for the device is ``NO_BINARY_FOR_GPU``; one
  whose chosen member cannot be decompressed here is ``INVALID_IMAGE``
  naming the compression, never a crash;
- PTX loaded alone that calls an ``.extern .func`` it does not define is
  refused at load (``NO_BINARY_FOR_GPU``, "Unresolved extern function"), as
  a driver's JIT refuses it; the functions the simulator provides
  (``vprintf``, ``malloc``, the device runtime's) and those a link resolves
  keep working.
"""

from __future__ import annotations

import ctypes
import pathlib
import shutil
import subprocess

import numpy as np
import pytest
from gpuarray_sim import SimBackend, _cubin, _fatbin, _images
from gpuarray_sim._cubin import BinaryError

from gpuarray.errors import CudaError

HERE = pathlib.Path(__file__).parent / "fatbins"


def fixture(name: str) -> bytes:
    return (HERE / name).read_bytes()


def sim_on(cc: tuple[int, int] = (9, 0)) -> SimBackend:
    b = SimBackend(compute_capability=(cc,))
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    return b


@pytest.fixture
def sim():
    return sim_on()


def _code(fn, *args):
    with pytest.raises(CudaError) as e:
        fn(*args)
    return e.value.code, str(e.value)


def _zstd_readable() -> bool:
    try:
        _fatbin.zstd_frame(b"", 0)
    except BinaryError as e:
        return "no ZSTD decoder" not in str(e)
    return True


needs_zstd = pytest.mark.skipif(not _zstd_readable(), reason="no ZSTD decoder here (Python 3.14's "
                                "compression.zstd, zstandard or libzstd): ZSTD members are refused")


def _ran(b: SimBackend, module: int) -> list[int]:
    """Launch ``fb_arch`` on 4 zeros; what it added (the architecture its code was built for)."""
    f = b.module_get_function(module, "fb_arch")
    a = b.mem_alloc(16)
    b.memset_d8_async(a, 0, 16, 0)
    b.launch_kernel(f, (1, 1, 1), (4, 1, 1), 0, 0, [ctypes.c_uint64(a)])
    out = np.zeros(4, np.int32)
    b.memcpy_dtoh_async(out.ctypes.data, a, 16, 0)
    b.ctx_synchronize()
    return out.tolist()


# ----------------------------------------------------------------- reading
def test_the_members_nvcc_writes_are_read_with_their_kinds_and_compression():
    kinds = {name: [(m.label, m.compression) for m in _fatbin.read_fatbin(fixture(name))]
             for name in ("ptx80_90.fatbin", "ptx80_90_zstd.fatbin", "ptx80_90_lz4.fatbin",
                          "sass80_90_ptx80.fatbin", "sass90_zstd.fatbin", "ptx90a.fatbin")}
    assert kinds == {
        "ptx80_90.fatbin": [("PTX compute_80", ""), ("PTX compute_90", "")],
        "ptx80_90_zstd.fatbin": [("PTX compute_80", "ZSTD"), ("PTX compute_90", "ZSTD")],
        "ptx80_90_lz4.fatbin": [("PTX compute_80", "LZ4"), ("PTX compute_90", "LZ4")],
        "sass80_90_ptx80.fatbin": [("PTX compute_80", "ZSTD"), ("cubin sm_80", ""),
                                   ("cubin sm_90", "")],
        "sass90_zstd.fatbin": [("cubin sm_90", "ZSTD")],
        "ptx90a.fatbin": [("PTX compute_90a", "ZSTD")],
    }


def test_lz4_members_decode_to_the_uncompressed_ones():
    plain = [m.payload() for m in _fatbin.read_fatbin(fixture("ptx80_90.fatbin"))]
    lz4 = [m.payload() for m in _fatbin.read_fatbin(fixture("ptx80_90_lz4.fatbin"))]
    assert [p.split(b"\0")[0] for p in lz4] == [p.split(b"\0")[0] for p in plain]
    assert b".target sm_80" in lz4[0] and b".target sm_90" in lz4[1]


@needs_zstd
def test_zstd_members_decode_to_the_uncompressed_ones():
    plain = [m.payload() for m in _fatbin.read_fatbin(fixture("ptx80_90.fatbin"))]
    zstd = [m.payload() for m in _fatbin.read_fatbin(fixture("ptx80_90_zstd.fatbin"))]
    assert [p.split(b"\0")[0] for p in zstd] == [p.split(b"\0")[0] for p in plain]
    (cubin,) = _fatbin.read_fatbin(fixture("sass90_zstd.fatbin"))
    assert cubin.payload().startswith(b"\x7fELF")


def test_the_lz4_decoder_follows_the_block_format():
    # literals "ab", then a match 2 back of 6 bytes (overlapping: repeats "ab"), then "c"
    block = bytes([0x22]) + b"ab" + bytes([2, 0]) + bytes([0x10]) + b"c"
    assert _fatbin.lz4_block(block, 9) == b"abababab" + b"c"
    with pytest.raises(BinaryError, match="back"):
        _fatbin.lz4_block(bytes([0x10]) + b"a" + bytes([5, 0]), 8)   # before the output's start
    with pytest.raises(BinaryError, match="declared"):
        _fatbin.lz4_block(block, 12)
    with pytest.raises(BinaryError, match="past the input"):
        _fatbin.lz4_block(bytes([0x50]) + b"ab", 5)


def test_a_corrupt_member_header_is_refused_not_read_past(sim):
    image = bytearray(fixture("ptx80_90_lz4.fatbin"))
    image[16 + 8:16 + 16] = (1 << 40).to_bytes(8, "little")  # the first member's stored size
    code, msg = _code(sim.module_load_data, bytes(image))
    assert code == 209 and "ends past the fatbin" in msg
    image = bytearray(fixture("ptx80_90_lz4.fatbin"))
    for block in (16 + 80, 16 + 80 + 304 + 80):   # each member's first LZ4 match: 64 KiB back
        assert image[block:block + 4] == b"\x13\n\x01\x00"
        image[block + 2:block + 4] = b"\xff\xff"
    code, msg = _code(sim.module_load_data, bytes(image))
    assert code == 200 and "LZ4" in msg, msg   # INVALID_IMAGE, naming the compression


def test_an_unreadable_compression_is_invalid_image_naming_it(sim, monkeypatch):
    monkeypatch.setattr(_fatbin, "_ZSTD_DECODER", ["no ZSTD decoder is installed (test)"])
    _images.fatbin_member.cache_clear()
    code, msg = _code(sim.module_load_data, fixture("ptx80_90_zstd.fatbin"))
    assert code == 200 and "ZSTD" in msg and "PTX compute_90" in msg, msg
    _images.fatbin_member.cache_clear()


# ------------------------------------------------------------ member choice
@pytest.mark.parametrize("name", ["ptx80_90.fatbin", "ptx80_90_lz4.fatbin",
                                  pytest.param("ptx80_90_zstd.fatbin", marks=needs_zstd)])
def test_the_newest_ptx_the_device_can_jit_is_the_one_loaded(name):
    # before: every PTX member linked into one program ("defined twice"), compressed ones unread
    b = sim_on((9, 0))
    assert _ran(b, b.module_load_data(fixture(name))) == [90] * 4
    b = sim_on((8, 6))                       # an sm_86 device JITs the compute_80 PTX
    assert _ran(b, b.module_load_data(fixture(name))) == [80] * 4


@needs_zstd
def test_ptx_is_run_where_a_gpu_would_run_the_cubin():
    # an sm_90 GPU runs the sm_90 cubin (adds 90); the simulator executes PTX, never SASS, so it
    # runs the compute_80 PTX (adds 80): code that reads __CUDA_ARCH__ sees the PTX's (documented)
    b = sim_on((9, 0))
    m = b.module_load_data(fixture("sass80_90_ptx80.fatbin"))
    assert b.function_ptx_arch(b.module_get_function(m, "fb_arch")) == 80
    assert _ran(b, m) == [80] * 4


@needs_zstd
def test_only_a_cubin_for_the_device_loads_and_its_kernel_fails_at_launch_saying_why(sim):
    m = sim.module_load_data(fixture("sass90_zstd.fatbin"))   # before: NOT_FOUND (unread member)
    f = sim.module_get_function(m, "fb_arch")
    a = sim.mem_alloc(16)
    code, msg = _code(sim.launch_kernel, f, (1, 1, 1), (4, 1, 1), 0, 0, [ctypes.c_uint64(a)])
    assert code == 200 and "no PTX" in msg, msg


@needs_zstd
def test_no_member_for_the_device_is_no_binary_for_gpu():
    code, msg = _code(sim_on((9, 0)).module_load_data, fixture("ptx100.fatbin"))
    assert code == 209 and "PTX compute_100" in msg and "sm_90" in msg, msg
    code, msg = _code(sim_on((8, 0)).module_load_data, fixture("sass90_zstd.fatbin"))
    assert code == 209 and "cubin sm_90" in msg, msg
    # an architecture-specific member (compute_90a) is for sm_90 only
    b = sim_on((9, 0))
    assert _ran(b, b.module_load_data(fixture("ptx90a.fatbin"))) == [90] * 4
    code, msg = _code(sim_on((10, 0)).module_load_data, fixture("ptx90a.fatbin"))
    assert code == 209 and "compute_90a" in msg, msg
    # LTO-IR is never loaded by a driver (nvJitLink links it)
    code, msg = _code(sim_on((9, 0)).module_load_data, fixture("ltoir90.fatbin"))
    assert code == 209 and "LTO-IR compute_90" in msg, msg


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc here to remake a fixture with")
def test_nvcc_still_writes_what_the_fixtures_hold(tmp_path):
    out = tmp_path / "k.fatbin"
    subprocess.run(["nvcc", "-fatbin", "-gencode", "arch=compute_80,code=compute_80", "-gencode",
                    "arch=compute_90,code=compute_90", "-Xfatbin", "-compress-all",
                    "-compress-mode=speed", "-o", str(out), str(HERE / "fb_arch.cu")],
                   check=True, capture_output=True, timeout=300)
    made = [(m.label, m.compression, m.payload().split(b"\0")[0])
            for m in _fatbin.read_fatbin(out.read_bytes())]
    held = [(m.label, m.compression, m.payload().split(b"\0")[0])
            for m in _fatbin.read_fatbin(fixture("ptx80_90_lz4.fatbin"))]
    assert [x[:2] for x in made] == [x[:2] for x in held]
    assert all(b".entry fb_arch" in x[2] for x in made)


# --------------------------------------------------------- undefined externs
EXTERN = b"""
.version 9.0
.target sm_90
.address_size 64
.extern .func (.param .b32 r) ext_f(.param .b32 a);
.visible .entry ext_k(.param .u64 p)
{
 .reg .b32 %r<3>;
 .reg .b64 %rd<2>;
 mov.b32 %r1, 41;
 { .param .b32 a0; .param .b32 r0; st.param.b32 [a0], %r1;
   call.uni (r0), ext_f, (a0); ld.param.b32 %r2, [r0]; }
 ld.param.u64 %rd1, [p];
 st.global.u32 [%rd1], %r2;
 ret;
}
"""
DEFINES = b"""
.version 9.0
.target sm_90
.address_size 64
.visible .func (.param .b32 r) ext_f(.param .b32 a)
{
 .reg .b32 %r<3>;
 ld.param.b32 %r1, [a];
 add.s32 %r2, %r1, 1;
 st.param.b32 [r], %r2;
 ret;
}
"""


def test_ptx_calling_a_function_nothing_defines_is_refused_at_load(sim):
    # before: it loaded, and its kernel failed at launch
    code, msg = _code(sim.module_load_data, EXTERN + b"\0")
    assert code == 209 and "Unresolved extern function 'ext_f'" in msg, msg
    # declared and never used: nothing to resolve
    unused = EXTERN.replace(b"call.uni (r0), ext_f, (a0);", b"")
    sim.module_load_data(unused + b"\0")


def test_what_a_link_or_the_simulator_defines_still_loads(sim):
    m = sim.module_load_data(_images_linked([EXTERN, DEFINES]))
    f = sim.module_get_function(m, "ext_k")
    a = sim.mem_alloc(4)
    sim.launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, 0, [ctypes.c_uint64(a)])
    out = np.zeros(1, np.int32)
    sim.memcpy_dtoh_async(out.ctypes.data, a, 4, 0)
    sim.ctx_synchronize()
    assert out.tolist() == [42]
    # malloc/free and vprintf are the simulator's own
    own = (b".version 9.0\n.target sm_90\n.address_size 64\n"
           b".extern .func (.param .b64 r) malloc(.param .b64 n);\n"
           b".extern .func free(.param .b64 p);\n"
           b".visible .entry own_k()\n{\n .reg .b64 %rd<3>;\n"
           b" { .param .b64 n; .param .b64 r; st.param.b64 [n], 16;\n"
           b"   call.uni (r), malloc, (n); ld.param.b64 %rd1, [r]; }\n"
           b" { .param .b64 p; st.param.b64 [p], %rd1; call.uni free, (p); }\n ret;\n}\n\0")
    sim.module_get_function(sim.module_load_data(own), "own_k")


def _images_linked(texts: list[bytes]) -> bytes:
    return _cubin.link_image([("ptx", t + b"\0") for t in texts], 90)
