"""Copy, cast and fill: planning, reference kernels and launches, against NumPy.

Three levels:

- planning (pure): which driver call or kernel each layout gets;
- the simulator reference implementations, driven by the real planner and
  parameter blocks over a small fake ``SimMemoryAccess`` (numpy buffers,
  bounds-checked): every dtype pair and layout against NumPy ``astype``;
- launches through a backend: the simulator (``GPUARRAY_BACKEND=sim``), and
  the same tests on a GPU (``gpu`` marker, skipped without one).
"""

from __future__ import annotations

import ctypes
import math
import os
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuarray import _driver
from gpuarray._driver import sim_kernels
from gpuarray._kernels import _dtypes, _launch, _loader, _plan, _reference, _specs
from gpuarray.errors import CudaError

CAST = _dtypes.CAST_CODES


def _astype(x, dt):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(x).astype(dt)


def _sample(code, shape, rng):
    """Values whose conversion to every type is defined (no NaN/inf/out of range)."""
    dt = np.dtype(code) if not isinstance(code, str) else _dtypes.code_dtype(code)
    n = math.prod(shape)
    if dt.kind == "b":
        return (rng.integers(0, 2, n) == 1).reshape(shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -120), min(info.max, 120), n,
                            endpoint=True).astype(dt).reshape(shape)
    v = rng.integers(-120, 120, n) + rng.choice([0, 0.25, 0.5, 0.75, 0.999], n)
    if dt.kind == "c":
        v = v + 1j * rng.integers(-5, 5, n)
    return v.astype(dt).reshape(shape)


