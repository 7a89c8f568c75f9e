"""The PTX executor's tests run in both tiers: translated and built, and interpreted.

A test module marked ``pytest.mark.usefixtures("ptx_tier")`` runs each of its
tests once per tier (``GPUARRAY_SIM_PTX_TIER``): what a kernel computes, the
faults it raises and what they name must not depend on the tier.
"""

from __future__ import annotations

import pytest
from gpuarray_sim.ptx import _build

TIERS = ("compiled", "interp")


@pytest.fixture
def ptx_tier(request, monkeypatch):
    """The tier this test runs PTX in (parametrised over :data:`TIERS`)."""
    monkeypatch.setenv("GPUARRAY_SIM_PTX_TIER", request.param)
    _build.settle()
    _build._programs.clear()  # a program keeps the tier it was prepared in
    yield request.param
    _build.settle()
    _build._programs.clear()


def pytest_generate_tests(metafunc):
    if "ptx_tier" in metafunc.fixturenames:
        metafunc.parametrize("ptx_tier", TIERS, indirect=True)
