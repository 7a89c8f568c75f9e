"""The host build of ``kernels/`` (issue 22): differential tests, faults, selection.

- Differential: every planned launch of a case runs twice, through the host
  build (:class:`gpuarray_sim.kernels._host.HostKernel`) and through the NumPy
  reference (:mod:`gpuarray_sim.kernels._reference`), on the same real host
  buffers (here a device address is a host address, see ``_HostMem``); the
  whole buffer each leaves behind must be byte-identical, and the viewed
  result must equal NumPy's ``astype`` / assignment.  Every launch runs as
  planned (32-bit indices where they fit) and again with the 64-bit index
  build of the same kernel (the test hook ``_force_i64``).  Cases: all
  14 x 14 conversion pairs in several layouts, ND 1..8 after collapsing,
  the four copy variants (``c`` with and without vector access), fills of
  every unit, both transposes at tile edges 1..129 for every element size,
  empty and size-1 axes, negative and zero strides.
- Faults: a kernel that reads or writes outside what its launch was granted,
  or misaligned, is the simulator's sticky illegal-address (700) /
  misaligned-address (716) error naming kernel and address -- never a crash.
- Fibers: ``__syncthreads`` and shared memory mean what they mean on a GPU.
- Selection: ``GPUARRAY_SIM_KERNELS``, no compiler, compile errors.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest
from gpuarray_sim import _hostrt
from gpuarray_sim import kernels as sim_kernels
from gpuarray_sim._memory import DeviceFault
from gpuarray_sim.kernels import _host, _reference

from gpuarray._kernels import _dtypes, _launch, _plan, _specs
from gpuarray.errors import CudaError
from sim.tests.hostrt.test_kernels_reference import _astype, _sample
from tests.support import backend_is_sim

pytestmark = pytest.mark.skipif(_host.compiler() is None, reason="no C++ compiler for the host build")

CAST = _dtypes.CAST_CODES


# ------------------------------------------------------------------ harness
class _HostMem:
    """``SimMemoryAccess`` over real host buffers: device address == host address."""

    def __init__(self, roots) -> None:
        self.ranges = [(r.ctypes.data, r.nbytes) for r in roots]

    def _check(self, address: int, nbytes: int) -> None:
        if not any(lo <= address and address + nbytes <= lo + n for lo, n in self.ranges):
            raise DeviceFault(700, f"0x{address:x}+{nbytes} outside the test buffers")

    def host_pointer(self, address: int, nbytes: int):
        self._check(address, nbytes)
        return address, None

    def read(self, address: int, nbytes: int) -> np.ndarray:
        self._check(address, nbytes)
        return np.frombuffer(ctypes.string_at(address, nbytes), np.uint8).copy()

    def write(self, address: int, data) -> None:
        b = bytes(memoryview(data).cast("B"))
        self._check(address, len(b))
        ctypes.memmove(address, b, len(b))


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _force_i64(ops):
    """The test hook: the 64-bit index build of every planned kernel, same parameters."""
    out = []
    for op in ops:
        if isinstance(op, _plan.Launch) and op.spec.index == "i32":
            s = op.spec
            spec = (_specs.copy_spec(s.dst, s.src, s.ndim, "i64", s.variant) if s.family == "copy"
                    else _specs.fill_spec(s.dst, s.ndim, "i64", s.variant) if s.family == "fill"
                    else _specs.transpose_spec(s.dst, s.src, "i64", s.variant))
            op = op._replace(spec=spec)
        out.append(op)
    return out


def _execute(ops, mem, impl_of, sms: int = 2) -> None:
    """Run planned operations on host memory: driver copies/sets with ctypes,
    launches through ``impl_of(spec).run`` with ``mem`` as the kernel memory."""
    for op in ops:
        if isinstance(op, _plan.Memcpy):
            ctypes.memmove(op.dst, op.src, op.nbytes)
        elif isinstance(op, _plan.Memset):
            w = op.bits // 8
            buf = (ctypes.c_ubyte * (op.words * w)).from_address(op.dst)
            np.frombuffer(buf, dtype=f"u{w}")[:] = op.value
        elif isinstance(op, _plan.Memcpy2D):
            for r in range(op.height):
                ctypes.memmove(op.dst + r * op.dst_pitch, op.src + r * op.src_pitch, op.width)
        else:
            block = (32, 8, 1) if op.spec.family == "transpose" else (256, 1, 1)
            impl_of(op.spec).run(mem, _launch.grid_for(op, sms), block, 0,
                                 [_launch.params_for(op)])


_host_impls: dict = {}


def _host_impl(spec):
    impl = _host_impls.get(spec)
    if impl is None:
        impl = _host_impls[spec] = _host.host_kernel(spec)
    return impl


def _ref_impl(spec):
    return _reference.reference_kernel(spec)


class Case:
    """``dst[...] = src`` (copy) or ``dst[...] = value`` (fill), planned; both index widths."""

    def __init__(self, label, dst, src, fill=False):
        self.label, self.dst, self.src, self.fill = label, dst, src, fill
        if fill:
            ops = _plan.plan_fill(dst.ctypes.data, dst.strides, dst.dtype, dst.shape, src)
        else:
            ops = _plan.plan_copy(dst.ctypes.data, dst.strides, dst.dtype, src.ctypes.data,
                                  src.strides, src.dtype, dst.shape)
        self.ops = list(ops)
        self.launches = [op for op in self.ops if isinstance(op, _plan.Launch)]
        assert fill or src.shape == dst.shape, (label, dst.shape, src.shape)

    def specs(self):
        return [op.spec for op in self.launches] + [op.spec for op in _force_i64(self.launches)]

    def check(self) -> int:
        """Run host and reference, both index widths; returns the launches compared."""
        roots = [_root(self.dst)] + ([] if self.fill else [_root(self.src)])
        root = roots[0]
        start = root.copy()
        expect = self.dst.copy()
        expect[...] = self.src if self.fill else _astype(self.src, self.dst.dtype)
        n = 0
        for ops in (self.ops, _force_i64(self.ops)):
            results = []
            for impl_of in (_host_impl, _ref_impl):
                root[...] = start
                _execute(ops, _HostMem(roots), impl_of)
                results.append(root.tobytes())
            assert results[0] == results[1], (self.label, "host != reference",
                                              [getattr(o, "spec", o) for o in ops])
            assert np.array_equal(self.dst, expect, equal_nan=self.dst.dtype.kind in "fc"), (
                self.label, "!= NumPy")
            n += len([op for op in ops if isinstance(op, _plan.Launch)])
        root[...] = start
        return n


def _zeros(shape, code, pad=3):
    """A destination view inside a buffer with ``pad`` poisoned elements either side."""
    D = _dtypes.code_dtype(code)
    n = math.prod(shape)
    raw = np.full((n + 2 * pad) * D.itemsize, 0xA5, np.uint8)
    return np.ndarray(shape, D, raw, pad * D.itemsize)


def _copy_cases(d, s, rng) -> list[Case]:
    D, S = _dtypes.code_dtype(d), _dtypes.code_dtype(s)
    big = _sample(s, (24, 40), rng)
    flat = _sample(s, (1010,), rng)
    out = [
        Case("C dst, reversed strided src", _zeros((7, 9), d), big[::3, ::-4][:7, :9]),
        Case("both strided", _zeros((14, 20), d)[::2, 1::2], big[1::2, ::2][:7, :10]),
        Case("contiguous, vector", _zeros((1003,), d, pad=4), flat[:1003]),
        Case("contiguous, scalar", _zeros((997,), d, pad=1), flat[1:998]),
        Case("broadcast src (stride 0)", _zeros((5, 40), d), np.broadcast_to(big[0], (5, 40))),
        Case("size-1 axes", _zeros((1, 7, 1, 3), d)[:, ::-1],
             big[3:4, 1:22:3, None, None].repeat(3, axis=3)[..., ::-1]),
        Case("empty", _zeros((0, 5), d), big[:0, :5]),
        Case("0-d", _zeros((), d), big[2:3, 3:4].reshape(())),
    ]
    raw = np.zeros(40 * S.itemsize + 3, np.uint8)  # unaligned source
    mis = np.ndarray((40,), S, raw, 1, (S.itemsize,))
    mis[...] = big[0]
    out.append(Case("unaligned src", _zeros((40,), d)[::-1], mis) if S.itemsize > 1 or
               D.itemsize > 1 else Case("unaligned src", _zeros((20,), d), big[0, ::2]))
    return out


def _nd_cases(d, s, rng) -> list[Case]:
    """One launch of each ndim 1..8 (nothing collapses), variants g, d and u."""
    S = _dtypes.code_dtype(s)
    out = []
    for nd in range(1, 9):
        base = _sample(s, (6,) * nd if nd <= 4 else (4,) * nd, rng)
        src = base[(slice(None, None, 2),) * nd]
        out.append(Case(f"{nd}-d to C", _zeros(src.shape, d), src))
        dstbase = _zeros(tuple(2 * n for n in src.shape), d)
        out.append(Case(f"{nd}-d strided", dstbase[(slice(1, None, 2),) * nd], src[..., ::-1]))
        raw = np.zeros(src.size * S.itemsize + 3, np.uint8)
        mis = np.ndarray(src.shape, S, raw, 1)
        mis[...] = src
        out.append(Case(f"{nd}-d unaligned", dstbase[(slice(None, None, 2),) * nd],
                        mis[..., ::-1] if S.itemsize > 1 else mis))
    return out


def _fill_cases(rng) -> list[Case]:
    out = []
    values = {"i1": -7, "u1": 201, "i2": -12345, "f2": 1.5, "f4": 1.2345678, "i4": -123456789,
              "f8": np.pi, "i8": -(2**40) - 3, "c16": 1.25 - 3.5j, "c8": 2 - 1j, "b1": True}
    for code, v in values.items():
        out += [
            Case(f"fill {code} 2-d strided", _zeros((9, 12), code)[::2, ::-3], v, fill=True),
            Case(f"fill {code} 3-d", _zeros((4, 6, 10), code)[:, ::2, 1::3], v, fill=True),
            Case(f"fill {code} 1-d", _zeros((301,), code, pad=1), v, fill=True),
            Case(f"fill {code} 1-d aligned", _zeros((300,), code, pad=2), v, fill=True),
            Case(f"fill {code} size-1 and empty", _zeros((1, 5, 1), code)[:, ::2], v, fill=True),
            Case(f"fill {code} empty", _zeros((0, 3), code), v, fill=True),
        ]
    return out


EDGES = (1, 31, 32, 33, 65, 129)


def _transpose_cases(rng) -> list[Case]:
    out = []
    pairs = [("u1", "u1"), ("u2", "u2"), ("u4", "u4"), ("u8", "u8"), ("v16", "v16"),
             ("b1", "i1"), ("f2", "i2"), ("i4", "f4"), ("f4", "f8"), ("c16", "u1")]
    for d, s in pairs:
        for t in EDGES:
            for rows, cols in ((t, 65), (33, t), (t, t)):
                for pad in (0, 8):  # pad: pitches multiples of 8 elements (the word kernel)
                    rp, cp = -(-rows // 8) * 8 + pad, -(-cols // 8) * 8 + pad
                    src = _sample(s, (cols, rp), rng) if s != "v16" else rng.integers(
                        0, 255, (cols, rp, 16), dtype=np.uint8).view(
                        _dtypes.code_dtype("v16"))[..., 0]
                    dst = _zeros((rows, cp), d, pad=8 if pad else 3)
                    if not pad:
                        src, dst = src[:, :rows], _zeros((rows, cols), d)
                    out.append(Case(f"transpose {d}<-{s} {rows}x{cols} pad {pad}",
                                    dst[:, :cols], src[:, :rows].T))
        src = _sample(s, (3, 33, 65), rng) if s != "v16" else None
        if src is not None:
            out.append(Case(f"transpose {d}<-{s} batch 3x65x33", _zeros((3, 65, 33), d),
                            src.transpose(0, 2, 1)))
    return out


@pytest.fixture(scope="module")
def cases():
    rng = np.random.default_rng(2222)
    groups = {
        "pairs": [c for d in CAST for s in CAST for c in _copy_cases(d, s, rng)],
        "ndim": [c for d, s in (("f4", "f8"), ("u1", "u1"), ("c16", "i2"), ("f2", "f8"),
                                ("b1", "c8")) for c in _nd_cases(d, s, rng)],
        "fill": _fill_cases(rng),
        "transpose": _transpose_cases(rng),
    }
    specs = {s for g in groups.values() for c in g for s in c.specs()}
    _host.prepare(sorted(specs, key=lambda s: s.symbol))  # one batched build
    groups["_specs"] = specs  # type: ignore[assignment]
    return groups


def _run(group, capsys=None) -> tuple[int, int]:
    launches = sum(c.check() for c in group)
    return len(group), launches


def test_all_conversion_pairs_and_layouts_match_the_reference_and_numpy(cases):
    n, launches = _run(cases["pairs"])
    variants = {op.spec.variant for c in cases["pairs"] for op in c.launches
                if op.spec.family == "copy"}
    assert variants == {"g", "d", "u", "c"}
    pairs = {(c.dst.dtype, c.src.dtype) for c in cases["pairs"] if c.launches}
    assert len(pairs) == 14 * 14  # (equal types run as raw units: u4 <- u4 for float32)
    vec = [c for c in cases["pairs"] for op in c.launches if op.spec.variant == "c"]
    aligned = {(c.dst.ctypes.data % 16 == 0 and c.src.ctypes.data % 16 == 0) for c in vec}
    assert aligned == {True, False}  # vector and scalar paths of the contiguous kernel
    print(f"pairs: {n} cases, {launches} launches compared")


def test_every_ndim_after_collapsing_matches(cases):
    n, launches = _run(cases["ndim"])
    seen = {(op.spec.ndim, op.spec.variant) for c in cases["ndim"] for op in c.launches}
    assert {nd for nd, _ in seen} == set(range(1, 9))
    assert {v for _, v in seen} >= {"g", "d", "u"}
    print(f"ndim: {n} cases, {launches} launches compared")


def test_fills_of_every_unit_match(cases):
    n, launches = _run(cases["fill"])
    units = {(op.spec.dst, op.spec.variant) for c in cases["fill"] for op in c.launches}
    assert {u for u, _ in units} == set(_dtypes.RAW_CODES.values())
    assert {v for _, v in units} == {"g", "c"}
    print(f"fill: {n} cases, {launches} launches compared")


def test_both_transposes_at_tile_edges_for_every_element_size(cases):
    n, launches = _run(cases["transpose"])
    tr = {(op.spec.variant, _dtypes.code_itemsize(op.spec.src)) for c in cases["transpose"]
          for op in c.launches if op.spec.family == "transpose"}
    assert {size for v, size in tr if v == ""} == {1, 2, 4, 8, 16}
    assert {size for v, size in tr if v == "w"} == {1, 2, 4}
    print(f"transpose: {n} cases, {launches} launches compared, "
          f"{len(cases['_specs'])} specialisations built")


@pytest.mark.parametrize("code", ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8"])
def test_float_to_int_outside_the_range_saturates_and_nan_gives_zero(code):
    """Defined on both targets (ga_ftoi): saturate to the intermediate, NaN -> 0, then wrap."""
    D = _dtypes.code_dtype(code)
    vals = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 1e19, 2e19, -1e19, 2**31 - 0.5,
                     -(2**31) - 0.5, 2**63, -(2**63), 300.7, -1.9], np.float64)
    wide = {"u4": 64, "i8": 64, "u8": 64}.get(code, 32)
    lo, hi = -(2 ** (wide - 1)), 2 ** (wide - 1) - 1

    def expect(v):
        if code == "u8" and v >= 2.0**64:
            return 2**64 - 1
        if code == "u8" and v >= 2.0**63:
            return int(v)
        if v != v:
            return 0
        w = hi if v >= 2.0 ** (wide - 1) else lo if v <= lo else int(v)
        return w % (1 << (8 * D.itemsize))

    for src_code in ("f8", "f4", "f2"):
        S = _dtypes.code_dtype(src_code)
        with np.errstate(all="ignore"):
            src = vals.astype(S)
        dst = _zeros(src.shape, code)
        c = Case(f"{src_code}->{code}", dst[::-1], src)
        _execute(c.ops, _HostMem([_root(dst), _root(src)]), _host_impl)
        got = dst[::-1].view(f"u{D.itemsize}").astype(object)
        want = [expect(float(v)) for v in src]
        assert list(got) == want, (src_code, code, list(zip(src, got, want, strict=True)))


# -------------------------------------------------------------- simulator
@pytest.fixture
def hsim(sim, monkeypatch):
    """The test's simulator, running host-built kernels, with a current context."""
    monkeypatch.setenv("GPUARRAY_SIM_KERNELS", "host")
    sim.ctx_set_current(sim.primary_ctx_retain(0))
    return sim


