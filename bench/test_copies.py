"""Device-to-device copies: contiguous, strided views, transposes, permutes, casts.

Every library copies into a destination it allocated beforehand (``dst[...] =
src`` in its own spelling), so the rows compare copy kernels, not allocators;
``test_alloc_copy`` measures the allocating spellings (``a.copy()``,
``ascontiguousarray(a.T)``, ``.t().contiguous()``) separately.  Ratios are
against ``cuMemcpyDtoDAsync`` of the destination's bytes (for casts: of half
the bytes read plus written, i.e. the same traffic).  GB/s counts the bytes
written plus the distinct bytes read (a broadcast reads its row once).
"""

from __future__ import annotations

import math

import _impls
import numpy as np
import pytest
from _harness import IMPLS, SIZES, TARGETS, bandwidth, ids, make_raw, peer

COPY_IMPLS = [i for i in IMPLS if i != "numba"]   # numba.cuda has no strided device copy


def _run(benchmark, *, suite, case, impl, size, src_shape, src_dtype, view, dst_shape,
         dst_dtype, target, torch_view=None, extra=None):
    """Copy ``view(src)`` into a fresh ``dst``; the raw row is a memcpy of dst's bytes."""
    src_dtype, dst_dtype = np.dtype(src_dtype), np.dtype(dst_dtype)
    n_dst = math.prod(dst_shape) * dst_dtype.itemsize
    # distinct source bytes read: the view's elements, or fewer for a broadcast
    n_read = min(math.prod(src_shape), math.prod(dst_shape)) * src_dtype.itemsize
    moved = n_read + n_dst
    # same dtype: a memcpy producing the same output; a cast: a memcpy of the same traffic
    base_bytes = n_dst if src_dtype == dst_dtype else moved // 2
    free = None
    if impl == "raw":
        op, free = make_raw("dtod", base_bytes)
    else:
        src = _impls.ones(impl, src_shape, src_dtype)
        dst = _impls.empty(impl, dst_shape, dst_dtype)
        v = torch_view(src) if (impl == "torch" and torch_view is not None) else view(src)
        op = _impls.copy_into(impl, dst, v)
    try:
        bandwidth(benchmark, suite=suite, case=case, impl=impl, op=op, size=size, moved=moved,
                  baseline=("dtod", base_bytes), target=target, **(extra or {}))
    finally:
        if free is not None:
            free()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("size", SIZES["copy"], ids=ids(SIZES["copy"]))
def test_copy_contiguous(benchmark, size, impl):
    _run(benchmark, suite="copy", case="copy", impl=impl, size=size, src_shape=(size,),
         src_dtype=np.uint8, view=lambda a: a, dst_shape=(size,), dst_dtype=np.uint8,
         target=TARGETS["copy"])


