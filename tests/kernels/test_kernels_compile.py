"""The CUDA sources of ``kernels/`` compile, and compute what NumPy computes.

Two compilers, no GPU needed:

- NVRTC (a dependency, so these never skip): every kernel family --
  conversions covering every source and destination type, every variant,
  1..8 dimensions, 32- and 64-bit indices, fills of every unit, transposes
  of every unit, word transposes (``w``: 1, 2 and 4-byte elements, raw and
  converting, both index widths) -- for EVERY architecture NVRTC supports (with the fast
  options the simulator uses), the same with the release options for the
  oldest supported architecture and sm_90, and all 14 x 14 conversion pairs
  in one translation unit.
- the host C++ compiler (skipped without one): the same sources as the
  simulator runs them (``gpuarray_sim.kernels._host``: ``sim/gpuarray_sim/kernels/ga_host.cuh``,
  every thread of every block as fibers, ``__syncthreads`` a barrier), driven
  by the real planner and parameter blocks on host memory, checked against
  NumPy.  This runs the kernels' index math, vector paths, variants and
  conversions; only the float16 hardware conversions (``cvt``) and
  ``__byte_perm`` are replaced by their bit-level equivalents.  Each launch
  may touch only its operands' byte extents (an access outside is a
  fault), the transposes also run with guard bytes around every
  destination and, in a child process, with operands that end at an
  unreadable page.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from gpuarray_sim.kernels import _host

from gpuarray._kernels import _cache, _dtypes, _nvrtc, _plan, _source, _specs
from gpuarray.errors import NvrtcError
from sim.tests.hostrt.test_kernels_host import _execute
from sim.tests.hostrt.test_kernels_reference import _astype, _sample

CAST = _dtypes.CAST_CODES
RAW = list(_dtypes.RAW_CODES.values())


def representative_specs() -> list:
    """Every family, variant, type (as source and as destination), ndim 1..8, i32/i64."""
    specs = []
    for i, d in enumerate(CAST):
        specs.append(_specs.copy_spec(d, CAST[(i + 1) % 14], 1 + i % 8,
                                      "i32" if i % 2 else "i64", "gdu"[i % 3]))
        specs.append(_specs.copy_spec(d, CAST[(i + 5) % 14], 1, "i64" if i % 2 else "i32", "c"))
    for j, r in enumerate(RAW):
        specs.append(_specs.copy_spec(r, r, 1 + (3 * j) % 8, "i32", "d"))
        specs.append(_specs.copy_spec(r, r, 8, "i64", "g"))
        for idx in ("i32", "i64"):
            specs.append(_specs.fill_spec(r, 1 + j, idx, "g"))
            specs.append(_specs.fill_spec(r, 1, idx, "c"))
            specs.append(_specs.transpose_spec(r, r, idx))
    specs.append(_specs.transpose_spec("f2", "f4", "i32"))
    specs.append(_specs.transpose_spec("c16", "b1", "i64"))
    # word transposes: one per element size (each has its own register transpose)
    for r, idx in [("u1", "i32"), ("u2", "i64"), ("u4", "i32")]:
        specs.append(_specs.transpose_spec(r, r, idx, "w"))
    return specs


def word_transpose_specs() -> list:
    """Word transposes: every element size with both index widths, raw and converting."""
    return [_specs.transpose_spec(d, s, idx, "w") for d, s, idx in [
        ("u1", "u1", "i32"), ("u1", "u1", "i64"), ("b1", "i1", "i32"), ("u2", "u2", "i32"),
        ("u2", "u2", "i64"), ("f2", "i2", "i64"), ("u4", "u4", "i32"), ("i4", "f4", "i64")]]


def _compile(specs, target, fast):
    src = _specs.program_source(specs)
    return _nvrtc.compile_program(src, _source.kernel_headers(),
                                  _nvrtc.compile_options(target, fast=fast), target.kind)


# =================================================================== NVRTC
def test_required_architectures_are_supported():
    archs = set(_nvrtc.supported_archs())
    assert {75, 80, 90, 100} <= archs, sorted(archs)


def test_representative_set_covers_every_type_and_variant():
    specs = representative_specs()
    copies = [s for s in specs if s.family == "copy" and s.dst in CAST and s.dst != s.src]
    assert {s.dst for s in copies} == set(CAST) and {s.src for s in copies} == set(CAST)
    assert {s.variant for s in specs if s.family == "copy"} == {"g", "d", "u", "c"}
    assert {s.ndim for s in specs if s.family == "copy"} == set(range(1, 9))
    assert {s.index for s in specs} == {"i32", "i64"}
    assert {s.dst for s in specs if s.family == "fill"} == set(RAW)
    assert {s.dst for s in specs if s.family == "transpose"} >= set(RAW)
    words = [s for s in specs if s.family == "transpose" and s.variant == "w"]
    assert {_dtypes.code_itemsize(s.src) for s in words} == {1, 2, 4}
    words = word_transpose_specs()
    size = {s: _dtypes.code_itemsize(s.src) for s in words}
    assert {(size[s], s.index) for s in words} == {(e, i) for e in (1, 2, 4) for i in ("i32", "i64")}
    assert {size[s] for s in words if s.dst != s.src} == {1, 2, 4}
    assert {_specs.transpose_word(s) for s in words} == {4, 8}
    assert len({s.symbol for s in specs}) == len(specs)


def test_every_family_compiles_for_every_supported_architecture():
    specs = representative_specs()
    times = {}
    for arch in _nvrtc.supported_archs():
        t0 = time.perf_counter()
        image = _compile(specs, _nvrtc.Target("cubin", f"sm_{arch}"), fast=True)
        times[arch] = time.perf_counter() - t0
        assert image[:4] == b"\x7fELF"
        for s in specs:
            assert s.symbol.encode() in image, (arch, s.symbol)
    print(f"fast compile of {len(specs)} kernels per arch:",
          {a: round(t, 2) for a, t in times.items()})


@pytest.mark.parametrize("arch", sorted({min(_nvrtc.supported_archs()), 90}))
def test_every_family_compiles_with_release_options(arch):
    specs = list(dict.fromkeys(representative_specs() + word_transpose_specs()))
    image = _compile(specs, _nvrtc.Target("cubin", f"sm_{arch}"), fast=False)
    assert image[:4] == b"\x7fELF"
    for s in specs:
        assert s.symbol.encode() in image, (arch, s.symbol)


def test_all_conversion_pairs_compile_in_one_unit():
    specs = [_specs.copy_spec(d, s, 1, "i32", "c") for d in CAST for s in CAST]
    image = _compile(specs, _nvrtc.select_target(9, 0), fast=True)
    assert all(s.symbol.encode() in image for s in specs)


def test_ptx_fallback_names_every_entry():
    specs = [_specs.copy_spec("f2", "f8", 3, "i64", "g"), _specs.fill_spec("v16", 1, "i32", "c"),
             _specs.transpose_spec("u1", "u1", "i32"), _specs.transpose_spec("u1", "u1", "i32", "w"),
             _specs.transpose_spec("u4", "u4", "i64", "w")]
    arch = min(_nvrtc.supported_archs())
    ptx = _compile(specs, _nvrtc.Target("ptx", f"compute_{arch}"), fast=False)
    assert ptx.endswith(b"\0")
    text = ptx.decode()
    for s in specs:
        assert f".entry {s.symbol}(" in text


def test_select_target():
    archs = _nvrtc.supported_archs()
    assert _nvrtc.select_target(9, 0) == _nvrtc.Target("cubin", "sm_90")
    newest = max(archs)
    future = _nvrtc.select_target(newest // 10 + 5, 0)
    assert future == _nvrtc.Target("ptx", f"compute_{newest}")
    between = [a for a in range(min(archs), newest) if a not in archs and a % 10 < 10]
    if between:
        a = between[0]
        t = _nvrtc.select_target(a // 10, a % 10)
        assert t.kind == "ptx" and int(t.arch.split("_")[1]) == max(x for x in archs if x < a)
    with pytest.raises(NvrtcError, match="cannot compile for compute capability 3.5"):
        _nvrtc.select_target(3, 5)


def test_compile_error_carries_log_options_and_numbered_source():
    src = '#include "ga_common.cuh"\nextern "C" __global__ void broken() { undefined_name; }\n'
    opts = _nvrtc.compile_options(_nvrtc.Target("cubin", "sm_90"))
    with pytest.raises(NvrtcError) as ei:
        _nvrtc.compile_program(src, _source.kernel_headers(), opts, "cubin")
    e = ei.value
    assert "undefined_name" in e.log and e.options == opts
    assert "   2 | extern" in str(e) and "NVRTC_ERROR_COMPILATION" in str(e)
    assert pickle.loads(pickle.dumps(e)).log == e.log


def test_large_arrays_select_64_bit_indexing_which_compiles():
    n = 2**31 + 7
    (op,) = _plan.plan_copy(0x10000, (4,), "f4", 0x10000 + 8 * n + 4096, (8,), "f8", (n,))
    assert op.spec.index == "i64" and op.spec.variant == "c"
    small = _plan.plan_copy(0x10000, (4,), "f4", 0x90000000, (8,), "f8", (1000,))[0]
    assert small.spec.index == "i32"
    # a strided view whose byte extent passes 2**31 with few elements
    (op2,) = _plan.plan_copy(0x10000, (4,), "f4", 0x10000000, (2**29,), "f4", (9,))
    assert op2.spec.index == "i64"
    # a 2-D transpose and a fill past 2**31 elements
    (op3,) = _plan.plan_copy(0x10000, (2**16 * 2, 2), "u2", 0x1_0000_0000, (2, 2**16 * 2),
                             "u2", (2**16, 2**16))
    assert op3.spec.family == "transpose" and op3.spec.index == "i64" and op3.spec.variant == "w"
    (op4,) = _plan.plan_fill(0x10000, (8,), "f8", (n,), 1.5)
    assert op4.spec.index == "i64" and op4.spec.variant == "c"
    image = _compile([op.spec, op2.spec, op3.spec, op4.spec], _nvrtc.select_target(9, 0), False)
    assert op.spec.symbol.encode() in image and op3.spec.symbol.encode() in image


def test_index_width_boundary():
    slack = _plan.MAX_GRID * _specs.BLOCK * _specs.UNROLL
    limit = 2**31 - 1 - slack
    assert _plan.index_type(limit, [2**31 - 1]) == "i32"
    assert _plan.index_type(limit + 1, [16]) == "i64"
    assert _plan.index_type(10, [2**31]) == "i64"


def test_kernel_source_dir_finds_the_sources_and_explains_when_missing(monkeypatch, tmp_path):
    d = _source.kernel_source_dir()
    assert all((d / f).is_file() for f in _source.KERNEL_FILES)
    monkeypatch.setattr(_source, "_candidates", lambda: [tmp_path / "a", tmp_path / "b"])
    _source.kernel_source_dir.cache_clear()
    try:
        with pytest.raises(FileNotFoundError, match="ga_copy.cuh") as ei:
            _source.kernel_source_dir()
        assert str(tmp_path / "a") in str(ei.value) and str(tmp_path / "b") in str(ei.value)
    finally:
        monkeypatch.undo()
        _source.kernel_source_dir.cache_clear()
    assert _source.kernel_source_dir() == d


def test_build_through_the_cache_uses_the_device_architecture(monkeypatch, tmp_path):
    from gpuarray._kernels import _loader

    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE_DIR", str(tmp_path))
    spec = _specs.copy_spec("f4", "i2", 2, "i32", "g")
    seen = []
    real = _nvrtc.compile_program

    def spy(source, headers, options, kind, name="x"):
        seen.append(list(options))
        return real(source, headers, options, kind)

    monkeypatch.setattr(_nvrtc, "compile_program", spy)
    img = _loader.build_image(spec, (8, 6))
    assert img[:4] == b"\x7fELF" and "--gpu-architecture=sm_86" in seen[-1]
    assert _cache.cache_info()["entries"] == 1


# ============================================== the host build of kernels/
class _Identity:
    """Kernel memory where a device address is the host address (numpy operands).

    The host build reaches only the extents its launch declares (the
    operands' byte ranges): an access past an operand is a DeviceFault.
    """

    def host_pointer(self, address: int, nbytes: int):
        return address, None


class HostKernels:
    """The kernels of ``kernels/`` as the simulator runs them (gpuarray_sim.kernels._host),
    run on host memory by planned operations."""

    def __init__(self, specs) -> None:
        if _host.compiler() is None:
            pytest.skip("no C++ compiler for the host build of the kernels")
        _host.prepare(sorted(set(specs), key=lambda s: s.symbol))  # batched

    def execute(self, ops, sms: int = 2) -> None:
        _execute(ops, _Identity(), _host.host_kernel, sms)


def _copy_case(dst, src):
    ops = _plan.plan_copy(dst.ctypes.data, dst.strides, dst.dtype, src.ctypes.data, src.strides,
                          src.dtype, dst.shape)
    return ("copy", dst, src, ops)


def _fill_case(dst, value):
    ops = _plan.plan_fill(dst.ctypes.data, dst.strides, dst.dtype, dst.shape, value)
    return ("fill", dst, value, ops)


def _layout_cases(d, s, rng):
    D, S = _dtypes.code_dtype(d), _dtypes.code_dtype(s)
    src = _sample(s, (40, 50), rng)
    out = []
    out.append(_copy_case(np.zeros((50, 40), D), src.T))                      # transpose
    out.append(_copy_case(np.zeros((40, 50), D, order="F"), src))             # C -> F
    out.append(_copy_case(np.zeros((20, 9), D), src[::2, 3:-30:2]))           # sliced
    out.append(_copy_case(np.zeros((40, 50), D)[::-1, ::-2][:, :20], src[::-1, 5:25][::-1]))
    out.append(_copy_case(np.zeros((3, 40, 50), D), np.broadcast_to(src, (3, 40, 50))))
    out.append(_copy_case(np.zeros((40, 50), D), np.broadcast_to(src[:, :1], (40, 50))))
    out.append(_copy_case(np.zeros((), D), src[3:4, 4:5].reshape(())))        # 0-d
    x4 = _sample(s, (2, 24, 5, 7), rng)                                       # NCHW -> NHWC
    out.append(_copy_case(np.zeros((2, 5, 7, 24), D).transpose(0, 3, 1, 2), x4))
    x10 = _sample(s, (2,) * 10, rng)                                          # > MAX_NDIM
    out.append(_copy_case(np.zeros((2,) * 10, D), x10.transpose(9, 7, 5, 3, 1, 0, 2, 4, 6, 8)))
    raw = np.zeros(64 * D.itemsize + 17, np.uint8)                            # misaligned dst
    out.append(_copy_case(np.ndarray((64,), D, raw, 1, (D.itemsize,)), src[1, :50].repeat(2)[:64]))
    raws = np.zeros(40 * S.itemsize + 17, np.uint8)                           # misaligned src
    mis = np.ndarray((20,), S, raws, 3, (2 * S.itemsize,))
    mis[...] = src[1, :20]
    out.append(_copy_case(np.zeros(20, D), mis))
    out.append(_copy_case(np.zeros(1998, D), src.ravel()[1:1999]))           # ragged vector tail
    return out


@pytest.fixture(scope="module")
def host_cases():
    rng = np.random.default_rng(1234)
    cases = []
    for d in CAST:                          # every pair, contiguous (vector kernel)
        for s in CAST:
            cases.append(_copy_case(np.zeros(1001, _dtypes.code_dtype(d)), _sample(s, 1001, rng)))
    pairs = [("f4", "f8"), ("f2", "f4"), ("f8", "f2"), ("i1", "f4"), ("u1", "f8"), ("c8", "c16"),
             ("b1", "c8"), ("i8", "u2"), ("f4", "f4"), ("u1", "u1"), ("c16", "c16"),
             ("f2", "f2"), ("u4", "i4"), ("c16", "b1")]
    for d, s in pairs:
        cases += _layout_cases(d, s, rng)
    for code in ("b1", "i1", "i2", "f2", "f4", "f8", "i8", "c8", "c16"):
        D = _dtypes.code_dtype(code)
        val = {"b1": True, "c8": 1.5 - 2j, "c16": 2.5 + 1j, "f2": 1.5, "f4": 1.5, "f8": 1.5}.get(code, 3)
        cases.append(_fill_case(np.zeros((30, 40), D), val))
        cases.append(_fill_case(np.zeros((30, 40), D)[::2, 1:-3], val))
        cases.append(_fill_case(np.zeros((30, 40), D).T[::-1], val))
        cases.append(_fill_case(np.zeros((2,) * 10, D)[..., ::-1, :].transpose(
            9, 7, 5, 3, 1, 0, 2, 4, 6, 8), val))
        raw = np.zeros(100 * D.itemsize + 8, np.uint8)
        cases.append(_fill_case(np.ndarray((100,), D, raw, 1, (D.itemsize,)), val))
        cases.append(_fill_case(np.zeros(1001, D)[1:], val))
        cases.append(_fill_case(np.zeros((), D), val))
    return cases


def _conversion_edge_cases():
    """float16 rounding (all halves, random bits, exact ties) and float -> int wrapping."""
    rng = np.random.default_rng(99)
    halves = np.arange(65536, dtype=np.uint16).view(np.float16)
    f32 = rng.integers(0, 2**32, 100000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    mags = rng.random(50000) * 2.0 ** rng.integers(-30, 17, 50000) * rng.choice([-1, 1], 50000)
    f64 = np.concatenate([rng.integers(0, 2**63, 100000, dtype=np.uint64).view(np.float64), mags])
    t = halves[np.isfinite(halves)].astype(np.float64)
    t = np.unique(t)
    mids = (t[:-1] + t[1:]) / 2  # exact ties: round half to even
    f64 = np.concatenate([f64, mids, mids + np.abs(mids) * 2.0**-40])
    f32 = np.concatenate([f32, _astype(mags, np.float32), _astype(mids, np.float32)])
    cases = []
    for src, d in [(halves, "f4"), (halves, "f8"), (halves, "c8"), (f32, "f2"), (f64, "f2"),
                   (_astype(f64, np.complex128), "f2"), (_astype(f32, np.complex64), "f2")]:
        cases.append(_copy_case(np.zeros(src.shape, _dtypes.code_dtype(d)), src))
    vals = np.concatenate([rng.uniform(-2**31 + 256, 2**31 - 256, 20000),
                           rng.uniform(-1e4, 1e4, 20000),
                           [300.7, -1.0, -300.5, 70000.0, -0.9, 255.9, 65535.5, -32768.7]])
    for s in ("f2", "f4", "f8", "c8", "c16"):
        v = _astype(vals, _dtypes.code_dtype(s))
        v = v[np.isfinite(v)]
        for d in ("i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8"):
            vv = v[np.abs(v.real.astype(np.float64)) < 2**31 - 256] if d == "i4" else v
            cases.append(_copy_case(np.zeros(vv.shape, _dtypes.code_dtype(d)), vv))
    for s in ("i8", "u8", "i4", "u4"):
        info = np.iinfo(_dtypes.code_dtype(s))
        x = rng.integers(info.min, info.max, 50000, dtype=_dtypes.code_dtype(s), endpoint=True)
        x = np.concatenate([x, np.array([info.min, info.max, 0, 1], x.dtype)])
        for d in ("f2", "f4", "f8", "c8", "c16", "b1"):
            cases.append(_copy_case(np.zeros(x.shape, _dtypes.code_dtype(d)), x))
    return cases


_WORD = {1: 4, 2: 4, 4: 8}  # element size -> word of the ``w`` transpose (as documented)


def _word_aligned(dst, src, word) -> bool:
    """The documented rule, from 2-D/3-D views with non-negative strides: both pointers,
    pitches and batch strides (every stride but the element-sized ones) are multiples of
    ``word``."""
    vals = [dst.ctypes.data, src.ctypes.data]
    vals += [st for a in (dst, src) for st in a.strides if st != a.itemsize]
    return all(v % word == 0 for v in vals)


_GUARD = 64  # bytes of 0xA5 on both sides of every transpose destination buffer


def _guarded_zeros(shape, dtype):
    """Zeros in a buffer with guard bytes around it (``.base`` chain ends at the buffer)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    buf = np.full(nbytes + 2 * _GUARD, 0xA5, np.uint8)
    out = buf[_GUARD:_GUARD + nbytes].view(dtype).reshape(shape)
    out[...] = 0
    return out


def _root(a):
    while a.base is not None:
        a = a.base
    return a


def _transpose_cases(rng):
    """(label, dst, src, expected transpose variant, or None: no transpose at all).

    uint8, int16 and float16 (raw moves of 1/2-byte units), float32 (8-byte
    words), and same-size conversions, over awkward shapes: single rows and
    columns, 31 x 33 / 33 x 31, 64 x 4097, odd batches, ragged extents with
    word-aligned pitches (edge tiles of the word kernel), full tiles with a
    grid-stride loop, negative pitches, and misaligned pointers or pitches
    (the per-element fallback).
    """
    main = [("u1", "u1"), ("i2", "i2"), ("f2", "f2")]
    pairs = main + [("f4", "f4"), ("b1", "u1"), ("u1", "b1"), ("i2", "f2"), ("f2", "i2"),
                    ("i4", "f4"), ("f4", "f2")]
    out = []
    for d, s in pairs:  # the slow (fallback, many-tile) shapes for the three main types only
        out += _transpose_pair_cases(d, s, rng, big=(d, s) in main)
    return out


def _transpose_pair_cases(d, s, rng, big):
    D, S = _dtypes.code_dtype(d), _dtypes.code_dtype(s)
    word = _WORD.get(S.itemsize) if D.itemsize == S.itemsize else None
    out = []

    def add(label, dst, src, expect="auto"):
        if expect == "auto":
            expect = "w" if word and _word_aligned(dst, src, word) else ""
        out.append((f"{d}<-{s} {label}", dst, src, expect))

    def pad(shape, cols):  # a C array of `shape` rows with `cols` columns, sliced
        return _sample(s, (shape[0], cols), rng)[:, :shape[1]]

    for r, c in [(1, 50), (50, 1)]:
        add(f"{r}x{c}", _guarded_zeros((c, r), D), _sample(s, (r, c), rng).T, None)
    for r, c in [(31, 33), (33, 31), (200, 300), (256, 384)] + big * [(64, 4097), (4097, 64)]:
        add(f"{r}x{c} contiguous", _guarded_zeros((c, r), D), _sample(s, (r, c), rng).T)
    # ragged extents, pitches padded to a multiple of 8 bytes / 4 elements
    add("31x33 padded", _guarded_zeros((33, 40), D)[:, :31], pad((31, 33), 36).T)
    add("33x31 padded", _guarded_zeros((31, 36), D)[:, :33], pad((33, 31), 40).T)
    # one element short of / past a tile (128 for 1-byte, 64 for 2 and 4-byte elements)
    t = 32 * _WORD[S.itemsize] // S.itemsize if word else 64
    for r, c in [(t + 1, t - 1), (t - 1, t + 1)]:
        add(f"{r}x{c} padded", _guarded_zeros((c, r + 8 - r % 8), D)[:, :r],
            pad((r, c), c + 8 - c % 8).T)
    if big or d == s:
        add("64x4097 padded", _guarded_zeros((4097, 64), D), pad((64, 4097), 4104).T)
        add("4097x64 padded", _guarded_zeros((64, 4104), D)[:, :4097],
            _sample(s, (4097, 64), rng).T)
    # misaligned pointers (one and two elements in), aligned pitches
    base = _sample(s, (40, 40), rng)
    add("src +1", _guarded_zeros((32, 32), D), base[:32, 1:33].T)
    add("src +2", _guarded_zeros((32, 32), D), base[:32, 2:34].T)
    add("dst +1", _guarded_zeros((32, 40), D)[:, 1:33], base[:32, :32].T)
    # negative source pitch (a reversed view), and a reversed destination
    src = base[::-1, :32].T  # (32, 40), pitch -40 elements, pointer at row 39
    add("negative src pitch", _guarded_zeros((32, 40), D), src,
        "w" if word and 39 * 40 * S.itemsize % word == 0 else "")
    # (the planner flips the reversed destination: source pitch -40 elements, at column 39)
    add("negative dst", _guarded_zeros((32, 40), D)[:, ::-1], base.T[:32], "w" if word else "")
    # batches: odd, ragged, aligned or not; more tiles than blocks
    x = _sample(s, (3, 37, 45), rng)
    add("batch 3x37x45", _guarded_zeros((3, 45, 37), D), x.transpose(0, 2, 1))
    xb = _sample(s, (3, 40, 48), rng)[:, :37, :45]
    add("batch 3x37x45 padded", _guarded_zeros((3, 45, 40), D)[:, :, :37], xb.transpose(0, 2, 1))
    flat = _sample(s, (3 * 36 * 48 + 8,), rng)  # batch stride 36*48 + 1 elements
    xs = np.lib.stride_tricks.as_strided(flat, (3, 36, 44), (
        (36 * 48 + 1) * S.itemsize, 48 * S.itemsize, S.itemsize))
    add("batch stride +1", _guarded_zeros((3, 44, 36), D), xs.transpose(0, 2, 1))
    dflat = _guarded_zeros((3 * 44 * 40 + 8,), D)  # destination batch stride 44*40 + 2
    dview = np.lib.stride_tricks.as_strided(dflat, (3, 44, 36), (
        (44 * 40 + 2) * D.itemsize, 40 * D.itemsize, D.itemsize))
    add("dst batch stride +2", dview, _sample(s, (3, 36, 44), rng).transpose(0, 2, 1),
        "w" if word and 2 * D.itemsize % word == 0 else "")
    if big:
        add("batch 5x256x384", _guarded_zeros((5, 384, 256), D),
            _sample(s, (5, 256, 384), rng).transpose(0, 2, 1))
    for n, c, h, w in [(5, 24, 6, 6), (5, 24, 5, 7), (3, 128, 8, 16)]:  # NCHW -> NHWC
        x4 = _sample(s, (n, c, h, w), rng)
        dst = _guarded_zeros((n, h, w, c), D).transpose(0, 3, 1, 2)
        expect = "w" if word and (h * w * S.itemsize) % word == 0 and (
            c * D.itemsize) % word == 0 else ""
        add(f"NCHW {n}x{c}x{h}x{w}", dst, x4, expect)
    return out


def _transpose_ops(dst, src, expect, force_i64=False):
    """Plan ``dst[...] = src``; check the transpose variant the planner chose."""
    ops = _plan.plan_copy(dst.ctypes.data, dst.strides, dst.dtype, src.ctypes.data, src.strides,
                          src.dtype, dst.shape)
    tr = [op for op in ops if isinstance(op, _plan.Launch) and op.spec.family == "transpose"]
    if expect is None:
        assert tr == [], ops
    else:
        assert len(tr) == 1 and tr[0].spec.variant == expect, (expect, ops)
    if force_i64:  # the 64-bit index build of the same kernel, same parameters
        ops = [op._replace(spec=_specs.transpose_spec(op.spec.dst, op.spec.src, "i64",
                                                      op.spec.variant))
               if op in tr else op for op in ops]
    return ops


@pytest.fixture(scope="module")
def transpose_cases():
    rng = np.random.default_rng(4321)
    cases = []
    for k, (label, dst, src, expect) in enumerate(_transpose_cases(rng)):
        cases.append((label, dst, src, _transpose_ops(dst, src, expect, force_i64=k % 5 == 0)))
    return cases


@pytest.fixture(scope="module")
def host_kernels(host_cases, transpose_cases):
    edge = _conversion_edge_cases()
    specs = [op.spec for c in host_cases + edge + transpose_cases for op in c[3]
             if isinstance(op, _plan.Launch)]
    hk = HostKernels(specs)
    hk.edge = edge
    return hk


def _check(kind, dst, src, ops, hk):
    before = dst.copy()
    hk.execute(ops)
    ref = before.copy()
    ref[...] = _astype(src, dst.dtype) if kind == "copy" else src
    with np.errstate(invalid="ignore"):  # NumPy 2.5 warns comparing NaNs (a GPU run's NumPy)
        same = np.array_equal(dst, ref, equal_nan=dst.dtype.kind in "fc")
    assert same, (
        kind, dst.dtype, getattr(src, "dtype", src), [getattr(o, "spec", o) for o in ops][:2])


def test_host_emulated_kernels_match_numpy_for_every_pair_and_layout(host_cases, host_kernels):
    used = {(op.spec.family, op.spec.variant) for c in host_cases for op in c[3]
            if isinstance(op, _plan.Launch)}
    assert {("copy", v) for v in "gduc"} | {("transpose", ""), ("fill", "g"), ("fill", "c")} <= used
    for kind, dst, src, ops in host_cases:
        _check(kind, dst, src, ops, host_kernels)


def test_host_emulated_conversions_round_and_wrap_like_numpy(host_kernels):
    for kind, dst, src, ops in host_kernels.edge:
        _check(kind, dst, src, ops, host_kernels)


def test_host_emulated_transposes_match_numpy(transpose_cases, host_kernels):
    """The word kernel (full and edge tiles, both index widths) and its fallback, on the CPU."""
    specs = {op.spec for c in transpose_cases for op in c[3] if isinstance(op, _plan.Launch)}
    words = {s for s in specs if s.family == "transpose" and s.variant == "w"}
    assert {(_dtypes.code_itemsize(s.src), s.index) for s in words} == {
        (e, i) for e in (1, 2, 4) for i in ("i32", "i64")}
    assert any(s.dst != s.src for s in words)
    assert any(s.family == "transpose" and s.variant == "" for s in specs)
    for label, dst, src, ops in transpose_cases:
        buf = _root(dst)  # the whole guarded buffer: padding and guards must stay as they were
        expect = buf.copy()
        view = np.ndarray(dst.shape, dst.dtype, expect, dst.ctypes.data - buf.ctypes.data,
                          dst.strides)
        view[...] = _astype(src, dst.dtype)
        host_kernels.execute(ops)
        assert buf.tobytes() == expect.tobytes(), (
            label, [getattr(o, "spec", o) for o in ops], np.array_equal(dst, view))


# A child process: operands placed so that their last byte is followed by an
# unreadable page (PROT_NONE); a kernel that reads or writes past an operand
# kills the child with SIGSEGV instead of passing unnoticed.
_GUARD_CHILD = r"""
import ctypes, mmap, sys
import numpy as np
from gpuarray._kernels import _plan
from tests.kernels import test_kernels_compile as T

libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PAGE = mmap.PAGESIZE
keep = []

def flush(shape, dtype, strides, align):
    dtype = np.dtype(dtype)
    extent = sum((n - 1) * st for n, st in zip(shape, strides)) + dtype.itemsize
    pages = -(-extent // PAGE) + 2
    m = mmap.mmap(-1, pages * PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    for p in (base, base + (pages - 1) * PAGE):
        assert libc.mprotect(p, PAGE, 0) == 0
    off = ((pages - 1) * PAGE - extent) // align * align
    assert off + extent == (pages - 1) * PAGE, "not flush"
    keep.append(m)
    return np.ndarray(shape, dtype, m, off, strides)

hk = T.HostKernels([])  # builds on demand (the parent's disk cache: loads)
rng = np.random.default_rng(7)
seen = []
# code, source lines (the destination's contiguous axis), line pitch, line length
for code, lines, pitch, rows, align in [
        ("u1", 44, 40, 36, 4), ("u1", 132, 256, 256, 4), ("u1", 31, 33, 33, 1),
        ("i2", 70, 72, 66, 4), ("f2", 33, 31, 31, 2), ("f4", 70, 72, 66, 8)]:
    D = T._dtypes.code_dtype(code)
    e = D.itemsize
    src = flush((lines, rows), D, (pitch * e, e), align)
    src[...] = T._sample(code, (lines, rows), rng)
    dst = flush((rows, lines), D, (lines * e, e), align)
    ops = _plan.plan_copy(dst.ctypes.data, dst.strides, D, src.ctypes.data, src.T.strides, D,
                          dst.shape)
    hk.execute(ops)
    assert np.array_equal(dst, src.T), (code, lines, pitch, rows)
    seen += [op.spec.symbol for op in ops]
print(" ".join(seen))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="mprotect guard pages")
def test_host_emulated_transposes_stay_inside_their_operands(host_kernels):
    """Sources and destinations end at an unreadable page: no access past either."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(root)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    r = subprocess.run([sys.executable, "-c", _GUARD_CHILD],
                       cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (f"exit {r.returncode} (-11: an access past an operand)",
                               r.stdout[-2000:], r.stderr[-3000:])
    used = r.stdout.split()
    assert "ga_transpose__u1__u1__i32__w" in used and "ga_transpose__u4__u4__i32__w" in used
    assert "ga_transpose__u2__u2__i32__w" in used and "ga_transpose__u1__u1__i32" in used