def test_the_simulator_runs_the_host_build(hsim):
    sim = hsim
    from gpuarray import _kernels

    src = np.arange(1000, dtype=np.float64) / 7
    sp = sim.mem_alloc(src.nbytes)
    dp = sim.mem_alloc(500 * 4)
    sim.memcpy_htod_async(sp, src.ctypes.data, src.nbytes, 1)
    _kernels.copy(dp, (4,), "f4", sp, (16,), "f8", (500,), 1)
    out = np.zeros(500, np.float32)
    sim.memcpy_dtoh_async(out.ctypes.data, dp, out.nbytes, 1)
    sim.stream_synchronize(1)
    assert np.array_equal(out, src[::2].astype(np.float32))
    assert isinstance(sim_kernels.lookup("ga_copy__f4__f8__1__i32__d"), _host.HostKernel)


_BAD = r"""
#include "ga_common.cuh"
struct bad_args { char* dst; const char* src; long long n; long long shift; };
// Copies n floats, each thread reading element i + shift: shift moves the
// accesses past the granted extents, or (bytes not a multiple of 4) misaligns them.
extern "C" __global__ void ga_test_bad(bad_args a) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) {
        const float v = ga_load<float, true>(a.src + i * 4 + a.shift);
        ga_store<float, true>(a.dst + i * 4, v);
    }
}
// Thread t writes shared[t], waits, reads its neighbour's: right only if
// __syncthreads holds every thread of the block until all have written.
extern "C" __global__ void ga_test_barrier(bad_args a) {
    __shared__ int tile[1024];
    const int t = (int)(threadIdx.x + blockDim.x * threadIdx.y);
    const int n = (int)(blockDim.x * blockDim.y);
    tile[t] = t + 1000 * (int)blockIdx.x;
    __syncthreads();
    const int v = tile[(t + 1) % n];
    __syncthreads();
    tile[t] = -1;  // the next block's threads must not see this before their barrier
    ga_store<int, true>(a.dst + 4 * ((long long)blockIdx.x * n + t), v);
}
GA_HOST_ENTRY(ga_test_bad)
GA_HOST_ENTRY(ga_test_barrier)
"""


