"""pytest configuration of the benchmarks (``pytest bench``; see bench/README.md).

- The run's description (backend, quick/full mode, device, driver, l2 size,
  versions, which peers are usable and why not) goes into the JSON's
  ``machine_info["gpuarray"]``; every benchmark's ``extra_info`` repeats
  backend, device and driver next to its ratios.
- Between tests: the stream is synchronised and the peers' cached device
  memory released, so 1 GiB cases do not pile up.
- On a GPU the peer libraries may emit their own deprecation warnings, which
  the project's ``filterwarnings = error`` would turn into failures; there the
  benchmarks show warnings instead.  On the simulator they stay errors.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))


# numba-cuda 0.30.4 registers ``np.row_stack`` when it compiles its first kernel;
# NumPy 2.5 removed that alias of ``np.vstack`` (seen on the first GPU run, whose image
# pairs them), so every ``@cuda.jit`` kernel failed with AttributeError there. Put the
# alias back for the peer, only where NumPy lacks it.
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack  # type: ignore[attr-defined]

import _harness  # noqa: E402


def pytest_report_header(config):
    h = _harness
    return (f"gpuarray benchmarks: backend={h.BACKEND} mode={h.MODE}"
            + (" (simulator -- numbers are simulator host overheads, not GPU performance)"
               if h.SIM else "")
            + (" (stand-in driver over the simulator -- numbers are simulator host overheads, "
               "not GPU performance)" if h.STANDIN else ""))


def pytest_benchmark_update_machine_info(config, machine_info):
    c = _harness.ctx()
    info = dict(c.info)
    info["peers"] = _harness.peer_status()
    info["simulator"] = _harness.SIM
    info["standin"] = _harness.STANDIN
    machine_info["gpuarray"] = info


def pytest_collection_modifyitems(config, items):
    if _harness.SIM:
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.filterwarnings("default"))


@pytest.fixture(autouse=True)
def _between_tests():
    yield
    c = _harness.ctx()
    c.stream.synchronize()
    _harness.release_peer_memory()
