"""The logic of tools/numba_compat (the numba-cuda compatibility run), without the network.

run.py itself needs the package index to fetch numba-cuda; these tests check
what decides its verdict: the classification of outcomes, the consistency of
the selection tables, the pytest plugin (deselection, recorded outcomes) and
the shim's name mapping.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import gpuarray

TOOL = Path(__file__).resolve().parents[2] / "tools" / "numba_compat"


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


report = _load("numba_compat_report", TOOL / "report.py")
selection = _load("numba_compat_selection", TOOL / "selection.py")
shim = _load("numba_compat_sitecustomize", TOOL / "shim" / "sitecustomize.py")

DIFFS = {"copies": "Copies Numba refuses are made", "race": "a racy one"}
EXPECTED = {"a.py::T::test_ravel": "copies", "a.py::T::test_racy": "race"}


def _results(outcomes: dict[str, str], **extra: list[str]) -> dict:
    return {
        "outcomes": {i: {"outcome": o, "message": f"msg of {i}"} for i, o in outcomes.items()},
        "deselected": extra.get("deselected", []),
        "stale_deselections": extra.get("stale", []),
    }


def test_expected_failures_are_grouped_and_exit_zero() -> None:
    res = _results(
        {
            "a.py::T::test_ok": "passed",
            "a.py::T::test_skip": "skipped",
            "a.py::T::test_ravel": "failed",
            "a.py::T::test_racy": "failed",
        },
        deselected=["a.py::T::test_kernel"],
    )
    s = report.classify(res, EXPECTED, DIFFS, may_pass={"race"})
    assert s.passed == ["a.py::T::test_ok"]
    assert s.skipped == ["a.py::T::test_skip"]
    assert s.expected == {"copies": ["a.py::T::test_ravel"], "race": ["a.py::T::test_racy"]}
    assert s.unexpected == {}
    assert s.failed == 2
    assert s.exit_status == 0
    counts = s.as_dict()["counts"]
    assert counts == {
        "passed": 1,
        "failed": 2,
        "expected_failures": 2,
        "unexpected_failures": 0,
        "skipped": 1,
        "deselected": 1,
    }
    text = report.format_summary(s, DIFFS)
    assert "expected (1): Copies Numba refuses are made\n    a.py::T::test_ravel" in text
    assert "UNEXPECTED failures" not in text
    assert text.endswith("result: OK")


def test_unlisted_failure_is_unexpected_and_exit_one() -> None:
    res = _results({"a.py::T::test_ravel": "failed", "b.py::U::test_new": "failed"})
    s = report.classify(res, EXPECTED, DIFFS)
    assert s.unexpected == {"b.py::U::test_new": "msg of b.py::U::test_new"}
    assert s.expected == {"copies": ["a.py::T::test_ravel"]}
    assert s.exit_status == 1
    text = report.format_summary(s, DIFFS)
    assert "UNEXPECTED b.py::U::test_new\n        msg of b.py::U::test_new" in text
    assert "1 expected, 1 UNEXPECTED" in text
    assert text.endswith("result: FAILED")


def test_expected_failure_that_passes_is_flagged_unless_racy() -> None:
    res = _results({"a.py::T::test_ravel": "passed", "a.py::T::test_racy": "passed"})
    s = report.classify(res, EXPECTED, DIFFS, may_pass={"race"})
    assert s.fixed == ["a.py::T::test_ravel"]
    assert s.exit_status == 1
    assert "did not fail" in report.format_summary(s, DIFFS)


def test_stale_deselection_fails_the_run() -> None:
    s = report.classify(_results({}, stale=["gone.py::T::test_x"]), EXPECTED, DIFFS)
    assert s.exit_status == 1
    assert "gone.py::T::test_x" in report.format_summary(s, DIFFS)


def test_bad_tables_and_outcomes_raise() -> None:
    with pytest.raises(ValueError, match="'nope'"):
        report.classify(_results({}), {"x": "nope"}, DIFFS)
    with pytest.raises(ValueError, match="'nope'"):
        report.classify(_results({}), EXPECTED, DIFFS, may_pass={"nope"})
    with pytest.raises(ValueError, match="'xfailed'"):
        report.classify(_results({"a.py::T::t": "xfailed"}), EXPECTED, DIFFS)


def test_selection_tables_are_consistent() -> None:
    assert set(selection.EXPECTED_FAILURES.values()) <= set(selection.DIFFERENCES)
    assert set(selection.MAY_PASS) <= set(selection.DIFFERENCES)
    # Every difference explains at least one failure; no test is both
    # deselected and expected to fail; deselections name run modules.
    assert set(selection.DIFFERENCES) == set(selection.EXPECTED_FAILURES.values())
    assert not set(selection.DESELECTED) & set(selection.EXPECTED_FAILURES)
    assert not set(selection.TEST_MODULES) & set(selection.EXCLUDED_MODULES)
    run_files = {f"{m}.py" for m in selection.TEST_MODULES}
    for test_id in [*selection.DESELECTED, *selection.EXPECTED_FAILURES]:
        assert test_id.split("::")[0] in run_files, test_id
    assert all(reason.strip() for reason in selection.DESELECTED.values())
    assert all(reason.strip() for reason in selection.EXCLUDED_MODULES.values())


def test_shim_maps_every_name_onto_gpuarray() -> None:
    fake = types.SimpleNamespace(**{name: object() for name in shim.NAME_MAP})
    originals = vars(fake).copy()
    shim.install(fake, gpuarray)
    assert fake.to_device is gpuarray.to_device
    assert fake.get_current_device is gpuarray.get_device
    assert fake.MemoryPointer is gpuarray.MemoryPointer
    assert fake.is_available() is (gpuarray.device_count() > 0)
    start, end = gpuarray.event(), gpuarray.event()
    start.record()
    end.record()
    end.synchronize()
    assert fake.event_elapsed_time(start, end) >= 0.0
    assert all(shim.ORIGINALS[n] is originals[n] for n in shim.NAME_MAP)
    for name in shim.NAME_MAP:
        assert getattr(fake, name) is not originals[name], name


def test_shim_names_a_missing_numba_name() -> None:
    with pytest.raises(AttributeError, match="to_device"):
        shim.install(types.SimpleNamespace(), gpuarray)


def test_plugin_deselects_and_records_outcomes(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_fake.py").write_text(
        "import unittest\n"
        "class T(unittest.TestCase):\n"
        "    def test_ok(self): pass\n"
        "    def test_bad(self): self.assertEqual(1, 2)\n"
        "    @unittest.skip('not here')\n"
        "    def test_skip(self): pass\n"
        "    def test_dropped(self): raise RuntimeError('must not run')\n"
        "class U(unittest.TestCase):\n"
        "    def test_dropped_with_class(self): raise RuntimeError('must not run')\n"
    )
    (tmp_path / "test_broken.py").write_text("import no_such_module_here\n")
    deselect = {
        "test_fake.py::T::test_dropped": "a reason",
        "test_fake.py::U": "a class",
        "test_fake.py::T::test_renamed": "stale",
    }
    (tmp_path / "deselect.json").write_text(json.dumps(deselect))
    env = dict(os.environ)
    env.update(
        NUMBA_COMPAT_DESELECT=str(tmp_path / "deselect.json"),
        NUMBA_COMPAT_RESULTS=str(tmp_path / "results.json"),
        PYTHONPATH=str(TOOL / "shim"),
    )
    env.pop("NUMBA_COMPAT_SITE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", "pytest.ini", "--rootdir", str(tmp_path)]
        + ["-p", "numba_compat_plugin", "-p", "no:cacheprovider", "-q"]
        + ["--continue-on-collection-errors", "test_fake.py", "test_broken.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "2 deselected" in proc.stdout
    res = json.loads((tmp_path / "results.json").read_text())
    outcomes = {i: e["outcome"] for i, e in res["outcomes"].items()}
    assert outcomes == {
        "test_fake.py::T::test_ok": "passed",
        "test_fake.py::T::test_bad": "failed",
        "test_fake.py::T::test_skip": "skipped",
        "test_broken.py": "failed",
    }
    assert "AssertionError" in res["outcomes"]["test_fake.py::T::test_bad"]["message"]
    assert res["outcomes"]["test_fake.py::T::test_skip"]["message"] == "Skipped: not here"
    assert sorted(res["deselected"]) == [
        "test_fake.py::T::test_dropped",
        "test_fake.py::U::test_dropped_with_class",
    ]
    assert res["stale_deselections"] == ["test_fake.py::T::test_renamed"]