class _BadArgs(ctypes.Structure):
    _fields_ = [("dst", ctypes.c_uint64), ("src", ctypes.c_uint64), ("n", ctypes.c_int64),
                ("shift", ctypes.c_int64)]


class _TestKernel:
    """A SimKernel over a test-built host kernel; declares dst (write) and src (read)."""

    param_types = (_BadArgs,)

    def __init__(self, name: str, entry: int, src_bytes: int, dst_bytes: int) -> None:
        self.name, self.entry, self.src_bytes, self.dst_bytes = name, entry, src_bytes, dst_bytes

    def accesses(self, params):
        p = params[0]
        out = [(p.dst, self.dst_bytes, True)]
        if self.src_bytes:
            out.insert(0, (p.src, self.src_bytes, False))
        return out

    def run(self, mem, grid, block, shared_mem, params):
        grants, keep = _hostrt.grants_for(mem, self.accesses(params))
        _host.runtime().launch(self.name, self.entry, params[0], grid, block, grants)


@pytest.fixture(scope="module")
def test_lib():
    cc = _host.compiler()
    lib = _host.load_library(_host.build_library(cc, _BAD, "test kernels"))
    return {n: ctypes.cast(getattr(lib, "ga_host__" + n), ctypes.c_void_p).value
            for n in ("ga_test_bad", "ga_test_barrier")}