# ============================================================ fake memory
class FakeMemory:
    """A ``SimMemoryAccess`` over numpy buffers; out-of-allocation access raises."""

    def __init__(self) -> None:
        self.allocs: dict[int, np.ndarray] = {}
        self._next = 0x7000_0000_0000
        self.reads = 0

    def alloc(self, nbytes: int) -> int:
        base = self._next
        self._next += ((nbytes + 255) // 256) * 256 + 4096  # gaps between allocations
        self.allocs[base] = np.full(nbytes, 0xEE, np.uint8)
        return base

    def _find(self, address: int, nbytes: int):
        for base, buf in self.allocs.items():
            if base <= address and address + nbytes <= base + buf.size:
                return buf, address - base
        raise CudaError(700, "kernel", f"access 0x{address:x}+{nbytes} outside any allocation")

    def read(self, address: int, nbytes: int) -> np.ndarray:
        buf, off = self._find(address, nbytes)
        self.reads += 1
        return buf[off:off + nbytes].copy()

    def write(self, address: int, data) -> None:
        data = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
        buf, off = self._find(address, data.size)
        buf[off:off + data.size] = data

    # -- arrays
    def put(self, a: np.ndarray) -> int:
        """Upload a view with its layout; returns the device address of element [0..0]."""
        lo, n = _reference._extent(a.shape, a.strides, a.itemsize)
        shift = (a.ctypes.data + lo) % 256  # keep the host alignment (misaligned views)
        base = self.alloc(n + shift + 1) + shift
        if n:
            host = np.ctypeslib.as_array((ctypes.c_ubyte * n).from_address(a.ctypes.data + lo))
            self.write(base, host)
        return base - lo

    def get(self, ptr: int, like: np.ndarray) -> np.ndarray:
        lo, n = _reference._extent(like.shape, like.strides, like.itemsize)
        if n == 0:
            return like.copy()
        buf, off = self._find(ptr + lo, n)
        return np.ndarray(like.shape, like.dtype, buf, off - lo, like.strides).copy()


def run_ops(mem: FakeMemory, ops, sms: int = 4) -> None:
    """Execute planned operations on fake memory with the reference kernels."""
    for op in ops:
        if isinstance(op, _plan.Memcpy):
            mem.write(op.dst, mem.read(op.src, op.nbytes))
        elif isinstance(op, _plan.Memset):
            w = op.bits // 8
            mem.write(op.dst, np.full(op.words, op.value, f"u{w}").view(np.uint8))
        elif isinstance(op, _plan.Memcpy2D):
            for r in range(op.height):
                mem.write(op.dst + r * op.dst_pitch, mem.read(op.src + r * op.src_pitch, op.width))
        else:
            ref = _reference.reference_kernel(op.spec)
            params = [_launch.params_for(op)]
            for addr, n, _ in ref.accesses(params):
                mem._find(addr, n)  # declared extents lie in allocations
            block = (32, 8, 1) if op.spec.family == "transpose" else (256, 1, 1)
            ref.run(mem, _launch.grid_for(op, sms), block, 0, params)


def fake_copy(dst: np.ndarray, src: np.ndarray):
    """``dst[...] = src`` (cast) through plan + reference kernels; returns the result."""
    mem = FakeMemory()
    dp, sp = mem.put(dst), mem.put(src)
    ops = _plan.plan_copy(dp, dst.strides, dst.dtype, sp, src.strides, src.dtype, dst.shape)
    run_ops(mem, ops)
    return mem.get(dp, dst), ops


def fake_fill(dst: np.ndarray, value):
    mem = FakeMemory()
    dp = mem.put(dst)
    ops = _plan.plan_fill(dp, dst.strides, dst.dtype, dst.shape, value)
    run_ops(mem, ops)
    return mem.get(dp, dst), ops


def _layouts(d, s, rng):
    """(label, dst view, src view) for one dtype pair."""
    D = _dtypes.code_dtype(d)
    src = _sample(s, (6, 7), rng)
    x3 = _sample(s, (3, 20, 17), rng)
    yield "C", np.zeros((6, 7), D), src
    yield "F", np.zeros((6, 7), D, order="F"), src
    yield "T", np.zeros((17, 20), D), x3[1].T
    yield "batched T", np.zeros((3, 17, 20), D), x3.transpose(0, 2, 1)
    yield "sliced", np.zeros((3, 3), D), src[::2, 1::2]
    yield "negative", np.zeros((6, 7), D)[::-1, :], src[:, ::-1]
    yield "broadcast", np.zeros((4, 6, 7), D), np.broadcast_to(src[:, :1], (4, 6, 7))
    yield "0-d", np.zeros((), D), src[2:3, 3:4].reshape(())
    yield "size 0", np.zeros((0, 7), D), src[:0]


@pytest.mark.parametrize("d", CAST)
def test_reference_copy_matches_numpy_for_every_pair_and_layout(d):
    rng = np.random.default_rng(CAST.index(d))
    for s in CAST:
        for label, dst, src in _layouts(d, s, rng):
            out, ops = fake_copy(dst, src)
            expect = _astype(src, dst.dtype)
            assert np.array_equal(out, expect), (d, s, label, ops)
            if label == "size 0":
                assert ops == []


def test_reference_copy_of_any_dtype_moves_bytes():
    rec = np.dtype([("a", "i2"), ("b", "f8"), ("c", "u1")])  # itemsize 11
    rng = np.random.default_rng(5)
    src = np.zeros((5, 6), rec)
    src["a"], src["b"], src["c"] = rng.integers(0, 99, (5, 6)), rng.random((5, 6)), 7
    out, _ = fake_copy(np.zeros((6, 5), rec), src.T)
    assert out.tobytes() == np.ascontiguousarray(src.T).tobytes()
    dt = np.dtype("datetime64[ns]")
    src = np.arange(12).astype(dt).reshape(3, 4)
    out, ops = fake_copy(np.zeros((4, 3), dt), src.T)
    assert (out == src.T).all()


def test_reference_unaligned_operands():
    rng = np.random.default_rng(6)
    raw = np.zeros(8 * 40 + 16, np.uint8)
    dst = np.ndarray((40,), np.float64, raw, 3, (8,))
    src = _sample("f4", (40,), rng)
    out, ops = fake_copy(dst, src)
    assert np.array_equal(out, src.astype(np.float64)) and ops[0].spec.variant == "u"
    raws = np.zeros(4 * 80 + 16, np.uint8)
    srcu = np.ndarray((40,), np.float32, raws, 1, (8,))
    srcu[...] = src
    out, ops = fake_copy(np.zeros(40, np.float32), srcu)  # same dtype: raw units of 1 byte
    assert np.array_equal(out, src) and ops[0].spec.dst == "u1"


@pytest.mark.parametrize("dtype", ["b1", "i1", "u2", "f2", "i4", "f4", "f8", "i8", "c8", "c16"])
def test_reference_fill_matches_numpy(dtype):
    D = _dtypes.code_dtype(dtype)
    values = {"b1": [True, False], "c8": [1.5 - 2j, 0], "c16": [2.5 + 1j, 0j, -0.0]}.get(
        dtype, [3, 0, 1, -1 if D.kind != "u" else 255])
    if D.kind == "f":
        values = [1.5, 0.0, -0.0, np.inf, 2.0]
    raw = np.zeros(D.itemsize * 50 + 8, np.uint8)
    views = [np.zeros((5, 7), D), np.zeros((5, 7), D)[::2, 1:], np.zeros((5, 7), D).T[::-1],
             np.zeros((), D), np.zeros((0, 3), D), np.ndarray((50,), D, raw, 1, (D.itemsize,)),
             np.zeros((2,) * 10, D)[::-1].transpose(9, 8, 7, 6, 5, 0, 1, 2, 3, 4)]
    for v in values:
        for view in views:
            out, _ = fake_fill(view, v)
            expect = view.copy()
            expect[...] = v
            assert out.tobytes() == expect.tobytes(), (dtype, v, view.strides)


def test_reference_fill_of_odd_sized_records():
    rec = np.dtype([("a", "u1"), ("b", "<u2")])  # 3 bytes, no alignment
    value = np.zeros((), rec)
    value["a"], value["b"] = 1, 0x0302
    for view in (np.zeros(7, rec), np.zeros((4, 5), rec)[::-1, ::2], np.zeros((), rec)):
        out, _ = fake_fill(view, value[()])
        expect = view.copy()
        expect[...] = value
        assert out.tobytes() == expect.tobytes()


def test_fill_value_follows_numpy_assignment():
    with pytest.raises(OverflowError):
        _plan.plan_fill(256, (1,), "int8", (4,), 300)
    with pytest.raises(ValueError):
        _plan.plan_fill(256, (4,), "int32", (4,), float("nan"))
    out, _ = fake_fill(np.zeros(4, np.uint8), np.int64(300))  # NumPy scalars wrap
    assert (out == 44).all()
    with pytest.warns(RuntimeWarning, match="overflow"):  # as NumPy assignment warns
        out, _ = fake_fill(np.zeros(3, np.float16), 1e10)
    assert np.isinf(out).all()
    with pytest.raises(TypeError):
        _plan.plan_fill(256, (8,), object, (4,), 1)


def test_reference_accesses_cover_negative_and_broadcast_extents():
    src = np.arange(20, dtype=np.float32)[::-2]
    mem = FakeMemory()
    sp = mem.put(src)
    dp = mem.alloc(10 * 8)
    (op,) = _plan.plan_copy(dp, (8,), "f8", sp, src.strides, src.dtype, (10,))
    ref = _reference.reference_kernel(op.spec)
    (s_addr, s_n, s_w), (d_addr, d_n, d_w) = ref.accesses([_launch.params_for(op)])
    assert (s_addr, s_n, s_w) == (sp - 9 * 8, 9 * 8 + 4, False)
    assert (d_addr, d_n, d_w) == (dp, 80, True)


def test_reference_out_of_bounds_access_raises():
    mem = FakeMemory()
    sp = mem.alloc(100 * 4)
    dp = mem.alloc(200 * 8)
    ops = _plan.plan_copy(dp, (8,), "f8", sp, (4,), "f4", (200,))  # source too short
    with pytest.raises(CudaError) as ei:
        run_ops(mem, ops)
    assert ei.value.code == 700
    ops = _plan.plan_copy(dp, (8,), "f8", sp + 396, (-4,), "f4", (150,))  # runs off the front
    with pytest.raises(CudaError):
        run_ops(mem, ops)


def test_reference_variants_ignore_what_the_cuda_kernel_ignores():
    mem = FakeMemory()
    src = np.arange(12, dtype=np.int16).reshape(3, 4)
    sp = mem.put(src.T)
    dp = mem.alloc(12 * 4)
    (op,) = _plan.plan_copy(dp, (12, 4), "f4", sp, src.T.strides, "i2", (4, 3))
    assert op.spec.variant == "d"
    p = _launch.params_for(op)
    p.dst_strides[0], p.dst_strides[1] = 999, 999  # the d variant never reads them
    _reference.reference_kernel(op.spec).run(mem, (1, 1, 1), (256, 1, 1), 0, [p])
    assert (mem.get(dp, np.zeros((4, 3), np.float32)) == src.T).all()


def test_reference_checks_the_launch_configuration():
    mem = FakeMemory()
    dp = mem.alloc(64)
    (op,) = _plan.plan_fill(dp, (16,), "c16", (4,), 1 + 1j)
    ref = _reference.reference_kernel(op.spec)
    with pytest.raises(CudaError, match="assumes block"):
        ref.run(mem, (1, 1, 1), (128, 1, 1), 0, [_launch.params_for(op)])


# ============================================================== planning
def test_plan_contiguous_same_dtype_is_one_memcpy():
    assert _plan.plan_copy(256, (4,), "f4", 4096, (4,), "f4", (10,)) == [_plan.Memcpy(256, 4096, 40)]
    # Fortran to Fortran, and reversed to reversed, are contiguous too
    assert _plan.plan_copy(256, (4, 12), "f4", 4096, (4, 12), "f4", (3, 5)) == [
        _plan.Memcpy(256, 4096, 60)]
    assert _plan.plan_copy(256 + 36, (-4,), "i4", 4096 + 36, (-4,), "u4", (10,)) == [
        _plan.Memcpy(256, 4096, 40)]
    assert _plan.plan_copy(256, (), "c16", 4096, (), "c16", ()) == [_plan.Memcpy(256, 4096, 16)]


def test_plan_wide_rows_use_memcpy2d_and_narrow_rows_the_kernel():
    ops = _plan.plan_copy(256, (1024 * 4, 4), "f4", 8192, (4096 * 4, 4), "f4", (100, 1000))
    assert ops == [_plan.Memcpy2D(256, 4096, 8192, 16384, 4000, 100)]
    (op,) = _plan.plan_copy(256, (40, 4), "f4", 8192, (4096 * 4, 4), "f4", (100, 10))
    assert op.spec.family == "copy" and op.spec.variant == "d" and op.spec.dst == "u4"


def test_plan_transposes():
    (op,) = _plan.plan_copy(256, (400, 4), "f4", 1 << 20, (4, 400), "f4", (100, 100))
    assert op.spec.symbol == "ga_transpose__u4__u4__i32"
    assert (op.fields["rows"], op.fields["cols"], op.fields["batch"]) == (100, 100, 1)
    # NCHW -> NHWC: batch 32, rows H*W, cols C
    n, c, h, w = 32, 256, 56, 56
    src = (c * h * w * 2, h * w * 2, w * 2, 2)
    dst = (h * w * c * 2, 2, w * c * 2, c * 2)  # NHWC memory, indexed as NCHW
    (op,) = _plan.plan_copy(256, dst, "f2", 1 << 40, src, "f2", (n, c, h, w))
    assert op.spec.family == "transpose" and op.spec.dst == "u2"
    assert (op.fields["batch"], op.fields["rows"], op.fields["cols"]) == (n, h * w, c)
    (op,) = _plan.plan_copy(256, (200, 2), "f2", 1 << 20, (8, 800), "f8", (100, 100))
    assert op.spec.symbol == "ga_transpose__f2__f8__i32"
    (op,) = _plan.plan_copy(256, (16, 4), "f4", 1 << 20, (4, 16), "f4", (4, 4))  # too small
    assert op.spec.family == "copy"


def test_plan_conversion_variants():
    (op,) = _plan.plan_copy(256, (2,), "f2", 4096, (4,), "f4", (1000,))
    assert op.spec.symbol == "ga_copy__f2__f4__1__i32__c"
    (op,) = _plan.plan_copy(256, (8,), "f8", 4096, (8,), "f4", (1000,))
    assert op.spec.variant == "d"  # destination contiguous, source strided
    (op,) = _plan.plan_copy(256, (16,), "f8", 4096, (8,), "f4", (1000,))
    assert op.spec.variant == "g"
    (op,) = _plan.plan_copy(257, (8,), "f8", 4096, (4,), "f4", (1000,))
    assert op.spec.variant == "u"


def test_plan_many_dimensions_loop_over_outer_ones():
    shape = (2,) * 10
    src = np.zeros(shape, np.float32).transpose(9, 7, 5, 3, 1, 0, 2, 4, 6, 8)
    ops = _plan.plan_copy(256, np.zeros(shape, np.float64).strides, "f8", 1 << 20, src.strides,
                          "f4", shape)
    assert len(ops) == 4 and all(op.spec.ndim == _specs.MAX_NDIM for op in ops)


def test_plan_fill_memsets():
    assert _plan.plan_fill(256, (4,), "f4", (10,), 0) == [_plan.Memset(256, 8, 0, 40)]
    assert _plan.plan_fill(256, (2,), "i2", (10,), 257) == [_plan.Memset(256, 8, 1, 20)]
    assert _plan.plan_fill(256, (2,), "f2", (10,), 1.0) == [_plan.Memset(256, 16, 0x3C00, 10)]
    assert _plan.plan_fill(256, (4,), "f4", (10,), 1.0) == [_plan.Memset(256, 32, 0x3F800000, 10)]
    assert _plan.plan_fill(256, (8,), "i8", (10,), 0x0000000500000005) == [
        _plan.Memset(256, 32, 5, 20)]
    assert _plan.plan_fill(256, (16,), "c16", (10,), 0) == [_plan.Memset(256, 8, 0, 160)]
    (op,) = _plan.plan_fill(256, (16,), "c16", (10,), 1 + 0j)
    assert op.spec.symbol == "ga_fill__v16__1__i32__c"
    (op,) = _plan.plan_fill(256, (8,), "f8", (10,), 1.5)
    assert op.spec.symbol == "ga_fill__u8__1__i32__c"
    (op,) = _plan.plan_fill(256, (16,), "f8", (10,), 1.5)
    assert op.spec.symbol == "ga_fill__u8__1__i32__g"
    assert _plan.plan_fill(256, (12, 4), "f4", (0, 3), 1.5) == []


def test_plan_rejects_bad_arguments():
    with pytest.raises(ValueError, match="zero stride"):
        _plan.plan_copy(256, (0,), "f4", 4096, (4,), "f4", (10,))
    with pytest.raises(ValueError, match="do not match"):
        _plan.plan_copy(256, (4,), "f4", 4096, (4, 4), "f4", (10,))
    with pytest.raises(TypeError, match="cannot convert"):
        _plan.plan_copy(256, (8,), "f8", 4096, (16,), np.longdouble, (10,))
    with pytest.raises(TypeError, match="byte order"):
        _plan.plan_copy(256, (4,), ">f4", 4096, (8,), "f8", (10,))
    with pytest.raises(TypeError):
        _plan.plan_copy(256, (8,), object, 4096, (8,), object, (10,))


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 2**31 - 1), d=st.integers(1, 2**31 - 1))
def test_divider_matches_integer_division(n, d):
    magic, shift = _specs.divider(d)
    t = (n * magic) >> 32
    assert ((t + n) & 0xFFFFFFFF) >> shift == n // d


