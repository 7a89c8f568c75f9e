"""PTX run end to end on the simulator: NVRTC's kernels/ and saxpy, numba-cuda kernels, faults.

Each program goes through ``cuModuleLoadData`` and ``cuLaunchKernel`` of the
simulator (translated to C++, built, run on the fiber runtime); results are
compared with NumPy and, for ``kernels/``, byte for byte with the host
build of the same kernels.  The PTX samples are compiler output of our own
test kernels (``sim/tests/ptx/fixtures``: NVRTC 13 for compute_90, numba-cuda
0.30.4 ``compile_ptx(..., cc=(9, 0))``).
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
from gpuarray_sim import ptx
from gpuarray_sim._images import PLACEHOLDER

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from gpuarray.errors import CudaError
from sim.tests.ptx.fixtures.kernel_cases import CASES
from sim.tests.ptx.support import HEAD, download, fixture, launch, u64, upload
from sim.tests.standin.test_standin import folder, ok, run  # noqa: F401  (the module-scoped fixture)

# every test once per tier: translated and built, and interpreted (conftest.py)
pytestmark = pytest.mark.usefixtures("ptx_tier")


def _entry(text: str) -> str:
    return next(iter(ptx.parse(text).entries))


def _numba_array(b, a: np.ndarray) -> tuple[list, int]:
    """numba-cuda's seven parameters of a 1-d array (meminfo, parent, nitems, itemsize,
    data, shape, strides) and the device copy's address."""
    d = upload(b, a)
    return [u64(0), u64(0), u64(a.size), u64(a.itemsize), u64(d), u64(a.size),
            u64(a.itemsize)], d


def _run_numba(b, name, arrays, grid=(1, 1, 1), block=(32, 1, 1), shared=0):
    params, ptrs = [], []
    for a in arrays:
        p, d = _numba_array(b, a)
        params += p
        ptrs.append(d)
    text = fixture(name)
    launch(b, text, _entry(text), params, grid=grid, block=block, shared=shared)
    return [download(b, d, a.size, a.dtype) for d, a in zip(ptrs, arrays, strict=True)]


# ------------------------------------------------------------ NVRTC's PTX
def test_saxpy(b):
    n = 1000
    x = np.linspace(-3, 3, n, dtype=np.float32)
    y = np.arange(n, dtype=np.float32)
    dx, dy = upload(b, x), upload(b, y)
    launch(b, fixture("saxpy"), "saxpy", [ctypes.c_float(2.5), u64(dx), u64(dy),
                                          ctypes.c_int32(n)], grid=(4, 1, 1), block=(256, 1, 1))
    # fma.rn.f32: one rounding of a*x+y
    want = (np.float64(2.5) * x.astype(np.float64) + y).astype(np.float32)
    assert np.array_equal(download(b, dy, n, np.float32), want)


def _extent(shape, strides, itemsize):
    return sum((s - 1) * abs(st) for s, st in zip(shape, strides, strict=True)) + itemsize


def _random(dtype, n, rng):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_)
    if dt.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
    return (rng.standard_normal(n) * 100).astype(dt)