def _strided_cases():
    r, c = SIZES["strided"]
    n = r * c
    return {
        # name: (src_shape, view, dst_shape, torch_view, note)
        "a[:, ::2]": ((r, c), lambda a: a[:, ::2], (r, c // 2), None, "inner run 4 B"),
        "a[::2]": ((r, c), lambda a: a[::2], (r // 2, c), None, f"inner run {4 * c} B"),
        "a[1:-1, 1:-1]": ((r, c), lambda a: a[1:-1, 1:-1], (r - 2, c - 2), None,
                          f"inner run {4 * (c - 2)} B"),
        "a[::-1]": ((n,), lambda a: a[::-1], (n,), lambda t: t.flip(0),
                    "1-D reversal; PyTorch has no negative steps: torch.flip (allocating)"),
        "broadcast": ((c,), lambda a: a[None, :], (r, c), None,
                      f"(1, {c}) row expanded to ({r}, {c})"),
    }


@pytest.mark.parametrize("impl", COPY_IMPLS)
@pytest.mark.parametrize("case", list(_strided_cases()))
def test_strided(benchmark, case, impl):
    src_shape, view, dst_shape, torch_view, note = _strided_cases()[case]
    if impl == "torch" and case == "a[::-1]":
        torch = peer("torch")
        src = torch.ones(src_shape, dtype=torch.float32, device="cuda")
        op = lambda: src.flip(0)  # noqa: E731
        n = math.prod(dst_shape) * 4
        bandwidth(benchmark, suite="strided", case=case, impl=impl, op=op, size=n,
                  moved=2 * n, baseline=("dtod", n), target=TARGETS[case], note=note)
        return
    _run(benchmark, suite="strided", case=case, impl=impl,
         size=math.prod(dst_shape) * 4, src_shape=src_shape, src_dtype=np.float32, view=view,
         dst_shape=dst_shape, dst_dtype=np.float32, target=TARGETS[case],
         extra={"note": note, "src_shape": list(src_shape)})


@pytest.mark.parametrize("impl", COPY_IMPLS)
@pytest.mark.parametrize("dt", ["f32", "f16", "u8"])
def test_transpose(benchmark, dt, impl):
    shape = SIZES["transpose"][dt]
    dtype = {"f32": np.float32, "f16": np.float16, "u8": np.uint8}[dt]
    _run(benchmark, suite="transpose", case=f"transpose {dt}", impl=impl,
         size=math.prod(shape) * np.dtype(dtype).itemsize, src_shape=shape, src_dtype=dtype,
         view=lambda a: a.T, dst_shape=shape[::-1], dst_dtype=dtype,
         target=TARGETS[f"transpose {dt}"], extra={"shape": list(shape)})


@pytest.mark.parametrize("impl", COPY_IMPLS)
@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_permute_nchw_nhwc(benchmark, dt, impl):
    n, c, h, w = SIZES["permute"]
    dtype = {"f32": np.float32, "f16": np.float16}[dt]
    _run(benchmark, suite="permute", case=f"permute {dt}", impl=impl,
         size=n * c * h * w * np.dtype(dtype).itemsize, src_shape=(n, c, h, w), src_dtype=dtype,
         view=lambda a: a.transpose(0, 2, 3, 1), torch_view=lambda t: t.permute(0, 2, 3, 1),
         dst_shape=(n, h, w, c), dst_dtype=dtype, target=TARGETS[f"permute {dt}"],
         extra={"shape": [n, c, h, w]})


@pytest.mark.parametrize("impl", COPY_IMPLS)
@pytest.mark.parametrize("cast", ["f32->f16", "f64->f32"])
def test_astype(benchmark, cast, impl):
    src, dst = {"f32->f16": (np.float32, np.float16), "f64->f32": (np.float64, np.float32)}[cast]
    n = SIZES["astype"]
    _run(benchmark, suite="astype", case=f"astype {cast}", impl=impl,
         size=n * np.dtype(src).itemsize, src_shape=(n,), src_dtype=src, view=lambda a: a,
         dst_shape=(n,), dst_dtype=dst, target=TARGETS[f"astype {cast}"])


@pytest.mark.parametrize("impl", COPY_IMPLS)
@pytest.mark.parametrize("case", ["a.copy()", "a.T.copy()"])
def test_alloc_copy(benchmark, case, impl):
    """The allocating spellings, each library's allocator included (raw: a plain memcpy)."""
    shape = SIZES["alloc_copy"]
    nbytes = math.prod(shape) * 4
    free = None
    if impl == "raw":
        op, free = make_raw("dtod", nbytes)
    else:
        a = _impls.ones(impl, shape, np.float32)
        if impl == "gpuarray":
            op = (lambda: a.copy()) if case == "a.copy()" else (lambda: a.T.copy())
        elif impl == "cupy":
            cp, _ = peer("cupy")
            op = (lambda: a.copy()) if case == "a.copy()" else (lambda: cp.ascontiguousarray(a.T))
        else:
            op = (lambda: a.clone()) if case == "a.copy()" else (lambda: a.t().contiguous())
    try:
        bandwidth(benchmark, suite="alloc-copy", case=case, impl=impl, op=op, size=nbytes,
                  moved=2 * nbytes, baseline=("dtod", nbytes),
                  target="(no target: shows what the allocator adds)", shape=list(shape))
    finally:
        if free is not None:
            free()