def test_divider_edge_cases():
    for d in (1, 2, 3, 7, 255, 256, 65535, 65537, 2**30, 2**30 + 1, 2**31 - 1):
        magic, shift = _specs.divider(d)
        assert magic < 2**32
        for n in (0, 1, d - 1, d, d + 1, 2**31 - 1, 2**31 - 2, (2**31 - 1) // d * d):
            assert ((((n * magic) >> 32) + n) & 0xFFFFFFFF) >> shift == n // d


@settings(max_examples=150, deadline=None)
@given(shape=st.lists(st.integers(0, 4), min_size=0, max_size=5), data=st.data())
def test_normalize_preserves_the_element_mapping(shape, data):
    """Flip/sort/merge never changes which source element lands where."""
    size = math.prod(shape)
    src = np.arange(size, dtype=np.int32).reshape(shape)
    perm = list(data.draw(st.permutations(range(len(shape)))))
    steps = [data.draw(st.sampled_from([1, -1, 2])) for _ in shape]
    base = np.zeros([2 * shape[p] for p in perm], np.int32)
    dst = base.transpose(np.argsort(perm))  # original axis order, permuted memory order
    if shape:
        dst = dst[tuple(slice(None, None, s) for s in steps)][tuple(slice(0, n) for n in shape)]
    assert dst.shape == src.shape
    out, _ = fake_copy(dst, src)
    assert np.array_equal(out, src)


# ================================================ launches through a backend
def _backend(kind, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("GPUARRAY_BACKEND", kind)
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE_DIR",
                       os.environ.get("GPUARRAY_KERNEL_CACHE_DIR")
                       or str(tmp_path_factory.getbasetemp() / "kernel-cache"))
    _driver.set_backend(None)
    b = _driver.get_backend()
    try:
        b.init()
    except Exception as e:  # CudaUnavailableError without a GPU
        _driver.set_backend(None)
        pytest.skip(f"no {kind} backend: {e}")
    ctx = b.primary_ctx_retain(0)
    b.ctx_set_current(ctx)
    return b


@pytest.fixture(params=["sim", pytest.param("cuda", marks=pytest.mark.gpu)])
def backend(request, monkeypatch, tmp_path_factory):
    if request.param == "sim":
        pytest.importorskip("gpuarray._driver.sim", reason="the simulator backend is not built yet")
    b = _backend(request.param, monkeypatch, tmp_path_factory)
    yield b
    b.ctx_synchronize()
    _loader.forget_loaded(b)
    _driver.set_backend(None)


def _upload(b, a: np.ndarray) -> tuple[int, int]:
    """Allocate the extent of view ``a`` and copy it; returns (element [0..0] address, base)."""
    lo, n = _reference._extent(a.shape, a.strides, a.itemsize)
    shift = (a.ctypes.data + lo) % 256  # keep the host alignment (misaligned views)
    base = b.mem_alloc(n + shift + 1)
    if n:
        host = np.ctypeslib.as_array((ctypes.c_ubyte * n).from_address(a.ctypes.data + lo)).copy()
        b.memcpy_htod_async(base + shift, host.ctypes.data, n, 1)
        b.stream_synchronize(1)
    return base + shift - lo, base


def _download(b, ptr: int, like: np.ndarray) -> np.ndarray:
    lo, n = _reference._extent(like.shape, like.strides, like.itemsize)
    if n == 0:
        return like.copy()
    host = np.zeros(n, np.uint8)
    b.memcpy_dtoh_async(host.ctypes.data, ptr + lo, n, 1)
    b.stream_synchronize(1)
    return np.ndarray(like.shape, like.dtype, host, -lo, like.strides).copy()


_LAUNCH_PAIRS = [("f4", "f8"), ("f2", "f4"), ("i1", "f8"), ("c8", "c16"), ("b1", "c16"),
                 ("f8", "f8"), ("u1", "u1"), ("c16", "c16")]


@pytest.mark.parametrize("d,s", _LAUNCH_PAIRS)
def test_launch_copy_matches_numpy(backend, d, s):
    rng = np.random.default_rng(11)
    for label, dst, src in _layouts(d, s, rng):
        dp, dbase = _upload(backend, dst)
        sp, sbase = _upload(backend, src)
        from gpuarray import _kernels

        _kernels.copy(dp, dst.strides, dst.dtype, sp, src.strides, src.dtype, dst.shape, 1)
        out = _download(backend, dp, dst)
        assert np.array_equal(out, _astype(src, dst.dtype)), (d, s, label)
        backend.mem_free(dbase)
        backend.mem_free(sbase)


@pytest.mark.parametrize("dtype,value", [("f8", 1.5), ("c16", 1 - 1j), ("f4", 0.0), ("i2", -3),
                                         ("u1", 7), ("b1", True)])
def test_launch_fill_matches_numpy(backend, dtype, value):
    from gpuarray import _kernels

    D = _dtypes.code_dtype(dtype)
    for view in (np.zeros((33, 5), D), np.zeros((33, 5), D)[::-3, 1:], np.zeros((), D)):
        dp, base = _upload(backend, view)
        _kernels.fill(dp, view.strides, view.dtype, view.shape, value, 1)
        expect = view.copy()
        expect[...] = value
        assert np.array_equal(_download(backend, dp, view), expect)
        backend.mem_free(base)


def test_launch_size_zero_issues_nothing(backend, monkeypatch):
    from gpuarray import _kernels

    calls = []
    for name in ("launch_kernel", "memcpy_dtod_async", "memset_d8_async", "memcpy_2d_async"):
        monkeypatch.setattr(backend, name, lambda *a, _n=name: calls.append(_n))
    _kernels.copy(256, (4, 4), "f4", 512, (8, 8), "f8", (0, 1), 1)
    _kernels.fill(256, (8,), "f8", (0,), 1.5, 1)
    assert calls == []


def test_launch_loads_each_kernel_once_per_context(backend, monkeypatch):
    from gpuarray import _kernels

    loads = []
    real = backend.module_load_data
    monkeypatch.setattr(backend, "module_load_data", lambda img: loads.append(1) or real(img))
    a = np.arange(64, dtype=np.float64)
    sp, sbase = _upload(backend, a)
    dp, dbase = _upload(backend, np.zeros(64, np.float32))
    for _ in range(3):
        _kernels.copy(dp, (4,), "f4", sp, (8,), "f8", (64,), 1)
    assert len(loads) == 1
    assert (_download(backend, dp, np.zeros(64, np.float32)) == a).all()
    backend.mem_free(sbase)
    backend.mem_free(dbase)


def test_sim_registers_references_and_compiles_the_real_source(backend, monkeypatch):
    if backend.name != "sim":
        pytest.skip("simulator only")
    from gpuarray import _kernels
    from gpuarray._kernels import _cache

    monkeypatch.delenv("GPUARRAY_SIM_COMPILE", raising=False)
    built = []
    real = _cache.get_image
    monkeypatch.setattr(_cache, "get_image", lambda *a, **k: built.append(k) or real(*a, **k))
    dp = backend.mem_alloc(7 * 16)
    _kernels.fill(dp, (16,), "c16", (7,), 2 + 3j, 1)
    sym = "ga_fill__v16__1__i32__c"
    assert isinstance(sim_kernels.lookup(sym), _reference.FillReference)
    assert built == [{"fast": True}]
    # GPUARRAY_SIM_COMPILE=0: a placeholder image, no compilation
    monkeypatch.setenv("GPUARRAY_SIM_COMPILE", "0")
    _loader.forget_loaded(backend)
    built.clear()
    _kernels.fill(dp, (32,), "c16", (3,), 1j, 1)
    assert built == []
    out = _download(backend, dp, np.zeros(7, np.complex128))
    assert list(out) == [1j, 2 + 3j, 1j, 2 + 3j, 1j, 2 + 3j, 2 + 3j]


def test_sim_race_detector_sees_kernel_accesses(backend):
    if backend.name != "sim":
        pytest.skip("simulator only")
    from gpuarray import _kernels
    from gpuarray.errors import StreamOrderError

    s1 = backend.stream_create(non_blocking=True)
    s2 = backend.stream_create(non_blocking=True)
    src = backend.mem_alloc(4096 * 8)
    dst = backend.mem_alloc(4096 * 4)
    backend.memset_d8_async(src, 0, 4096 * 8, s1)
    backend.stream_synchronize(s1)
    _kernels.copy(dst, (4,), "f4", src, (8,), "f8", (4096,), s1)
    with pytest.raises(StreamOrderError):
        _kernels.fill(dst + 4 * 100, (4,), "f4", (10,), 1.5, s2)
        backend.ctx_synchronize()
    backend.ctx_synchronize()
