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
from gpuarray_sim import kernels as sim_kernels
from gpuarray_sim.kernels import _reference
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuarray import _driver
from gpuarray._kernels import _dtypes, _launch, _loader, _plan, _specs
from gpuarray.errors import CudaError

CAST = _dtypes.CAST_CODES


def _astype(x, dt):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(x).astype(dt)


def _sample(code, shape, rng):
    """Values whose conversion to every type is defined (no NaN/inf/out of range)."""
    dt = np.dtype(code) if not isinstance(code, str) else _dtypes.code_dtype(code)
    n = int(np.prod(shape))
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
    assert op.spec.symbol == "ga_transpose__u4__u4__i32__w"
    assert (op.fields["rows"], op.fields["cols"], op.fields["batch"]) == (100, 100, 1)
    (op,) = _plan.plan_copy(256, (404, 4), "f4", 1 << 20, (4, 404), "f4", (101, 101))
    assert op.spec.symbol == "ga_transpose__u4__u4__i32"  # pitches not multiples of 8
    # NCHW -> NHWC: batch 32, rows H*W, cols C
    n, c, h, w = 32, 256, 56, 56
    src = (c * h * w * 2, h * w * 2, w * 2, 2)
    dst = (h * w * c * 2, 2, w * c * 2, c * 2)  # NHWC memory, indexed as NCHW
    (op,) = _plan.plan_copy(256, dst, "f2", 1 << 40, src, "f2", (n, c, h, w))
    assert op.spec.symbol == "ga_transpose__u2__u2__i32__w"
    assert (op.fields["batch"], op.fields["rows"], op.fields["cols"]) == (n, h * w, c)
    (op,) = _plan.plan_copy(256, (200, 2), "f2", 1 << 20, (8, 800), "f8", (100, 100))
    assert op.spec.symbol == "ga_transpose__f2__f8__i32"
    (op,) = _plan.plan_copy(256, (16, 4), "f4", 1 << 20, (4, 16), "f4", (4, 4))  # too small
    assert op.spec.family == "copy"


# the PERF shapes: uint8 32768 x 8192, float16 16384 x 8192, float32 8192 x 8192 (a.T -> C order)
@pytest.mark.parametrize("dtype,shape,word", [("u1", (32768, 8192), 4), ("f2", (16384, 8192), 4),
                                              ("f4", (8192, 8192), 8), ("f8", (4096, 4096), 0)])
