"""The wall-clock limit of the numba-cuda referee runs (``sim/tools/numba_driver/run.py``).

``sim/tools/numba_cudapy/run.py --whole`` once waited for ever: a
pytest-xdist worker died (a crash inside NVVM under load) and the controller
kept waiting for it.  The referee now cuts a run past ``--time-limit``
seconds: it kills the run's whole process group (grandchildren too), exits
with status 2 and says after how long, with what finished by then and what
was left running (``progress_plugin.py``'s log).  A fake run -- a small
pytest session with one test that hangs and leaves a grandchild -- stands
in for numba-cuda's suite, so the test costs about two seconds.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"

_FAKE_TESTS = """
import os, subprocess, sys, time
import pytest

def test_a():
    pass

def test_b():
    pytest.skip("not here")

def test_hangs():
    child = subprocess.Popen(["sleep", "120"])
    with open(os.environ["FAKE_GRANDCHILD"], "w") as f:
        f.write(str(child.pid))
    time.sleep(120)
"""


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def referee_tool(monkeypatch):
    """``numba_driver/run.py`` as a module, told that numba-cuda is installed."""
    mod = _load("numba_driver_run_under_test", TOOLS / "numba_driver" / "run.py")
    monkeypatch.setattr(importlib.metadata, "version", lambda name: mod.VERSION)
    return mod


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has ended (its new parent reaps it when it will)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; POSIX process groups")
def test_a_run_past_its_limit_is_cut_and_reports_what_finished(referee_tool, monkeypatch,
                                                              tmp_path, capsys):
    (tmp_path / "test_fake.py").write_text(textwrap.dedent(_FAKE_TESTS))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the repository's settings
    grandchild = tmp_path / "grandchild.pid"
    monkeypatch.setenv("FAKE_GRANDCHILD", str(grandchild))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # a quick start
    monkeypatch.setattr(referee_tool, "KILL_GRACE", 0.5)

    def fake_command(args, packages, plugins, junit, progress):
        return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "-p", "progress_plugin", f"--progress-log={progress}",
                "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"),
                str(tmp_path / "test_fake.py")]

    monkeypatch.setattr(referee_tool, "_command", fake_command)
    t0 = time.monotonic()
    code = referee_tool.referee(["--time-limit", "3", "--junit", str(tmp_path / "j.xml")],
                                ("fake",), {}, {}, "fake run")
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == 2, err
    assert took < 3 + 0.5 + 10, took  # cut at the limit, not after the hanging test
    assert "the run was cut after 3 s (--time-limit=3)" in err, err
    assert "finished by then: 1 passed, 0 failed, 1 skipped" in err, err
    assert "started, never finished: test_fake.py::test_hangs" in err, err
    # the whole process group went: the hanging test's own child too
    pid = int(grandchild.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), f"the grandchild {pid} outlived the cut run"


def test_a_run_within_its_limit_gives_its_status(referee_tool, tmp_path):
    code, wall = referee_tool.run_bounded([sys.executable, "-c", "raise SystemExit(3)"],
                                          dict(os.environ), tmp_path, 60)
    assert code == 3
    assert 0 <= wall < 60


def test_a_negative_time_limit_is_refused(referee_tool, capsys):
    with pytest.raises(SystemExit) as e:
        referee_tool.referee(["--time-limit", "-1"], ("fake",), {}, {}, "fake run")
    assert e.value.code == 2
    assert "--time-limit=-1.0: use a number of seconds >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("whole", [False, True])
def test_the_kernel_tests_tool_passes_its_limit(whole, monkeypatch):
    cudapy = _load("numba_cudapy_run_under_test", TOOLS / "numba_cudapy" / "run.py")
    seen = {}
    monkeypatch.setattr(cudapy.driver_run, "referee",
                        lambda argv, *a, **kw: seen.update(argv=argv, **kw) or 0)
    assert cudapy.main(["--whole"] if whole else []) == 0
    assert seen["time_limit"] == (cudapy.WHOLE_TIME_LIMIT if whole else cudapy.TIME_LIMIT)
    assert cudapy.TIME_LIMIT < cudapy.WHOLE_TIME_LIMIT == 3600
