"""numba-cuda's test-suite conftest, for running its wheel's tests as its CI does.

numba-cuda's ``CUDATestCase`` (``numba/cuda/testing.py``) asks for the
class-scoped fixture ``initialize_from_pytest_config``, and its FileCheck
tests read the ``--dump-failed-filechecks`` option; both are defined by the
``conftest.py`` at the root of numba-cuda's repository, which the wheel does
not ship.  This plugin (loaded with ``-p numba_testing_plugin``, see
``pytest.ini``) defines the same option and fixture, nothing else, so the
tests run unmodified.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--dump-failed-filechecks", action="store_true",
                     help="Dump reproducers for FileCheck tests that fail.")


@pytest.fixture(scope="class")
def initialize_from_pytest_config(request: pytest.FixtureRequest) -> None:
    """Give the test class the run's ``--dump-failed-filechecks`` setting."""
    request.cls._dump_failed_filechecks = request.config.getoption("dump_failed_filechecks")