def test_plan_word_transposes_for_the_benchmark_shapes(dtype, shape, word):
    k = _dtypes.code_itemsize(dtype)
    r, c = shape
    (op,) = _plan.plan_copy(1 << 20, (r * k, k), dtype, 1 << 34, (k, c * k), dtype, (c, r))
    assert op.spec.family == "transpose" and op.spec.index == "i32"
    assert op.spec.variant == ("w" if word else "")
    if word:
        assert _specs.transpose_word(op.spec) == word
        tile = _specs.transpose_tile(op.spec)
        assert tile == 32 * word // k
        assert _launch.grid_for(op, 132) == (min(8 * 132, (r // tile) * (c // tile)), 1, 1)


def test_plan_word_transpose_falls_back_on_any_misaligned_field():
    # batched u1 transpose, everything a multiple of 4: word kernel
    shape = (3, 40, 48)
    ds = (40 * 48, 1, 48)  # destination (b, c, r) memory: rows of 48
    ss = (40 * 52, 52, 1)  # source (b, c, r): contiguous along r (the last axis)
    good = dict(dst=1 << 20, src=1 << 30, ds=ds, ss=ss)

    def variant(dst, src, ds, ss):
        (op,) = _plan.plan_copy(dst, ds, "u1", src, ss, "u1", shape)
        assert op.spec.family == "transpose"
        return op.spec.variant

    assert variant(**good) == "w"
    for field, bad in [("dst", (1 << 20) + 2), ("src", (1 << 30) + 1),
                       ("ds", (40 * 48 + 2, 1, 48)), ("ss", (40 * 52 + 1, 52, 1)),
                       ("ds", (40 * 50, 1, 50)), ("ss", (40 * 54, 54, 1))]:
        assert variant(**{**good, field: bad}) == "", (field, bad)
    # conversions: equal sizes use words, different sizes never
    (op,) = _plan.plan_copy(1 << 20, ds, "b1", 1 << 30, ss, "u1", shape)
    assert op.spec.symbol == "ga_transpose__b1__u1__i32__w"
    (op,) = _plan.plan_copy(1 << 20, tuple(2 * x for x in ds), "f2", 1 << 30, ss, "u1", shape)
    assert op.spec.variant == ""


def test_plan_word_transposes_can_be_switched_off(monkeypatch):
    args = (256, (400, 4), "f4", 1 << 20, (4, 400), "f4", (100, 100))
    assert _plan.plan_copy(*args)[0].spec.variant == "w"
    monkeypatch.setattr(_plan, "WORD_TRANSPOSE_SIZES", frozenset({1, 2}))
    assert _plan.plan_copy(*args)[0].spec.variant == ""


def test_word_transpose_specs_and_geometry():
    s = _specs.transpose_spec("u1", "u1", "i64", "w")
    assert s.symbol == "ga_transpose__u1__u1__i64__w"
    assert "ga_transpose_w<ga_u1, ga_u1, long long, 4>(a);" in s.instantiation()
    assert _specs.transpose_spec("u4", "u4", "i32").symbol == "ga_transpose__u4__u4__i32"
    geometry = {c: (_specs.transpose_word(_specs.transpose_spec(c, c, "i32", "w")),
                    _specs.transpose_tile(_specs.transpose_spec(c, c, "i32", "w")))
                for c in ("u1", "b1", "i2", "f2", "u4", "f4")}
    assert geometry == {"u1": (4, 128), "b1": (4, 128), "i2": (4, 64), "f2": (4, 64),
                        "u4": (8, 64), "f4": (8, 64)}
    for d, s_ in [("u8", "u8"), ("v16", "v16"), ("f2", "f4"), ("c8", "c8")]:
        with pytest.raises(ValueError, match="word transpose"):
            _specs.transpose_spec(d, s_, "i32", "w")
    with pytest.raises(ValueError, match="variant"):
        _specs.transpose_spec("u1", "u1", "i32", "x")


def _transpose_layouts(code, rng, dcode=None):
    """(label, dst view, src view) of awkward transposes from ``code`` (to ``dcode``)."""
    D = _dtypes.code_dtype(dcode or code)
    for r, c in [(1, 50), (50, 1), (31, 33), (33, 31), (64, 4097), (64, 4096), (200, 300)]:
        yield f"{r}x{c}", np.zeros((c, r), D), _sample(code, (r, c), rng).T
    yield "31x33 padded", np.zeros((33, 40), D)[:, :31], _sample(code, (31, 40), rng)[:, :33].T
    yield "129x127 padded", np.zeros((127, 136), D)[:, :129], _sample(code, (129, 128), rng)[
        :, :127].T
    base = _sample(code, (40, 40), rng)
    yield "src +1", np.zeros((32, 32), D), base[:32, 1:33].T
    yield "negative src pitch", np.zeros((32, 40), D), base[::-1, :32].T
    yield "batch 3x37x45", np.zeros((3, 45, 37), D), _sample(code, (3, 37, 45), rng).transpose(
        0, 2, 1)
    yield "batch 5x36x44 padded", np.zeros((5, 44, 40), D)[:, :, :36], _sample(
        code, (5, 36, 48), rng)[:, :, :44].transpose(0, 2, 1)
    yield "NCHW", np.zeros((3, 6, 6, 24), D).transpose(0, 3, 1, 2), _sample(code, (3, 24, 6, 6), rng)


@pytest.mark.parametrize("code", ["u1", "i1", "b1", "i2", "u2", "f2", "f4", "i4"])
def test_reference_transposes_match_numpy(code):
    rng = np.random.default_rng(17)
    variants = set()
    for label, dst, src in _transpose_layouts(code, rng):
        out, ops = fake_copy(dst, src)
        assert np.array_equal(out, src), (code, label, ops)
        variants |= {op.spec.variant for op in ops if isinstance(op, _plan.Launch)
                     and op.spec.family == "transpose"}
    assert variants == {"", "w"}
    # same-size conversions through the word kernel
    other = {"u1": "b1", "i1": "u1", "b1": "i1", "i2": "f2", "u2": "f2", "f2": "i2",
             "f4": "i4", "i4": "f4"}[code]
    variants.clear()
    for label, dst, src in _transpose_layouts(code, rng, other):
        out, ops = fake_copy(dst, src)
        assert np.array_equal(out, _astype(src, dst.dtype)), (code, other, label, ops)
        variants |= {op.spec.variant for op in ops if isinstance(op, _plan.Launch)
                     and op.spec.family == "transpose"}
    assert variants == {"", "w"}


def test_reference_word_transpose_refuses_misaligned_parameters():
    mem = FakeMemory()
    src = np.arange(64 * 48, dtype=np.uint8).reshape(64, 48)
    sp = mem.put(src)
    dp = mem.alloc(64 * 48 + 64)
    (op,) = _plan.plan_copy(dp, (64, 1), "u1", sp, (1, 48), "u1", (48, 64))
    assert op.spec.variant == "w"
    ref = _reference.reference_kernel(op.spec)
    for field, delta in [("dst", 1), ("src", 2), ("dst_pitch", 1), ("src_pitch", 3),
                         ("dst_bstride", 2), ("src_bstride", 1)]:
        p = _launch.params_for(op)
        setattr(p, field, getattr(p, field) + delta)
        if field.endswith("bstride"):
            p.batch = 2  # with one batch the kernel only ever adds 0 * stride
        with pytest.raises(CudaError, match="misaligned") as ei:
            ref.run(mem, (1, 1, 1), (32, 8, 1), 0, [p])
        assert ei.value.code == 716 and field in str(ei.value)
    p = _launch.params_for(op)
    ref.run(mem, (3, 1, 1), (32, 8, 1), 0, [p])
    assert (mem.get(dp, np.zeros((48, 64), np.uint8)) == src.T).all()


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
        pytest.importorskip("gpuarray_sim", reason="the simulator backend is not built yet")
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


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float16, np.float32, np.bool_])
def test_array_transpose_copy_matches_numpy(backend, dtype, monkeypatch):
    """``to_device(x).T.copy()`` and batched permutes: word kernel or fallback, NumPy's answer."""
    import gpuarray

    chosen = []
    real = _plan.plan_copy

    def spy(*a, **k):
        ops = real(*a, **k)
        chosen.extend(op.spec.variant for op in ops
                      if isinstance(op, _plan.Launch) and op.spec.family == "transpose")
        return ops

    monkeypatch.setattr(_plan, "plan_copy", spy)

    def arange(n):  # distinct-ish values, exact in every dtype (uint8 wraps, as astype does)
        return np.arange(n).astype(dtype) if dtype == np.uint8 else (
            np.arange(n) % (3 if dtype == np.bool_ else 2039)).astype(dtype)

    for a, b in [(64, 4096), (4096, 64), (31, 33), (33, 31), (1, 50), (50, 1), (200, 300),
                 (64, 4097), (129, 127)]:
        host = arange(a * b).reshape(a, b)
        out = gpuarray.to_device(host).T.copy().copy_to_host()
        assert out.shape == (b, a) and np.array_equal(out, host.T), (a, b)
    host = arange(3 * 24 * 36).reshape(3, 24, 6, 6)  # NCHW -> NHWC
    out = gpuarray.to_device(host).transpose(0, 2, 3, 1).copy().copy_to_host()
    assert np.array_equal(out, host.transpose(0, 2, 3, 1))
    host = arange(40 * 48).reshape(40, 48)
    out = gpuarray.to_device(host)[:, 1:45].T.copy().copy_to_host()  # misaligned pointer
    assert np.array_equal(out, host[:, 1:45].T)
    assert "w" in chosen and "" in chosen


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
    from gpuarray_sim.kernels import _host

    if _host.mode() == "ptx":  # the PTX of the image runs: built as for a GPU, no resolver
        assert sim_kernels.lookup(sym) is None
        assert [k["fast"] for k in built] == [False] and built[0]["toolchain"] is not None
        return
    kind = _host.HostKernel if _host.mode() == "host" else _reference.FillReference
    assert isinstance(sim_kernels.lookup(sym), kind)
    assert [k["fast"] for k in built] == [True] and built[0]["toolchain"] is not None
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


def test_every_planned_symbol_parses_back_to_its_spec_and_resolves():
    from gpuarray._kernels import _specs

    specs = [_specs.copy_spec(d, s, nd, i, v)
             for d, s in (("f4", "f8"), ("b1", "c16"), ("v16", "v16"))
             for nd in (1, 3, 8) for i in ("i32", "i64") for v in "gdu"]
    specs += [_specs.copy_spec("u1", "f2", 1, "i32", "c"), _specs.fill_spec("v16", 2, "i64", "g"),
              _specs.transpose_spec("f2", "f8", "i64"), _specs.transpose_spec("u1", "b1", "i32", "w")]
    from gpuarray_sim.kernels import _host

    for spec in specs:
        assert _specs.parse_symbol(spec.symbol) == spec
        impl = sim_kernels.lookup(spec.symbol)
        if _host.mode() == "ptx":  # left to the PTX of the image
            assert impl is None
            continue
        assert impl is sim_kernels.gpuarray_kernel(spec.symbol) and impl.spec == spec
        assert impl.param_types == (_specs.params_type(spec.family, spec.ndim, spec.index),)


@pytest.mark.parametrize("name", ["ga_copy__f4__f8__9__i32__g", "ga_copy__f4__q9__1__i32__g",
                                  "ga_fill__u3__1__i32__c", "ga_transpose__f4__f4__i32__x",
                                  "ga_copy__f4__f4__01__i32__g", "my_kernel", ""])
def test_names_that_are_not_gpuarray_kernels_do_not_resolve(name):
    from gpuarray._kernels import _specs

    with pytest.raises(ValueError, match="not a gpuarray kernel"):
        _specs.parse_symbol(name)
    assert sim_kernels.gpuarray_kernel(name) is None and sim_kernels.lookup(name) is None