@pytest.mark.parametrize("case", list(CASES))
def test_kernels_from_nvrtc_ptx_match_the_host_build(b, case):
    """kernels/ from exactly the PTX NVRTC makes: byte for byte what the host build gives."""
    from gpuarray._kernels import _launch, _plan

    kind, dt, shape, dst_strides, st, src = CASES[case]
    rng = np.random.default_rng(7)
    dbytes = _extent(shape, dst_strides, np.dtype(dt).itemsize)
    dsts = [b.mem_alloc(dbytes) for _ in range(2)]
    for d in dsts:
        b.memset_d8_async(d, 0xAB, dbytes, 1)
    if kind == "fill":
        ops = [_plan.plan_fill(d, dst_strides, dt, shape, src) for d in dsts]
    else:
        sbytes = _extent(shape, src, np.dtype(st).itemsize)
        host = _random(st, sbytes // np.dtype(st).itemsize, rng)
        sp = upload(b, host)
        ops = [_plan.plan_copy(d, dst_strides, dt, sp, src, st, shape) for d in dsts]
    text = fixture("nvrtc_kernels")
    renamed = text
    for op in ops[1]:
        renamed = re.sub(rf"\b{op.spec.symbol}", "ptxt_" + op.spec.symbol, renamed)
    ptx_module = b.module_load_data(renamed.encode() + b"\0")
    for host_op, ptx_op in zip(ops[0], ops[1], strict=True):
        assert isinstance(host_op, _plan.Launch), host_op
        block = (32, 8, 1) if host_op.spec.family == "transpose" else (256, 1, 1)
        grid = _launch.grid_for(host_op, 4)
        sym = host_op.spec.symbol
        fh = b.module_get_function(b.module_load_data(PLACEHOLDER + sym.encode() + b"\0"), sym)
        b.launch_kernel(fh, grid, block, 0, 1, [_launch.params_for(host_op)])
        fp = b.module_get_function(ptx_module, "ptxt_" + sym)
        assert isinstance(b.function_kernel(fp), ptx.PtxKernel)
        b.launch_kernel(fp, grid, block, 0, 1, [_launch.params_for(ptx_op)])
    b.ctx_synchronize()
    host_out, ptx_out = (download(b, d, dbytes, np.uint8) for d in dsts)
    assert np.array_equal(host_out, ptx_out)
    assert not np.all(ptx_out == 0xAB)


# ----------------------------------------------------------- numba's PTX
def test_numba_warp_shuffle_reduction_and_atomics(b):
    a = np.arange(128, dtype=np.float32) * 0.5
    (_, out) = _run_numba(b, "numba_warp_reduce", [a, np.zeros(1, np.float32)],
                          grid=(2, 1, 1), block=(64, 1, 1))
    assert out[0] == a.sum()


def test_numba_shared_memory_histogram(b):
    data = (np.arange(1000, dtype=np.int32) * 7919) % 1000
    (_, hist) = _run_numba(b, "numba_shared_hist", [data, np.zeros(16, np.int32)],
                           grid=(4, 1, 1), block=(256, 1, 1))
    assert np.array_equal(hist, np.bincount(data % 16, minlength=16))


def test_numba_votes_match_and_activemask(b):
    a = np.array([1, -1, 2, 2, 0, 5] * 5 + [3, 3], np.int32)
    (_, out) = _run_numba(b, "numba_votes", [a, np.zeros(32, np.uint32)])
    p = a > 0
    ballot = sum(1 << i for i in range(32) if p[i])
    want = [ballot ^ (int(p.all()) << 1) ^ (int(p.any()) << 2)
            ^ sum(1 << j for j in range(32) if a[j] == a[i]) ^ 0xFFFFFFFF for i in range(32)]
    assert out.tolist() == want


def test_numba_dynamic_shared_and_barrier_reduction(b):
    a = np.arange(16, dtype=np.float64)
    (_, out) = _run_numba(b, "numba_dynamic_shared", [a, np.zeros(16)], block=(16, 1, 1),
                          shared=16 * 8)
    # reversed through shared memory, plus syncthreads_count(t > 3) == 12
    assert np.array_equal(out, (a * 2)[::-1] + 12)


def test_numba_dynamic_shared_beyond_the_launch_size_is_700(b):
    with pytest.raises(CudaError) as e:
        _run_numba(b, "numba_dynamic_shared", [np.arange(16.0), np.zeros(16)],
                   block=(16, 1, 1), shared=8 * 8)
    assert e.value.code == 700 and "st.shared.f64" in str(e.value)


def test_dynamic_shared_up_to_the_opt_in(b):
    """A PTX kernel opted in to 96 KiB of dynamic shared memory launches with 64 KiB (a 48 KiB
    limit hard-coded for PTX kernels refused it: INVALID_VALUE); past the opt-in is refused."""
    text = fixture("numba_dynamic_shared")
    mod = b.module_load_data(text.encode() + b"\0")
    f = b.module_get_function(mod, _entry(text))
    b.function_set_max_dynamic_shared(f, 96 << 10)
    a = np.arange(1024, dtype=np.float64)
    pa, _da = _numba_array(b, a)
    po, do = _numba_array(b, np.zeros(1024))
    with pytest.raises(CudaError) as e:
        b.launch_kernel(f, (1, 1, 1), (1024, 1, 1), (96 << 10) + 8, 1, pa + po)
    assert e.value.code == 1  # past the opt-in: INVALID_VALUE
    b.launch_kernel(f, (1, 1, 1), (1024, 1, 1), 64 << 10, 1, pa + po)
    b.ctx_synchronize()
    assert np.array_equal(download(b, do, 1024, np.float64), (a * 2)[::-1] + 1020)


def test_numba_local_array(b):
    a = np.arange(10, dtype=np.int64) - 3
    (_, out) = _run_numba(b, "numba_local", [a, np.zeros(10, np.int64)], block=(10, 1, 1))
    assert out.tolist() == [sum(int(a[i]) * ((k * 3 + i) % 8) for k in range(8))
                            for i in range(10)]


def test_numba_constant_memory(b):
    (out,) = _run_numba(b, "numba_const", [np.zeros(16, np.float32)], block=(16, 1, 1))
    assert np.array_equal(out, np.tile(np.arange(8, dtype=np.float32) * 2, 2))


def test_numba_atomic_operations(b):
    a = np.array([5, -3, 12, 7], np.int32)
    out = np.array([-100, 100, 0, 0, 0, -1, 0, 0], np.int32)
    (_, got) = _run_numba(b, "numba_atomics", [a, out], block=(4, 1, 1))
    assert got[0] == 12 and got[1] == -3 and got[3] == 5 and got[4] in a
    assert got[5] == (-1 & 5 & -3 & 12 & 7) and got[6] == (5 | -3 | 12 | 7)
    assert got[7] == (5 ^ -3 ^ 12 ^ 7)


def test_numba_printf_is_written_at_the_launch_end(b, capfd):
    _run_numba(b, "numba_printf", [np.array([1.5, 2.5, 3.5])], block=(4, 1, 1))
    assert capfd.readouterr().out.splitlines() == ["thread 0 value 1.500000",
                                                  "thread 1 value 2.500000"]


def test_printf_length_modifiers_and_star_width_precision(b, capfd):
    """NVRTC's printf with ``h``/``hh``/``l``/``ll``/``z`` and ``*`` width and precision
    (fixtures/nvrtc_printf.ptx, of ``printf("h:%hd %hx %hu hh:%hhd w:[%*d] p:[%.*f]
    [%-*.*f] l:%ld %llx z:%zu c:%c\\n", ...)``): as a GPU prints it.  ``*`` ended the
    launch with 719 and ``h`` was ignored (65541 printed as 65541, a GPU prints 5)."""
    a = np.array([65541, 70000, 385, 6, 42, 3, 9, 2], np.int32)
    launch(b, fixture("nvrtc_printf"), "k", [u64(upload(b, a))])
    assert capfd.readouterr().out == ("h:5 5 4464 hh:-127 w:[    42] p:[0.667] [0.33     ] "
                                      "l:65541000000000 ffffffffffffffff z:42 c:Z\n")


def test_numba_math_calls_a_func_with_param_sequences(b):
    x = np.array([0.5, 1.0, 2.0, 7.25], np.float32)
    (_, out) = _run_numba(b, "numba_math", [x, np.zeros(4, np.float32)], block=(4, 1, 1))
    x64 = x.astype(np.float64)
    want = np.sqrt(x64) + np.exp(x64) + np.sin(x64) + np.log(x64 + 1) + x64 ** 1.5
    assert np.allclose(out, want, rtol=3e-7)


def test_numba_atomic_inc_dec_and_cas_on_a_view(b):
    (_, out) = _run_numba(b, "numba_atom_incdec", [np.arange(1, 33, dtype=np.uint32),
                                                   np.array([0, 3, 0], np.uint32)])
    # 32 increments wrapping after 7; 32 decrements from 3 wrapping to 7; the first CAS wins
    assert out[0] == 32 % 8 and out[1] == 3 and out[2] in range(1, 33)


def test_numba_f64_shuffles_up_xor_idx(b):
    a = np.arange(32, dtype=np.float64) * 1.5
    (_, out) = _run_numba(b, "numba_shfl_f64", [a, np.zeros(32)])
    lane = np.arange(32)
    up = np.where(lane >= 1, a[np.maximum(lane - 1, 0)], a)
    assert np.array_equal(out, up + 2 * a[lane ^ 3] + 3 * a[5])


def test_numba_integer_and_bit_operations(b):
    x = np.array([-100, -7, -1, 0, 1, 5, 99, 2**40] + list(range(24)), np.int64)
    (_, out) = _run_numba(b, "numba_int_ops", [x, np.zeros(32, np.int64)])
    assert out.tolist() == [(v // 7) + (v % 5) + (v >> 2) + (v << 3) + (v ^ 0x55)
                            + int(float(v) * 0.3) + min(v, 3) + max(v, -3) + abs(v)
                            for v in x.tolist()]
    u = np.array([0, 1, 0x80000000, 0xFFFFFFFF] + list(range(5, 33)), np.uint32)
    (_, bits) = _run_numba(b, "numba_bit_ops", [u, np.zeros(32, np.uint32)])
    assert bits.tolist() == [(bin(v).count("1") + 32 - v.bit_length() + (v & -v).bit_length()
                              + int(f"{v:032b}"[::-1], 2)) % 2**32 for v in u.tolist()]


def test_numba_match_all_and_lanemask(b):
    (_, out) = _run_numba(b, "numba_match_all", [np.full(32, 4, np.int32),
                                                np.zeros(32, np.uint32)])
    assert out.tolist() == [(0xFFFFFFFF + 1 + (1 << i) - 1) % 2**32 for i in range(32)]
    a = np.full(32, 4, np.int32)
    a[7] = 5
    (_, out) = _run_numba(b, "numba_match_all", [a, np.zeros(32, np.uint32)])
    assert out.tolist() == [(1 << i) - 1 for i in range(32)]


def test_numba_f64_math_on_2d_arrays(b):
    a = np.random.default_rng(3).random((5, 7))
    out = np.zeros((5, 7))
    params, ptrs = [], []
    for x in (a, out):
        d = upload(b, x)
        params += [u64(0), u64(0), u64(x.size), u64(8), u64(d)] + [u64(s) for s in x.shape]
        params += [u64(s) for s in x.strides]
        ptrs.append(d)
    text = fixture("numba_math_f64_2d")
    launch(b, text, _entry(text), params, block=(8, 8, 1))
    got = download(b, ptrs[1], 35, np.float64).reshape(5, 7)
    want = a ** 1.5 + np.exp(a) + np.log1p(a) + np.arctan2(a, 2.0) + np.tanh(a)
    assert np.allclose(got, want, rtol=1e-14)


# ------------------------------------------------- functions and globals
RECURSION = HEAD + """
.func (.param .b64 r) fact(.param .b64 n)
{
  .local .align 8 .b8 depot[8];
  .reg .b64 %n, %m, %s; .reg .pred %p; .reg .b64 %l;
  ld.param.b64 %n, [n];
  mov.u64 %l, depot;
  st.local.u64 [%l], %n;
  setp.le.u64 %p, %n, 1;
  @%p mov.u64 %n, 1;
  @%p bra DONE;
  sub.u64 %m, %n, 1;
  { .param .b64 a; .param .b64 ret;
    st.param.b64 [a], %m;
    call (ret), fact, (a);
    ld.param.b64 %s, [ret]; }
  ld.local.u64 %n, [%l];
  mul.lo.u64 %n, %n, %s;
DONE:
  st.param.b64 [r], %n;
  ret;
}
.global .align 8 .u64 calls = 5;
.global .align 8 .u64 where = generic(calls);
.visible .entry facts(.param .u64 out)
{
  .reg .b64 %o, %v, %k, %g; .reg .b32 %t;
  ld.param.u64 %o, [out];
  mov.u32 %t, %tid.x;
  cvt.u64.u32 %k, %t;
  { .param .b64 a; .param .b64 ret;
    st.param.b64 [a], %k;
    call (ret), fact, (a);
    ld.param.b64 %v, [ret]; }
  mul.wide.u32 %k, %t, 8;
  add.s64 %o, %o, %k;
  st.global.u64 [%o], %v;
  ld.global.u64 %g, [where];
  atom.global.add.u64 %v, [%g], 1;
  ret;
}
"""


def test_recursive_func_calls_with_local_frames_and_module_globals(b):
    out = b.mem_alloc(8 * 21)
    module = launch(b, RECURSION, "facts", [u64(out)], block=(21, 1, 1))
    import math

    assert download(b, out, 21, np.uint64).tolist() == [math.factorial(i) for i in range(21)]
    addr, size = b.module_get_global(module, "calls")
    assert size == 8 and download(b, addr, 1, np.uint64)[0] == 5 + 21
    waddr, _ = b.module_get_global(module, "where")
    assert download(b, waddr, 1, np.uint64)[0] == addr  # generic(calls) relocated
    # the host writes the variable (as numba's module init does); the kernel sees it
    b.memcpy_htod_async(addr, np.array([100], np.uint64).ctypes.data, 8, 1)
    launch(b, RECURSION, "facts", [u64(out)], block=(1, 1, 1), module=module)
    assert download(b, addr, 1, np.uint64)[0] == 101
    with pytest.raises(CudaError) as e:
        b.module_get_global(module, "nothing")
    assert e.value.name == "CUDA_ERROR_NOT_FOUND"


# ----------------------------------------------------------------- faults
def test_out_of_bounds_store_in_a_numba_kernel_is_700_naming_the_instruction(b):
    text = fixture("numba_warp_reduce")
    a = upload(b, np.ones(64, np.float32))
    out = b.mem_alloc(4)
    bad = [u64(0), u64(0), u64(64), u64(4), u64(a), u64(64), u64(4),
           u64(0), u64(0), u64(1), u64(4), u64(out + 4096), u64(1), u64(4)]
    with pytest.raises(CudaError) as e:
        launch(b, text, _entry(text), bad, block=(32, 1, 1))
    msg = str(e.value)
    assert e.value.code == 700 and f"0x{out + 4096:x}" in msg
    assert re.search(r"PTX line \d+: atom\.global\.add\.f32", msg), msg
    with pytest.raises(CudaError, match="sticky"):  # the context is lost, as on a GPU
        b.mem_alloc(4)


MISALIGNED = HEAD + """
.visible .entry mis(.param .u64 p)
{
  .reg .b64 %a; .reg .b32 %v;
  ld.param.u64 %a, [p];
  ld.global.u32 %v, [%a+2];
  st.global.u32 [%a], %v;
  ret;
}
.visible .entry sh(.param .u32 i)
{
  .shared .align 4 .b8 tile[64];
  .reg .b32 %i, %v, %s;
  ld.param.u32 %i, [i];
  mov.u32 %s, tile;
  add.s32 %s, %s, %i;
  st.shared.u32 [%s], %i;
  ret;
}
.visible .entry loc(.param .u32 i)
{
  .local .align 4 .b8 d[16];
  .reg .b64 %l, %g; .reg .b32 %i;
  ld.param.u32 %i, [i];
  mov.u64 %l, d;
  cvta.local.u64 %g, %l;
  cvt.u64.u32 %l, %i;
  add.s64 %g, %g, %l;
  st.u32 [%g], %i;
  ret;
}
"""


def test_misaligned_global_access_is_716(b):
    a = upload(b, np.zeros(4, np.uint32))
    with pytest.raises(CudaError) as e:
        launch(b, MISALIGNED, "mis", [u64(a)])
    assert e.value.code == 716 and "ld.global.u32" in str(e.value)
    assert "PTX line 9" in str(e.value)


@pytest.mark.parametrize("entry, offset, code, what", [
    ("sh", 60, 0, ""), ("sh", 64, 700, "st.shared.u32"), ("sh", 2, 716, "st.shared.u32"),
    ("loc", 12, 0, ""), ("loc", 16, 700, "st.u32"), ("loc", 1, 716, "st.u32"),
])
def test_shared_and_local_windows_are_checked(b, entry, offset, code, what):
    if code == 0:
        launch(b, MISALIGNED, entry, [ctypes.c_uint32(offset)], block=(2, 1, 1))
        return
    with pytest.raises(CudaError) as e:
        launch(b, MISALIGNED, entry, [ctypes.c_uint32(offset)], block=(2, 1, 1))
    assert e.value.code == code and what in str(e.value)


UNSUPPORTED = HEAD + """
.visible .entry tex_user(.param .u64 t, .param .u64 o)
{
  .reg .b64 %t, %o; .reg .f32 %f<5>; .reg .b32 %i;
  ld.param.u64 %t, [t];
  mov.b32 %i, 0;
  tex.1d.v4.f32.s32 {%f1, %f2, %f3, %f4}, [%t, {%i}];
  ret;
}
.func helper() { .reg .f32 %f<2>; mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1}, {%f1}, {%f1}, {%f1}; ret; }
.visible .entry calls_mma() { call helper; ret; }
.visible .entry fine(.param .u64 o) { .reg .b64 %o; ld.param.u64 %o, [o];
  st.global.u32 [%o], 7; ret; }
"""


@pytest.mark.parametrize("body, what", [
    ("max.xorsign.abs.f32 %f1, %f2, %f3;", ".xorsign"),
    ("barrier.cluster.arrive;", ".cluster"),
    ("lop3.or.b32 %r1|%p1, %r2, %r3, %r4, 0x96, %p2;", "lop3.or.b32"),
    ("mov.u32 %r1, %envreg3;", "%envreg3"),
    ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%rd1], [%rd2], 16, "
     "[%rd3];", "cp.async.bulk"),
    ("wgmma.fence.sync.aligned;", "wgmma.fence"),
])
def test_unknown_forms_are_refused_not_guessed(b, body, what):
    text = HEAD + (".visible .entry k() { .reg .f32 %f<4>; .reg .b32 %r<5>; .reg .pred %p<3>;"
                   " .reg .b64 %rd<4>;\n" + body + "\nret; }")
    f = b.module_get_function(b.module_load_data(text.encode() + b"\0"), "k")
    with pytest.raises(CudaError) as e:
        b.launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, 1, [])
    assert e.value.name == "CUDA_ERROR_INVALID_IMAGE" and "PTX line 5" in str(e.value)
    assert what in str(e.value)


