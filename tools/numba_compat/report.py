"""Classify one run's outcomes and print the summary (no network, no Numba).

:func:`classify` takes the outcomes the pytest plugin recorded and the
expected-failure table of ``selection.py``; :func:`format_summary` prints
the counts and the failures grouped by the deliberate difference each stems
from. A failure that the table does not list is UNEXPECTED and makes
:attr:`Summary.exit_status` 1; so does an expected failure that no longer
fails, or a deselection that names no collected test, because then the
tables no longer describe the run.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Summary:
    """The counts and the grouping of one run.

    Attributes
    ----------
    passed, skipped : list of str
        Test ids that passed, or skipped themselves (a skip decorator of
        Numba's), in order.
    expected : dict
        Difference key -> the ids of the failures it explains.
    unexpected : dict
        Id -> failure message, for failures no table entry explains.
    fixed : list of str
        Ids the table expects to fail that passed (or skipped).
    deselected : list of str
        Ids removed before the run (``selection.DESELECTED``).
    stale : list of str
        Deselected ids that were not collected (renamed upstream).
    """

    passed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    expected: dict[str, list[str]] = field(default_factory=dict)
    unexpected: dict[str, str] = field(default_factory=dict)
    fixed: list[str] = field(default_factory=list)
    deselected: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        """Number of failures, expected or not."""
        return sum(len(v) for v in self.expected.values()) + len(self.unexpected)

    @property
    def exit_status(self) -> int:
        """0 when every failure is expected and the tables match the run, else 1."""
        return 1 if (self.unexpected or self.fixed or self.stale) else 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form, counts first."""
        return {
            "counts": {
                "passed": len(self.passed),
                "failed": self.failed,
                "expected_failures": self.failed - len(self.unexpected),
                "unexpected_failures": len(self.unexpected),
                "skipped": len(self.skipped),
                "deselected": len(self.deselected),
            },
            "expected": self.expected,
            "unexpected": self.unexpected,
            "fixed": self.fixed,
            "passed": self.passed,
            "skipped": self.skipped,
            "deselected": self.deselected,
            "stale_deselections": self.stale,
        }


def classify(
    results: Mapping[str, Any],
    expected_failures: Mapping[str, str],
    differences: Mapping[str, str],
    may_pass: Collection[str] = (),
) -> Summary:
    """Group a run's outcomes.

    Parameters
    ----------
    results : mapping
        The plugin's JSON: ``outcomes`` ({id: {"outcome", "message"}}),
        ``deselected`` and ``stale_deselections`` (lists of ids).
    expected_failures : mapping
        Test id -> difference key (``selection.EXPECTED_FAILURES``).
    differences : mapping
        Difference key -> its title (``selection.DIFFERENCES``).
    may_pass : collection of str
        Difference keys whose tests fail only when a race goes one way
        (``selection.MAY_PASS``): when they pass, they are not reported as
        fixed.

    Returns
    -------
    Summary

    Raises
    ------
    ValueError
        If an outcome is not passed/failed/skipped, or an expected failure
        or ``may_pass`` names a difference key that ``differences`` lacks.
    """
    for test_id, key in expected_failures.items():
        if key not in differences:
            raise ValueError(f"expected failure {test_id!r} names an unknown difference {key!r}")
    for key in may_pass:
        if key not in differences:
            raise ValueError(f"may_pass names an unknown difference {key!r}")
    s = Summary(
        deselected=list(results.get("deselected", [])),
        stale=list(results.get("stale_deselections", [])),
    )
    for test_id, entry in results["outcomes"].items():
        outcome = entry["outcome"]
        cause = expected_failures.get(test_id)
        if outcome == "failed":
            if cause is None:
                s.unexpected[test_id] = entry.get("message", "")
            else:
                s.expected.setdefault(cause, []).append(test_id)
        elif outcome in ("passed", "skipped"):
            (s.passed if outcome == "passed" else s.skipped).append(test_id)
            if cause is not None and cause not in may_pass:
                s.fixed.append(test_id)
        else:
            raise ValueError(f"test {test_id!r} has an unknown outcome {outcome!r}")
    return s


def format_summary(s: Summary, differences: Mapping[str, str], header: str = "") -> str:
    """The text run.py prints: counts, then the failures by cause."""
    lines = [header] if header else []
    lines.append(
        f"passed {len(s.passed)}, failed {s.failed} "
        f"({s.failed - len(s.unexpected)} expected, {len(s.unexpected)} UNEXPECTED), "
        f"skipped by Numba's decorators {len(s.skipped)}, deselected {len(s.deselected)}"
    )
    for key, ids in s.expected.items():
        lines.append(f"\nexpected ({len(ids)}): {differences[key]}")
        lines.extend(f"    {i}" for i in ids)
    if s.unexpected:
        lines.append(f"\nUNEXPECTED failures ({len(s.unexpected)}):")
        for i, message in s.unexpected.items():
            lines.append(f"    UNEXPECTED {i}\n        {message}")
    if s.fixed:
        lines.append("\nlisted as expected failures but did not fail (update selection.py):")
        lines.extend(f"    {i}" for i in s.fixed)
    if s.stale:
        lines.append("\ndeselected ids that were not collected (update selection.py):")
        lines.extend(f"    {i}" for i in s.stale)
    lines.append("\nresult: " + ("OK" if s.exit_status == 0 else "FAILED"))
    return "\n".join(lines)
