"""A progress log of a pytest run, for ``run.py`` to report what finished when it cuts the run.

Loaded with ``-p progress_plugin --progress-log=FILE`` by ``run.py``: the
process that reports (pytest-xdist's controller, which receives its
workers' reports, or pytest itself without xdist) appends one line per
event to FILE, flushed at once, so the log outlives a run that is killed:
``start<TAB>nodeid`` when a test starts and ``done<TAB>nodeid<TAB>outcome``
when it has a result (``passed``, ``failed``, ``skipped``; a failure in
setup or teardown counts as ``failed``).  :func:`summary` reads it back:
how many finished with each outcome, and which started and never finished
(a hang, or a worker that died under them).  No other effect on the run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: The outcomes :func:`summary` counts, in its order.
OUTCOMES = ("passed", "failed", "skipped")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--progress-log", default="",
                     help="append a line per test started and finished to this file")


class _Log:
    def __init__(self, path: str) -> None:
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - for the run
        self._outcome: dict[str, str] = {}  # nodeid -> failed/skipped so far (xdist interleaves)

    def write(self, *fields: str) -> None:
        self._file.write("\t".join(fields) + "\n")

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        self.write("start", nodeid)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self._outcome[report.nodeid] = "failed"
        elif report.skipped:
            self._outcome.setdefault(report.nodeid, "skipped")
        if report.when == "teardown":  # a test's last report: its outcome is known
            self.write("done", report.nodeid, self._outcome.pop(report.nodeid, "passed"))

    def close(self) -> None:
        self._file.close()


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("progress_log")
    # xdist's workers relay their reports to the controller, which logs them
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Log(path), "progress_log")


def pytest_unconfigure(config: pytest.Config) -> None:
    log = config.pluginmanager.get_plugin("progress_log")
    if log is not None:
        log.close()


def summary(path: Path) -> tuple[dict[str, int], list[str]]:
    """Counts of the tests the log at ``path`` shows finished, by outcome; those left running.

    A missing log (the run never got as far as pytest's start) is an empty one.
    """
    counts = dict.fromkeys(OUTCOMES, 0)
    running: dict[str, None] = {}
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        fields = line.split("\t")
        if len(fields) == 2 and fields[0] == "start":
            running[fields[1]] = None
        elif len(fields) == 3 and fields[0] == "done" and fields[2] in counts:
            counts[fields[2]] += 1
            running.pop(fields[1], None)
    return counts, list(running)