def test_unsupported_instructions_fail_the_launch_naming_them(b):
    module = b.module_load_data(UNSUPPORTED.encode() + b"\0")
    out = b.mem_alloc(4)
    for name, line, op in (("tex_user", 10, "tex.1d.v4.f32.s32"),
                           ("calls_mma", 13, "mma.sync")):
        f = b.module_get_function(module, name)
        with pytest.raises(CudaError) as e:
            b.launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, 1, [u64(out)] * (2 if name == "tex_user"
                                                                         else 0))
        assert e.value.name == "CUDA_ERROR_INVALID_IMAGE"
        assert f"PTX line {line}" in str(e.value) and op in str(e.value)
    # not sticky; an entry that reaches no unsupported instruction runs
    launch(b, UNSUPPORTED, "fine", [u64(out)], module=module)
    assert download(b, out, 1, np.uint32)[0] == 7


WARPS = HEAD + """
.visible .entry shfl_all(.param .u64 o)
{
  .reg .b32 %v, %t; .reg .b64 %o, %k;
  ld.param.u64 %o, [o];
  mov.u32 %t, %tid.x;
  shfl.sync.bfly.b32 %v, %t, 1, 31, -1;
  mul.wide.u32 %k, %t, 4; add.s64 %o, %o, %k;
  st.global.u32 [%o], %v;
  ret;
}
.visible .entry early_exit()
{
  .reg .b32 %t; .reg .pred %p;
  mov.u32 %t, %laneid;
  setp.eq.u32 %p, %t, 5;
  @%p exit;
  bar.warp.sync -1;
  ret;
}
.visible .entry stuck_lane()
{
  .reg .b32 %t; .reg .pred %p;
  mov.u32 %t, %laneid;
  setp.eq.u32 %p, %t, 5;
  @%p bra STUCK;
  bar.warp.sync -1;
  ret;
STUCK:
  bar.sync 0;
  ret;
}
.visible .entry counted_barrier()
{
  .reg .b32 %t; .reg .pred %p;
  mov.u32 %t, %tid.x;
  setp.ge.u32 %p, %t, 32;
  @%p bra END;
  bar.sync 1, 64;
END:
  ret;
}
"""


