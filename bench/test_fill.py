"""``fill`` for element sizes 1/2/4/8/16 at the big size, and a size sweep for 4 bytes.

Ratios are against ``cuMemsetD32Async`` of the same bytes.  The value (3) has
no repeating byte pattern at 8 and 16 bytes, so those need a fill kernel.
"""

from __future__ import annotations

import _impls
import numpy as np
import pytest
from _harness import IMPLS, SIZES, TARGETS, bandwidth, fmt_bytes, make_raw

FILL_IMPLS = [i for i in IMPLS if i != "numba"]   # numba.cuda device arrays have no fill
DTYPES = {1: np.uint8, 2: np.float16, 4: np.float32, 8: np.float64, 16: np.complex128}


def _params():
    out = []
    for itemsize in DTYPES:
        sizes = SIZES["fill_sweep"] if itemsize == 4 else [SIZES["fill_big"]]
        for n in sizes:
            out.append(pytest.param(itemsize, n, id=f"{itemsize}B-{fmt_bytes(n).replace(' ', '')}"))
    return out


@pytest.mark.parametrize("impl", FILL_IMPLS)
@pytest.mark.parametrize("itemsize, size", _params())
def test_fill(benchmark, itemsize, size, impl):
    dtype = np.dtype(DTYPES[itemsize])
    free = None
    if impl == "raw":
        op, free = make_raw("memset32", size)
    else:
        a = _impls.empty(impl, (size // itemsize,), dtype)
        op = _impls.fill(impl, a, dtype.type(3))
    try:
        bandwidth(benchmark, suite="fill", case=f"fill {itemsize}B", impl=impl, op=op,
                  size=size, moved=size, baseline=("memset32", size), target=TARGETS["fill"],
                  dtype=dtype.name)
    finally:
        if free is not None:
            free()
