"""``make test`` summarises skips by reason: one line each, with a count (issue 15).

The summary comes from ``pytest_terminal_summary`` in ``tests/conftest.py``;
pytest's own per-location ``SKIPPED [n] file:line: reason`` lines are off
(``-rfExX`` in pyproject.toml).  Checked on a small generated test file run in
a subprocess with this project's pytest configuration and conftest.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SAMPLE = '''
import pytest

@pytest.mark.parametrize("i", range(3))
def test_needs_a_gpu(i):
    pytest.skip("no GPU here")

def test_elsewhere_needs_a_gpu():
    pytest.skip("no GPU here")

@pytest.mark.skip(reason="PyTorch is not installed")
def test_torch():
    pass

def test_runs():
    assert True
'''


def test_skips_are_summarised_by_reason_with_counts(tmp_path):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
         str(ROOT), "-p", "tests.conftest", "-q", "-p", "no:cacheprovider",
         str(tmp_path / "test_sample.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    assert not [line for line in out if line.startswith("SKIPPED")], proc.stdout
    at = next(i for i, line in enumerate(out) if "5 skipped, 2 reasons" in line)
    assert out[at + 1:at + 3] == ["4  no GPU here", "1  PyTorch is not installed"], proc.stdout