def test_warp_shuffle_with_partial_and_full_warps(b):
    out = b.mem_alloc(4 * 64)
    launch(b, WARPS, "shfl_all", [u64(out)], block=(64, 1, 1))
    assert download(b, out, 64, np.uint32).tolist() == [i ^ 1 for i in range(64)]
    # a full mask in a 16-thread block: lanes 16-31 were never launched, so they are
    # not members (the PTX ISA waits for "non-exited threads" of the mask; numba-cuda's
    # own tests run full-mask collectives in blocks of 10 threads on GPUs)
    out16 = b.mem_alloc(4 * 16)
    launch(b, WARPS, "shfl_all", [u64(out16)], block=(16, 1, 1))
    assert download(b, out16, 16, np.uint32).tolist() == [i ^ 1 for i in range(16)]


def test_a_lane_that_never_reaches_a_collective_is_a_fault_not_a_hang(b):
    # a lane that exited is not waited for (the PTX ISA's "non-exited threads")
    launch(b, WARPS, "early_exit", [], block=(32, 1, 1))
    b.ctx_synchronize()
    # a lane that waits elsewhere never arrives: a deadlock, reported
    with pytest.raises(CudaError) as e:
        launch(b, WARPS, "stuck_lane", [], block=(32, 1, 1))
    assert e.value.code == 719 and "deadlock" in str(e.value) and "PTX line" in str(e.value)