def _launch_bad(sim, test_lib, shift, n=300, grid=2, declared_src=None):
    name = f"ga_test_bad_{shift}_{n}"
    sim_kernels.register(name, _TestKernel(name, test_lib["ga_test_bad"],
                                           declared_src if declared_src is not None else n * 4,
                                           n * 4))
    src = sim.mem_alloc(4096)
    dst = sim.mem_alloc(4096)
    sim.memset_d32_async(src, 0x3F800000, 1024, 1)
    fn = sim.module_get_function(sim.module_load_data(b"gpuarray-sim-placeholder\0" + name.encode()), name)
    sim.launch_kernel(fn, (grid, 1, 1), (256, 1, 1), 0, 1, [_BadArgs(dst, src, n, shift)])
    return src, dst


def test_a_host_kernel_reading_past_its_grant_is_an_illegal_address(hsim, test_lib):
    sim = hsim
    src, _ = _launch_bad(hsim, test_lib, shift=4)  # thread 299 reads element 300: not granted
    with pytest.raises(CudaError) as e:
        sim.ctx_synchronize()
    assert e.value.code == 700
    msg = str(e.value)
    assert "ga_test_bad_4_300" in msg and f"0x{src + 300 * 4:x}" in msg and "read of 4 bytes" in msg
    with pytest.raises(CudaError) as again:  # sticky
        sim.mem_alloc(16)
    assert again.value.code == 700


