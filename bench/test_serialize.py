"""Sending an array to another process: pickling and ``distributed``'s serializers.

Host microseconds per round trip (serialize, then rebuild on the device),
against a ``raw`` row of the same case in the same run: the bare
``to_device(x.copy_to_host())``, the one copy down and the one copy up that
any host path needs.  ``delta_vs_raw_us`` of the other rows is what
serialization adds to those copies (issue 16: nothing but headers):

- ``pickle5``: ``pickle.dumps(x, protocol=5, buffer_callback=...)`` then
  ``pickle.loads(..., buffers=...)`` (distributed's ``"pickle"`` family);
- ``dask``: ``distributed.protocol.serialize`` / ``deserialize`` with the
  ``"dask"`` family (skipped without ``distributed``);
- ``cuda``: the ``"cuda"`` family, which copies nothing (the device frame is
  the array's memory), so its row is the header cost alone.

Cases: a contiguous array and a negative-step strided view (compacted on the
device before the copy down, by every row alike).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from _harness import FULL, KiB, MiB, host, ids

import gpuarray

SIZES = [4 * MiB, 64 * MiB] if FULL else [64 * KiB]
IMPLS = ["raw", "pickle5", "dask", "cuda"]


def _source(layout: str, nbytes: int) -> gpuarray.DeviceNDArray:
    n = nbytes // 8
    if layout == "contiguous":
        return gpuarray.to_device(np.arange(n, dtype=np.float64))
    base = gpuarray.to_device(np.arange(2 * n, dtype=np.float64).reshape(-1, 64))
    return base[::-1, ::2]  # half the elements: nbytes of payload


def _op(impl: str, x: gpuarray.DeviceNDArray):
    if impl == "raw":
        return lambda: gpuarray.to_device(x.copy_to_host())
    if impl == "pickle5":
        def op():
            buffers: list[pickle.PickleBuffer] = []
            data = pickle.dumps(x, protocol=5, buffer_callback=buffers.append)
            return pickle.loads(data, buffers=buffers)
        return op
    protocol = pytest.importorskip("distributed.protocol",
                                   reason="distributed is not installed")
    from gpuarray.dask import register

    register()
    family = (impl,)
    return lambda: protocol.deserialize(*protocol.serialize(x, serializers=family))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("size", SIZES, ids=ids(SIZES))
@pytest.mark.parametrize("layout", ["contiguous", "negative-step"])
def test_serialize_round_trip(benchmark, layout, size, impl):
    x = _source(layout, size)
    host(benchmark, suite="serialize", case=layout, impl=impl, op=_op(impl, x), heavy=True,
         size=size, payload_bytes=x.nbytes)