def test_a_barrier_nobody_completes_is_a_deadlock_fault(b):
    with pytest.raises(CudaError) as e:
        launch(b, WARPS, "counted_barrier", [], block=(64, 1, 1))
    assert e.value.code == 719 and "deadlock" in str(e.value)
    assert "bar.sync 1, 64" in str(e.value)


def test_bad_ptx_fails_the_load(b):
    with pytest.raises(CudaError) as e:
        b.module_load_data(HEAD.encode() + b".visible .entry k() { add.s32 %r1 %r2; }\0")
    assert e.value.name == "CUDA_ERROR_INVALID_PTX" and "PTX line 4" in str(e.value)
    with pytest.raises(CudaError) as e:
        b.module_load_data(b".version 99.1\n.target sm_90\n.address_size 64\n\0")
    assert e.value.name == "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"


def test_launch_checks_against_the_ptx(b):
    text = fixture("nvrtc_kernels")
    name = next(n for n in ptx.parse(text).entries if n.startswith("ga_copy"))
    renamed = text.replace(name, "ptxt_k")
    module = b.module_load_data(renamed.encode() + b"\0")
    f = b.module_get_function(module, "ptxt_k")
    with pytest.raises(CudaError) as e:  # .maxntid 256
        b.launch_kernel(f, (1, 1, 1), (512, 1, 1), 0, 1, [ctypes.c_uint8(0)])
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE" and ".maxntid" in str(e.value)
    with pytest.raises(TypeError, match="bytes"):
        b.launch_kernel(f, (1, 1, 1), (32, 1, 1), 0, 1, [ctypes.c_uint8(0)])