def test_a_host_kernel_writing_where_it_may_only_read_is_an_illegal_address(hsim, test_lib):
    sim = hsim
    _launch_bad(hsim, test_lib, shift=0, n=300, declared_src=0)  # src read, but not declared
    with pytest.raises(CudaError, match="outside the extents granted") as e:
        sim.ctx_synchronize()
    assert e.value.code == 700


def test_a_misaligned_host_kernel_access_is_a_misaligned_address(hsim, test_lib):
    sim = hsim
    src, _ = _launch_bad(hsim, test_lib, shift=-2, n=200)  # thread 0 reads src - 2: misaligned
    with pytest.raises(CudaError, match="misaligned") as e:
        sim.ctx_synchronize()
    assert e.value.code == 716 and f"0x{src - 2:x}" in str(e.value)


def test_a_real_kernel_straying_outside_its_declared_extent_faults(hsim, monkeypatch):
    """ga_copy with a destination extent declared one element short: its last store faults."""
    sim = hsim
    from gpuarray import _kernels

    real = _host.HostKernel.accesses

    def short(self, params):
        return [(a, n - 4 if w else n, w) for a, n, w in real(self, params)]

    monkeypatch.setattr(_host.HostKernel, "accesses", short)
    sp = sim.mem_alloc(4096)
    dp = sim.mem_alloc(4096)
    sim.memset_d8_async(sp, 0, 4096, 1)
    _kernels.copy(dp, (4,), "f4", sp, (8,), "f8", (100,), 1)
    with pytest.raises(CudaError) as e:
        sim.ctx_synchronize()
    # the contiguous kernel stores elements 96..99 as one 16-byte vector: that store faults
    assert e.value.code == 700 and f"write of 16 bytes at address 0x{dp + 96 * 4:x}" in str(e.value)


