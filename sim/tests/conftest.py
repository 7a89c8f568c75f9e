"""gpuarray-sim's tests take gpuarray's fixtures (``tests/conftest.py``): one set for the repository."""

from tests.conftest import (  # noqa: F401  (fixtures and the skip summary, by import)
    _fresh_state,
    b,
    core,
    make_sim,
    pytest_terminal_summary,
    sim,
)