# ------------------------------------------------------- over the stand-in
_STANDIN_CHILD = r"""
import ctypes, numpy as np
from cuda.bindings import driver as d

def chk(res, code=0):
    assert int(res[0]) == code, res
    out = res[1:]
    return out[0] if len(out) == 1 else out

chk(d.cuInit(0))
ctx = chk(d.cuDevicePrimaryCtxRetain(chk(d.cuDeviceGet(0))))
chk(d.cuCtxSetCurrent(ctx))
m = chk(d.cuModuleLoadData(open(PTX_PATH, "rb").read() + b"\0"))
f = chk(d.cuModuleGetFunction(m, b"saxpy"))
n = 300
x = np.arange(n, dtype=np.float32)
y = np.ones(n, np.float32)
dx, dy = chk(d.cuMemAlloc(4 * n)), chk(d.cuMemAlloc(4 * n))
chk(d.cuMemcpyHtoD(dx, x.ctypes.data, 4 * n))
chk(d.cuMemcpyHtoD(dy, y.ctypes.data, 4 * n))
args = [ctypes.c_float(3.0), ctypes.c_uint64(int(dx)), ctypes.c_uint64(int(dy)), ctypes.c_int32(n)]
ptrs = (ctypes.c_void_p * 4)(*[ctypes.addressof(a) for a in args])
chk(d.cuLaunchKernel(f, 2, 1, 1, 256, 1, 1, 0, 0, ctypes.addressof(ptrs), 0))
chk(d.cuCtxSynchronize())
chk(d.cuMemcpyDtoH(y.ctypes.data, dy, 4 * n))
assert np.array_equal(y, 3 * x + 1), y[:8]
# out of bounds: the store is an illegal address, reported at the synchronisation
args[2] = ctypes.c_uint64(int(dy) + 4096 * 64)
chk(d.cuLaunchKernel(f, 2, 1, 1, 256, 1, 1, 0, 0, ctypes.addressof(ptrs), 0))
chk(d.cuCtxSynchronize(), d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS)
print("OK")
"""


def test_saxpy_over_the_standin_driver(folder):  # noqa: F811
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not "
                                                        "installed")
    from sim.tests.ptx.support import FIXTURES

    code = f"PTX_PATH = {str(FIXTURES / 'saxpy.ptx')!r}\n" + _STANDIN_CHILD
    ok(run(folder, code))


def test_function_info_comes_from_the_ptx(b):
    text = fixture("numba_shared_hist")
    f = b.module_get_function(b.module_load_data(text.encode() + b"\0"), _entry(text))
    _name, _module, _dev, sizes = b.function_info(f)
    assert sizes["shared"] == 64 and sizes["const"] == 0 and sizes["local"] == 0
    assert sizes["max_threads"] is None and sizes["ptx_version"] == 90


LINK_A = HEAD + """
.extern .func (.param .b32 r) twice(.param .b32 x);
.visible .entry use_twice(.param .u64 o)
{
  .reg .b64 %o; .reg .b32 %v;
  ld.param.u64 %o, [o];
  { .param .b32 a; .param .b32 r;
    st.param.b32 [a], 21;
    call (r), twice, (a);
    ld.param.b32 %v, [r]; }
  st.global.u32 [%o], %v;
  ret;
}
"""
LINK_B = ".version 7.8\n.target sm_80\n.address_size 64\n" + """
.weak .func (.param .b32 r) twice(.param .b32 x) { .reg .b32 %a; ld.param.b32 %a, [x];
  st.param.b32 [r], %a; ret; }
.visible .func (.param .b32 r) twice(.param .b32 x) { .reg .b32 %a; ld.param.b32 %a, [x];
  add.s32 %a, %a, %a; st.param.b32 [r], %a; ret; }
"""


def test_linked_modules_resolve_declarations_to_definitions(b):
    alone = ptx.load(LINK_A)
    assert "twice" in alone.build()["unsupported"]["use_twice"]  # declared, not defined
    prog = ptx.link([LINK_A.encode() + b"\0", LINK_B])
    assert prog.module.version == (8, 0) and prog.build()["unsupported"] == {}
    out = b.mem_alloc(4)
    from gpuarray_sim.ptx._run import PtxKernel

    k = prog.kernel("use_twice")
    assert isinstance(k, PtxKernel)
    # the linked text is an image of its own: load it as the stand-in's cuLinkComplete would
    launch(b, prog.module.text, "use_twice", [u64(out)])
    assert download(b, out, 1, np.uint32)[0] == 42


def test_runaway_recursion_is_a_stack_fault_not_a_crash(b):
    out = b.mem_alloc(8)
    text = RECURSION.replace("cvt.u64.u32 %k, %t;", "mov.u64 %k, 1000000;")
    with pytest.raises(CudaError) as e:
        launch(b, text, "facts", [u64(out)])
    assert e.value.code == 714  # CUDA_ERROR_HARDWARE_STACK_ERROR