def test_params_past_the_allocation_fault_before_the_kernel_runs(hsim):
    sim = hsim
    from gpuarray import _kernels

    dp = sim.mem_alloc(64)
    _kernels.fill(dp, (8,), "f8", (9,), 1.5, 1)  # 72 bytes into a 64-byte allocation
    with pytest.raises(CudaError, match="run past the end") as e:
        sim.ctx_synchronize()
    assert e.value.code == 700


@pytest.mark.parametrize("block", [(256, 1, 1), (32, 8, 1), (1, 1, 1), (1024, 1, 1)])
def test_syncthreads_and_shared_memory_mean_what_they_mean_on_a_gpu(hsim, test_lib, block):
    sim = hsim
    n = block[0] * block[1]
    grid = 3
    name = f"ga_test_barrier_{n}"
    sim_kernels.register(name, _TestKernel(name, test_lib["ga_test_barrier"], 0, 4 * n * grid))
    dst = sim.mem_alloc(4 * n * grid)
    fn = sim.module_get_function(sim.module_load_data(b"gpuarray-sim-placeholder\0" + name.encode()), name)
    sim.launch_kernel(fn, (grid, 1, 1), block, 0, 1, [_BadArgs(dst, 0, 0, 0)])
    out = np.zeros(n * grid, np.int32)
    sim.memcpy_dtoh_async(out.ctypes.data, dst, out.nbytes, 1)
    sim.stream_synchronize(1)
    t = np.arange(n)
    expect = np.concatenate([(t + 1) % n + 1000 * b for b in range(grid)])
    assert np.array_equal(out, expect)


