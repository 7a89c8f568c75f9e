"""``python -m gpuarray``: settings errors, help text and simulated values (issue 15).

Run as a user runs it, in a subprocess, so the exit status and the exact
stderr are what a shell sees.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUARRAY_")}
    return subprocess.run([sys.executable, "-m", "gpuarray", *args], env={**base, **env},
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args", [(), ("info",), ("selftest",), ("bench", "--mode", "quick")])
@pytest.mark.parametrize("value", ["gpu", "CUDA12", "simulator"])
def test_invalid_backend_is_one_line_naming_the_valid_values(args, value):
    proc = _run(*args, GPUARRAY_BACKEND=value)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0] == (f"python -m gpuarray: error: GPUARRAY_BACKEND={value.lower()!r} is not "
                        "a backend: use 'cuda' (default) or 'sim'")
    assert proc.stdout == ""


def test_invalid_simulator_setting_is_one_line_too():
    proc = _run("info", GPUARRAY_BACKEND="sim", GPUARRAY_SIM_DEVICES="two")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.splitlines() == [
        "python -m gpuarray: error: GPUARRAY_SIM_DEVICES='two' is not an integer"]


@pytest.mark.parametrize("args", [("--help",), ("info", "--help"), ("selftest", "--help"),
                                  ("cache", "--help"), ("bench", "--help")])
def test_help_is_plain_text(args):
    proc = _run(*args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m gpuarray")
    for rest in ("``", ":func:", ":class:", ":mod:", ".. "):
        assert rest not in proc.stdout, (rest, proc.stdout)


def test_help_says_what_the_commands_and_the_backend_are():
    out = _run("--help").stdout
    for word in ("info", "selftest", "cache", "bench", "GPUARRAY_BACKEND=sim",
                 "GPUARRAY_BACKEND=cuda", "With no command: info, then selftest."):
        assert word in out, (word, out)


def test_info_labels_simulated_values():
    proc = _run("info", GPUARRAY_BACKEND="sim")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    driver = [line for line in lines if line.startswith("driver version:")]
    assert len(driver) == 1 and driver[0].endswith(" (simulated)"), lines
    devices = [line for line in lines if line.startswith("devices:")]
    assert devices == ["devices: 1 (simulated)"], lines
    listed = [line for line in lines if line.startswith("  [")]
    assert listed and all(line.endswith("GiB (simulated)") for line in listed), lines
    assert "cuda-python" not in proc.stdout  # not a dependency any more
