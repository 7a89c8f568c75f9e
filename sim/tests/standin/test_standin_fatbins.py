"""Fatbins and undefined functions through the real cuda.bindings over the stand-in (issue 45).

- the ``__fatBinC_Wrapper_t`` that code registered by the CUDA runtime hands
  the driver is followed to its fatbin by ``cuModuleLoadFatBinary``,
  ``cuModuleLoadData`` and ``cuLibraryLoadData`` (it was read as PTX text:
  ``INVALID_PTX``);
- a fatbin given to the linker (``CU_JIT_INPUT_FATBINARY``) adds one
  member, the one chosen for the device (every PTX member was linked:
  "defined twice");
- a link whose PTX calls a function no input defines fails at
  ``cuLinkComplete`` with "Undefined reference" in ``CU_JIT_ERROR_LOG_BUFFER``,
  a lone PTX image at ``cuModuleLoadDataEx`` with "Unresolved extern
  function" in its log; the same call with the defining PTX linked runs.

The fatbins are ``sim/tests/backend/fatbins/`` (made by nvcc 13.0).
"""

from __future__ import annotations

import pathlib
import textwrap

from sim.tests.backend.test_fatbins import DEFINES, EXTERN
from sim.tests.standin.test_standin import BINDINGS_PRELUDE, folder, ok, run  # noqa: F401  (the module-scoped fixture)

FATBINS = pathlib.Path(__file__).parent.parent / "backend" / "fatbins"

PRELUDE = BINDINGS_PRELUDE + """
def ran(f, n=4):
    out = chk(d.cuMemAlloc(4 * n)); chk(d.cuMemsetD8(out, 0, 4 * n))
    x = ctypes.c_uint64(int(out)); args = (ctypes.c_void_p * 1)(ctypes.addressof(x))
    chk(d.cuLaunchKernel(f, 1, 1, 1, n, 1, 1, 0, 0, ctypes.addressof(args), 0))
    host = (ctypes.c_int * n)(); chk(d.cuMemcpyDtoH(ctypes.addressof(host), out, 4 * n))
    return list(host)
"""


def test_the_runtime_wrapper_is_followed_to_its_fatbin(folder):  # noqa: F811
    fatbin = (FATBINS / "ptx80_90_lz4.fatbin").read_bytes()
    ok(run(folder, PRELUDE + textwrap.dedent(f"""
        fatbin = ctypes.create_string_buffer({fatbin!r}, {len(fatbin)})
        class Wrapper(ctypes.Structure):   # __fatBinC_Wrapper_t of fatbinary_section.h
            _fields_ = [("magic", ctypes.c_int), ("version", ctypes.c_int),
                        ("data", ctypes.c_void_p), ("filename_or_fatbins", ctypes.c_void_p)]
        w = Wrapper(0x466243B1, 1, ctypes.addressof(fatbin), None)
        at = ctypes.addressof(w)
        for m in (chk(d.cuModuleLoadFatBinary(at)), chk(d.cuModuleLoadData(at))):
            assert ran(chk(d.cuModuleGetFunction(m, b"fb_arch"))) == [90] * 4
        lib = chk(d.cuLibraryLoadData(at, None, None, 0, None, None, 0))
        assert ran(chk(d.cuKernelGetFunction(chk(d.cuLibraryGetKernel(lib, b"fb_arch"))))) == [90] * 4
        assert ran(chk(d.cuModuleGetFunction(chk(d.cuModuleLoadData(bytes(fatbin))), b"fb_arch"))) == [90] * 4
        bad = Wrapper(0x466243B1, 7, ctypes.addressof(fatbin), None)
        r = d.cuModuleLoadFatBinary(ctypes.addressof(bad))
        assert r[0] == d.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU, r
        text = ctypes.create_string_buffer(b"not a fatbin at all")
        not_fatbin = Wrapper(0x466243B1, 1, ctypes.addressof(text), None)
        r = d.cuModuleLoadData(ctypes.addressof(not_fatbin))
        assert r[0] == d.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU, r
        print("OK")
    """)))


def test_a_fatbin_linked_adds_the_member_chosen_for_the_device(folder):  # noqa: F811
    fatbin = (FATBINS / "ptx80_90.fatbin").read_bytes()
    ok(run(folder, PRELUDE + textwrap.dedent(f"""
        fatbin = {fatbin!r}
        state = chk(d.cuLinkCreate(0, [], []))
        chk(d.cuLinkAddData(state, d.CUjitInputType.CU_JIT_INPUT_FATBINARY, fatbin, len(fatbin),
                            b"fb_arch.fatbin", 0, [], []))
        cubin, size = chk(d.cuLinkComplete(state))
        m = chk(d.cuModuleLoadData(cubin))
        assert ran(chk(d.cuModuleGetFunction(m, b"fb_arch"))) == [90] * 4
        chk(d.cuLinkDestroy(state))
        print("OK")
    """)))


def test_an_undefined_function_fails_the_link_and_the_load_with_a_log(folder):  # noqa: F811
    texts = (EXTERN + b"\0", DEFINES + b"\0")
    ok(run(folder, PRELUDE + textwrap.dedent(f"""
        EXTERN, DEFINES = {texts!r}
        opts = [d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER,
                d.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
        log = bytes(1024)   # cuda.bindings passes the bytes' buffer, which the driver fills
        state = chk(d.cuLinkCreate(2, opts, [log, 1024]))
        chk(d.cuLinkAddData(state, d.CUjitInputType.CU_JIT_INPUT_PTX, EXTERN, len(EXTERN),
                            b"ext.ptx", 0, [], []))
        r = d.cuLinkComplete(state)
        assert r[0] == d.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU, r
        assert log.split(b"\\0")[0] == b"error   : Undefined reference to 'ext_f' in 'ext.ptx'", log
        chk(d.cuLinkDestroy(state))
        # the same PTX with the one that defines ext_f: links, loads and runs
        state = chk(d.cuLinkCreate(0, [], []))
        for name, text in ((b"ext.ptx", EXTERN), (b"def.ptx", DEFINES)):
            chk(d.cuLinkAddData(state, d.CUjitInputType.CU_JIT_INPUT_PTX, text, len(text), name,
                                0, [], []))
        cubin, size = chk(d.cuLinkComplete(state))
        assert ran(chk(d.cuModuleGetFunction(chk(d.cuModuleLoadData(cubin)), b"ext_k")), 1) == [42]
        # loaded alone: refused by the load, saying so in the JIT's error log
        log2 = bytes(1024)
        r = d.cuModuleLoadDataEx(EXTERN, 2, opts, [log2, 1024])
        assert r[0] == d.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU, r
        assert b"Unresolved extern function 'ext_f'" in log2.split(b"\\0")[0], log2
        log3 = bytes(64)
        r = d.cuLibraryLoadData(EXTERN, opts, [log3, 16], 2, None, None, 0)
        assert r[0] == d.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU, r
        assert len(log3.split(b"\\0")[0]) == 15, log3    # capped at the size given, NUL included
        print("OK")
    """)))