# -------------------------------------------------------------- selection
def test_selection_by_environment(monkeypatch):

    monkeypatch.setenv("GPUARRAY_SIM_KERNELS", "reference")
    sym = "ga_copy__f8__f4__2__i32__g"
    assert isinstance(sim_kernels.gpuarray_kernel(sym), _reference.CopyReference)
    assert "reference" in _host.describe()
    monkeypatch.setenv("GPUARRAY_SIM_KERNELS", "host")
    impl = sim_kernels.gpuarray_kernel(sym)
    assert isinstance(impl, _host.HostKernel) and impl is sim_kernels.gpuarray_kernel(sym)
    assert "host" in _host.describe()
    monkeypatch.delenv("GPUARRAY_SIM_KERNELS")
    assert _host.mode() == "host"  # a compiler is here
    monkeypatch.setenv("GPUARRAY_SIM_KERNELS", "fast")
    with pytest.raises(ValueError, match="'fast'"):
        _host.mode()


def test_without_a_compiler_the_reference_runs_and_host_is_refused(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("GPUARRAY_SIM_KERNELS", raising=False)
    assert _host.compiler() is None and _host.mode() == "reference"
    assert "no C++ compiler" in _host.describe()
    monkeypatch.setenv("GPUARRAY_SIM_KERNELS", "host")
    monkeypatch.setattr(_host, "_entries", {})
    with pytest.raises(_host.HostCompileError, match="needs a C\\+\\+ compiler"):
        _host.prepare([_specs.copy_spec("f4", "u2", 3, "i64", "g")])


def test_a_compile_error_names_the_compiler_the_specialisation_and_the_log(monkeypatch):
    spec = _specs.copy_spec("c8", "u2", 5, "i64", "u")
    monkeypatch.setattr(_host, "_entries", {})
    monkeypatch.setattr(_host, "_unit", lambda specs: "#include \"ga_copy.cuh\"\nthis is not C++;\n")
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE", "0")
    with pytest.raises(_host.HostCompileError) as e:
        _host.prepare([spec])
    msg = str(e.value)
    assert _host.compiler().path in msg and spec.symbol in msg and "error" in e.value.log
    assert "this is not C++" in e.value.log


def test_the_info_line_says_which_kernels_run(monkeypatch, capsys):
    from gpuarray.__main__ import info

    if not backend_is_sim():
        pytest.skip("the cuda backend runs NVRTC's kernels: info prints no simulator-kernels line")
    monkeypatch.delenv("GPUARRAY_SIM_KERNELS", raising=False)
    info()
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("simulator kernels")]
    assert len(line) == 1 and "host" in line[0] and _host.compiler().ident in line[0]