ASSERT = HEAD + """
.extern .func __assertfail(.param .b64 m, .param .b64 f, .param .b32 l, .param .b64 fn,
                           .param .b64 c);
.visible .entry asserts(.param .u32 x)
{
  .reg .b32 %x; .reg .pred %p;
  ld.param.u32 %x, [x];
  setp.eq.u32 %p, %x, 0;
  @%p bra OK;
  { .param .b64 a0; .param .b64 a1; .param .b32 a2; .param .b64 a3; .param .b64 a4;
    call __assertfail, (a0, a1, a2, a3, a4); }
OK:
  ret;
}
"""


def test_a_failed_device_assertion_is_710_naming_the_line(b):
    launch(b, ASSERT, "asserts", [ctypes.c_uint32(0)])
    with pytest.raises(CudaError) as e:
        launch(b, ASSERT, "asserts", [ctypes.c_uint32(1)])
    assert e.value.name == "CUDA_ERROR_ASSERT" and "PTX line 14: call __assertfail" in str(e.value)


BIG_LOCAL = HEAD + """
.visible .entry big_local(.param .u64 o)
{
  .local .align 8 .b8 big[200000];
  .reg .b64 %o, %l, %k, %v; .reg .b32 %t;
  ld.param.u64 %o, [o];
  mov.u32 %t, %tid.x;
  cvt.u64.u32 %v, %t;
  mov.u64 %l, big;
  st.local.u64 [%l+199992], %v;
  st.local.u64 [%l], 7;
  ld.local.u64 %k, [%l+199992];
  mul.wide.u32 %v, %t, 8; add.s64 %o, %o, %v;
  st.global.u64 [%o], %k;
  ret;
}
"""


def test_large_local_arrays_live_beyond_the_fiber_stack(b):
    out = b.mem_alloc(8 * 64)
    launch(b, BIG_LOCAL, "big_local", [u64(out)], grid=(2, 1, 1), block=(64, 1, 1))
    assert download(b, out, 64, np.uint64).tolist() == list(range(64))


def test_only_entries_are_kernels(b):
    module = b.module_load_data(RECURSION.encode() + b"\0")
    for name in ("fact", "calls", "where"):  # a .func and two variables
        with pytest.raises(CudaError) as e:
            b.module_get_function(module, name)
        assert e.value.name == "CUDA_ERROR_NOT_FOUND"
    b.module_get_function(module, "facts")


# A spin-wait on a flag another thread sets, with no barrier between: thread 0
# of each block waits (ld.volatile) for the flag the block's last thread
# stores after it, then copies the value the last thread stored first.  The
# fibers used to switch only at barriers, so thread 0 spun forever.
SPIN_WAIT = HEAD + """
.visible .entry spin_wait(.param .u64 flag, .param .u64 out, .param .u32 last)
{
    .reg .pred %p<3>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [flag];
    ld.param.u64 %rd2, [out];
    ld.param.u32 %r1, [last];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mov.u32 %r2, %tid.x;
    setp.eq.s32 %p1, %r2, %r1;
    @%p1 bra $SET;
    setp.ne.s32 %p2, %r2, 0;
    @%p2 bra $DONE;
$WAIT:
    ld.volatile.global.u32 %r3, [%rd3];
    setp.eq.s32 %p2, %r3, 0;
    @%p2 bra $WAIT;
    ld.volatile.global.u32 %r4, [%rd4+4];
    add.s32 %r4, %r4, 1;
    st.global.u32 [%rd4], %r4;
    bra $DONE;
$SET:
    mov.u32 %r5, 41;
    st.volatile.global.u32 [%rd4+4], %r5;
    mov.u32 %r5, 1;
    st.volatile.global.u32 [%rd3], %r5;
$DONE:
    ret;
}
"""


@pytest.mark.parametrize("threads", [2, 96])
def test_a_spin_wait_on_a_flag_another_thread_sets_ends(b, threads):
    flag, out = upload(b, np.zeros(1, np.uint32)), upload(b, np.zeros(2, np.uint32))
    launch(b, SPIN_WAIT, "spin_wait", [u64(flag), u64(out), ctypes.c_uint32(threads - 1)],
           block=(threads, 1, 1))
    assert download(b, out, 2, np.uint32).tolist() == [42, 41]


def test_a_spin_wait_nothing_ends_is_a_launch_timeout(b, monkeypatch):
    # `last` names no thread: the flag is never set -- 702 naming the loop
    # (test_ptx_resident.py: a flag another block sets)
    monkeypatch.setenv("GPUARRAY_SIM_LAUNCH_TIMEOUT", "0.2")
    flag, out = upload(b, np.zeros(1, np.uint32)), upload(b, np.zeros(2, np.uint32))
    with pytest.raises(CudaError) as e:
        launch(b, SPIN_WAIT, "spin_wait", [u64(flag), u64(out), ctypes.c_uint32(99)],
               block=(4, 1, 1))
    assert e.value.code == 702 and "launch timeout" in str(e.value)
    assert "@%p2 bra $WAIT" in str(e.value) and "thread (0, 0, 0)" in str(e.value)
    with pytest.raises(CudaError) as again:  # sticky, as on a GPU
        b.ctx_synchronize()
    assert again.value.code == 702


