"""A per-test time limit for numba-cuda's kernel tests over the stand-in.

Loaded with ``-p timeout_plugin`` by ``run.py``: each test's call phase gets
``--per-test-timeout`` seconds (SIGALRM, main thread; 0 disables it), after
which it fails with :class:`TestTimeout` -- so a kernel the simulator runs
slowly, or a hang, costs one bounded failure, not the run.  pytest-timeout is
not a dependency of the peers environment; this is the part of it run.py needs.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest


class TestTimeout(Exception):
    """A test ran past ``--per-test-timeout`` seconds."""

    __test__ = False  # not a test class


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--per-test-timeout", type=float, default=0.0,
                     help="fail a test whose call runs longer than this many seconds (0: no limit)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    limit = float(item.config.getoption("per_test_timeout") or 0.0)
    if limit <= 0 or not hasattr(signal, "setitimer"):
        yield
        return

    def _expire(signum: int, frame: object) -> None:
        raise TestTimeout(f"{item.nodeid} ran past --per-test-timeout={limit:g} s")

    old = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
