"""pytest plugin of ``tools/numba_compat/run.py`` (loaded with ``-p``).

It supplies what numba-cuda's own ``conftest.py`` (not shipped in its wheel)
would, deselects the tests run.py lists, and records every test's outcome:

* the class-scoped fixture ``initialize_from_pytest_config`` that
  ``numba.cuda.testing.CUDATestCase`` asks for (it sets the one attribute
  the FileCheck helpers read; no selected test uses them);
* ``NUMBA_COMPAT_DESELECT``: a JSON file ``{test id or file::Class: reason}``; those tests
  are removed at collection through pytest's ``deselected`` hook, so the
  terminal summary counts them ("N deselected"), and any id in the file that
  was not collected is recorded as stale;
* ``NUMBA_COMPAT_RESULTS``: the JSON file written at the end,
  ``{"outcomes": {test id: {"outcome": ..., "message": ...}},
  "deselected": [...], "stale_deselections": [...]}``. The outcome is
  ``passed``, ``failed`` (the test or its setup/teardown failed), or
  ``skipped`` (the test skipped itself, e.g. a decorator of Numba's).

Test ids are pytest node ids relative to numba-cuda's ``tests`` folder
(run.py makes it the rootdir): ``cudadrv/test_events.py::TestCudaEvent::test_event_elapsed``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

_outcomes: dict[str, dict[str, str]] = {}
_deselected: list[str] = []
_stale: list[str] = []


@pytest.fixture(scope="class")
def initialize_from_pytest_config(request: Any) -> None:
    request.cls._dump_failed_filechecks = False


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    path = os.environ.get("NUMBA_COMPAT_DESELECT")
    if not path:
        return
    with open(path, encoding="utf-8") as f:
        wanted: dict[str, str] = json.load(f)
    keep: list[Any] = []
    drop: list[Any] = []
    used: set[str | None] = set()
    for item in items:
        # An entry names one test, or its class ("file::Class").
        key = next((k for k in (item.nodeid, item.nodeid.rsplit("::", 1)[0]) if k in wanted), None)
        (keep if key is None else drop).append(item)
        used.add(key)
    _stale.extend(sorted(set(wanted) - used))
    _deselected.extend(item.nodeid for item in drop)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _message(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).splitlines()[0] if crash.message else ""
    if isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        return str(report.longrepr[2])
    return str(report.longrepr).strip().splitlines()[-1] if report.longrepr else ""


def pytest_runtest_logreport(report: Any) -> None:
    entry = _outcomes.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
    if report.failed:
        if entry["outcome"] != "failed":
            entry["outcome"] = "failed"
            entry["message"] = f"{report.when}: {_message(report)}"
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
        entry["message"] = _message(report)


def pytest_collectreport(report: Any) -> None:
    if report.failed:  # a test module that does not import: one failure
        _outcomes[report.nodeid] = {"outcome": "failed", "message": f"collect: {_message(report)}"}


def pytest_sessionfinish(session: Any) -> None:
    path = os.environ.get("NUMBA_COMPAT_RESULTS")
    if not path:
        return
    with open(path, "w", encoding="utf-8") as f:
        json.dump(
            {"outcomes": _outcomes, "deselected": _deselected, "stale_deselections": _stale},
            f,
            indent=1,
            sort_keys=True,
        )