# Forms of numba-cuda's PTX (its libdevice and cuda_fp16 inline assembly):
# qualifiers run together (`.reg.b16`), registers named without `%`
# (`__$temp3`, shadowed in a second scope), and the constant WARP_SZ.
ASM_FORMS = HEAD + """
.visible .entry asm_forms(.param .u64 out, .param .f64 x)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    .reg .f64 %fd<4>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    ld.param.f64 %fd1, [x];
    { .reg .pred __$temp3;
      setp.gt.f64 __$temp3, %fd1, 0d0000000000000000;
      selp.f64 %fd2, %fd1, 0d4000000000000000, __$temp3; }
    { .reg .pred __$temp3;
      setp.lt.f64 __$temp3, %fd1, 0d0000000000000000;
      @__$temp3 mov.f64 %fd2, 0d4008000000000000; }
    st.global.f64 [%rd2], %fd2;
    {.reg.b16 lo, hi;
     mov.b32 {lo, hi}, 0x00070005;
     cvt.u32.u16 %r1, lo;
     cvt.u32.u16 %r2, hi; }
    mov.u32 %r3, WARP_SZ;
    add.u32 %r1, %r1, %r3;
    st.global.u32 [%rd2+8], %r1;
    st.global.u32 [%rd2+12], %r2;
    ret;
}
"""


@pytest.mark.parametrize("x, want", [(5.0, 5.0), (0.0, 2.0), (-1.0, 3.0)])
def test_numba_inline_assembly_forms(b, x, want):
    out = upload(b, np.zeros(2, np.float64))
    launch(b, ASM_FORMS, "asm_forms", [u64(out), ctypes.c_double(x)])
    got = download(b, out, 2, np.float64)
    assert got[0] == want
    assert got[1:].view(np.uint32).tolist() == [5 + 32, 7]


# numba-cuda's declare_device(..., abi="c") of a `void` function calls it with a
# result .param the definition does not have (the linkers accept it).
VOID_RESULT = HEAD + """
.visible .func consume(.param .b32 x)
{
    ret;
}
.visible .entry void_result(.param .u64 out)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, 7;
    { .param .b32 retval0;
      .param .b32 param0;
      st.param.b32 [param0], %r1;
      call.uni (retval0), consume, (param0); }
    st.global.u32 [%rd2], %r1;
    ret;
}
"""


def test_a_result_of_a_void_function_is_ignored(b):
    out = upload(b, np.zeros(1, np.uint32))
    launch(b, VOID_RESULT, "void_result", [u64(out)])
    assert download(b, out, 1, np.uint32).tolist() == [7]


# ------------------------------------------- red, ldu, isspacep and trap
MISC = HEAD + """
.visible .entry misc(.param .u64 out, .param .u64 in)
{
  .shared .align 4 .b32 sh[1];
  .reg .b64 %rd<8>; .reg .b32 %r<8>; .reg .pred %p<4>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [in];
  cvta.to.global.u64 %rd3, %rd1;
  cvta.to.global.u64 %rd4, %rd2;
  mov.u32 %r1, %tid.x;
  add.u32 %r2, %r1, 1;
  red.global.add.u32 [%rd3], %r2;
  ldu.global.u32 %r3, [%rd4];
  red.global.max.u32 [%rd3+4], %r3;
  setp.ne.u32 %p0, %r1, 0;
  @%p0 bra DONE;
  isspacep.global %p1, %rd1;
  mov.u64 %rd5, sh;
  cvta.shared.u64 %rd6, %rd5;
  isspacep.shared %p2, %rd6;
  isspacep.global %p3, %rd6;
  selp.u32 %r4, 1, 0, %p1;
  st.global.u32 [%rd3+8], %r4;
  selp.u32 %r4, 1, 0, %p2;
  st.global.u32 [%rd3+12], %r4;
  selp.u32 %r4, 1, 0, %p3;
  st.global.u32 [%rd3+16], %r4;
DONE:
  ret;
}
.visible .entry tr()
{
  trap;
}
"""


def test_red_ldu_and_isspacep_against_their_isa_semantics(b):
    # red: an atomic reduction with no result (32 lanes add tid+1, a max);
    # ldu: a load of a value every lane reads alike; isspacep: whether a generic
    # address lies in a state space (a global pointer is global; a cvta'd shared
    # address is shared and not global)
    out = upload(b, np.zeros(5, np.uint32))
    src = upload(b, np.array([77], np.uint32))
    launch(b, MISC, "misc", [u64(out), u64(src)], block=(32, 1, 1))
    assert download(b, out, 5, np.uint32).tolist() == [sum(range(1, 33)), 77, 1, 1, 0]


def test_trap_is_a_sticky_launch_failure_naming_it(b):
    with pytest.raises(CudaError) as e:
        launch(b, MISC, "tr", [])
    assert e.value.code == 719 and "trap" in str(e.value)


def test_a_kernel_reaches_page_locked_memory_through_its_host_pointer(b):
    # cuda.h (unified addressing): memory of cuMemAllocHost/cuMemHostAlloc is "always directly
    # accessible from all contexts on all devices", DEVICEMAP or not; a PTX kernel was refused
    # it (700, sticky) -- cuda.core's graph tests write to such memory from kernels
    text = HEAD + """.visible .entry bump(.param .u64 p)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [p];
    cvta.to.global.u64 %rd2, %rd1;
    ld.global.u32 %r1, [%rd2];
    add.s32 %r2, %r1, 1;
    st.global.u32 [%rd2], %r2;
    ret;
}
"""
    for mapped in (False, True):
        host = b.mem_host_alloc(4, mapped=mapped)
        ctypes.c_int32.from_address(host).value = 41
        launch(b, text, "bump", [u64(host)])
        b.ctx_synchronize()
        assert ctypes.c_int32.from_address(host).value == 42
        b.mem_free_host(host)