def test_specialisations_built_before_are_rebuilt_in_the_background(monkeypatch, tmp_path):
    """After the sources (here: the flags) change, the listed kernels are built in one batch."""
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE_DIR", str(tmp_path))
    specs = [_specs.copy_spec("f4", "i2", nd, "i32", "g") for nd in (1, 2, 3)]
    for name, value in (("_entries", {}), ("_pending", {}), ("_prefetch_started", True),
                        ("_listed_symbols", set())):
        monkeypatch.setattr(_host, name, value)
    assert _host.prepare(specs) == 3
    listed = (tmp_path / _host.USED_LIST).read_text().split()
    assert listed == [s.symbol for s in specs]
    # a new process after an edit: every key changes, nothing of it is in the cache
    monkeypatch.setattr(_host, "FLAGS", _host.FLAGS + ("-DGA_TEST_EDIT=1",))
    monkeypatch.setattr(_host, "_entries", {})
    monkeypatch.setattr(_host, "_prefetch_started", False)
    monkeypatch.setattr(_host, "_listed_symbols", set())
    units = []
    real = _host._build_unit
    monkeypatch.setattr(_host, "_build_unit", lambda cc, unit: units.append(
        [s.symbol for s in unit]) or real(cc, unit))
    _host.host_kernel(specs[1])  # starts the background build, waits for its unit
    deadline = 60
    import time

    t0 = time.monotonic()
    while _host._pending and time.monotonic() - t0 < deadline:
        time.sleep(0.05)
    # one compiler start for the three listed; the kernel asked for before that
    # unit started was built alone at once rather than waiting behind the list
    assert [s.symbol for s in specs] in units and len(units) <= 2
    assert all(s.symbol in _host._entries for s in specs)
    assert (tmp_path / _host.USED_LIST).read_text().split() == listed  # not listed twice


def test_the_disk_cache_holds_each_library_once_and_a_corrupt_one_is_a_miss(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE_DIR", str(tmp_path))
    for name, value in (("_entries", {}), ("_pending", {}), ("_prefetch_started", True),
                        ("_listed_symbols", set())):
        monkeypatch.setattr(_host, name, value)
    specs = [_specs.fill_spec("u2", nd, "i64", "g") for nd in (1, 2, 3, 4)]
    assert _host.prepare(specs) == 4
    entries = sorted(tmp_path.glob("*.gakc"), key=lambda p: p.stat().st_size)
    assert len(entries) == 5  # one library, four references to it
    library = entries[-1]
    monkeypatch.setattr(_host, "_entries", {})
    assert _host.prepare(specs) == 0  # warm: loaded, nothing compiled
    library.write_bytes(library.read_bytes()[:-10])  # truncated: a miss, rebuilt
    monkeypatch.setattr(_host, "_entries", {})
    assert _host.prepare(specs[:1]) == 1


def test_host_libraries_export_only_their_entries(tmp_path):
    """Template instances and __shared__ statics stay private to each library.

    With default visibility g++ makes the statics of inline templates
    GNU-unique symbols, bound across every loaded library: two libraries
    instantiating the same template with different meanings (the tests'
    former emulator and the host build) then shared one object, and the
    process crashed.
    """
    import shutil
    import subprocess

    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm to list a library's symbols")
    cc = _host.compiler()
    lib = tmp_path / "k.so"
    lib.write_bytes(_host.build_library(cc, _host._unit([
        _specs.transpose_spec("u1", "u1", "i32", "w"), _specs.copy_spec("f4", "f8", 2, "i32", "g")]),
        "two kernels"))
    out = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert names == {"ga_host__ga_transpose__u1__u1__i32__w", "ga_host__ga_copy__f4__f8__2__i32__g"}


def test_fma_flag_follows_the_host_cpu(monkeypatch, tmp_path):
    """-mfma only on an x86-64 host whose /proc/cpuinfo lists fma (it is in every cache key)."""
    import builtins
    import platform

    info = tmp_path / "cpuinfo"
    real_open = builtins.open

    def fake_open(path, *a, **k):
        return real_open(info if path == "/proc/cpuinfo" else path, *a, **k)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx fma avx2\n")
    assert _host._host_cpu_flags() == ("-mfma",)
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 fma4 avx\n")  # fma4 is not FMA3
    assert _host._host_cpu_flags() == ()
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    info.write_text("Features\t: fp asimd fma\n")
    assert _host._host_cpu_flags() == ()
