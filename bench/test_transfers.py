"""Host <-> device transfers, page-locked and pageable, over a sweep of sizes.

Every row's ratio is against ``cuMemcpyHtoDAsync`` / ``cuMemcpyDtoHAsync``
from PINNED memory of the same size in this process (PERF.md), so the
pageable rows show what pageable memory costs; the ``raw`` rows of the
pageable cases are the raw driver call from pageable memory.
"""

from __future__ import annotations

import _impls
import numpy as np
import pytest
from _harness import IMPLS, SIZES, TARGETS, bandwidth, ids, make_raw


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("size", SIZES["transfer"], ids=ids(SIZES["transfer"]))
@pytest.mark.parametrize("memory", ["pinned", "pageable"])
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_transfer(benchmark, direction, memory, size, impl):
    pinned = memory == "pinned"
    raw_kind = {"h2d": "htod", "d2h": "dtoh"}[direction]
    case = f"{direction}-{memory}"
    free = None
    if impl == "raw":
        op, free = make_raw(raw_kind if pinned else f"{raw_kind}-pageable", size)
    else:
        host = _impls.host_buffer(impl, size, pinned)
        dev = _impls.ones(impl, size, np.uint8)
        op = _impls.transfer(impl, direction, pinned, dev, host)
    try:
        bandwidth(benchmark, suite="transfers", case=case, impl=impl, op=op, size=size,
                  moved=size, baseline=(raw_kind, size), target=TARGETS[case])
    finally:
        if free is not None:
            free()
