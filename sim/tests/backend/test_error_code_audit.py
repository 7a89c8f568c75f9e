"""The error-code audit of docs/sim/testing.rst against cuda.h (issue 29).

Each row of the audit table names driver calls and the code the simulator
now returns; that code must be one cuda.h's documentation of each call
lists (its ``\\return`` section).  cuda.h comes with the CUDA toolkit, not
with the Python packages: the test skips, saying so, without one.
"""

from __future__ import annotations

import csv
import glob
import os
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "sim" / "testing.rst"


def _cuda_h() -> Path | None:
    candidates = [os.path.join(os.environ[v], "include", "cuda.h")
                  for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    candidates += sorted(glob.glob("/usr/local/cuda*/include/cuda.h"), reverse=True)
    return next((Path(c) for c in candidates if os.path.isfile(c)), None)


def _documented(header: Path) -> dict[str, set[str]]:
    src = header.read_text(errors="replace")
    out: dict[str, set[str]] = {}
    for m in re.finditer(r"/\*\*(.*?)\*/\s*CUresult\s+CUDAAPI\s+(cu\w+)\s*\(", src, re.S):
        doc = m.group(1).rsplit("/**", 1)[-1]  # the comment right above (the match may span several)
        r = re.search(r"\\return(.*?)(\\notefnerr|\\note|\\sa|$)", doc, re.S)
        out.setdefault(m.group(2), set(re.findall(r"::(CUDA_\w+)", r.group(1)) if r else ()))
    return out


def _rows() -> list[list[str]]:
    text = DOC.read_text()
    block = text.split(".. csv-table:: Simulator result codes against cuda.h", 1)[1]
    lines = [ln.strip() for ln in block.splitlines()[1:]]
    body = [ln for ln in lines if ln.startswith('"')]
    return list(csv.reader(body, skipinitialspace=True))


def test_the_audit_table_is_in_the_testing_guide():
    rows = _rows()
    assert len(rows) >= 20 and all(len(r) == 5 for r in rows)
    assert any("cuMemcpyHtoDAsync" in r[0] and r[4] == "CUDA_ERROR_INVALID_VALUE" for r in rows)


#: Codes cuda.h gives every call by one sentence rather than in each call's list
#: (issue 38): the sentence, as cuda.h words it.
GENERAL_RULES = {
    "CUDA_ERROR_NOT_INITIALIZED": "If ::cuInit() has not been called, any function from the "
                                  "driver API will return ::CUDA_ERROR_NOT_INITIALIZED.",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED": "If \\p ctx is current to other threads, then \\p ctx will "
                                       "remain current to those threads, and attempting to access "
                                       "\\p ctx from those threads will result in the error "
                                       "::CUDA_ERROR_CONTEXT_IS_DESTROYED.",
}


def test_every_code_after_the_audit_is_documented_for_its_call():
    header = _cuda_h()
    if header is None:
        pytest.skip("no CUDA toolkit here: cuda.h (CUDA_HOME, /usr/local/cuda*) is not installed")
    docs = _documented(header)
    prose = " ".join(header.read_text(errors="replace").replace("*", " ").split())
    for code, sentence in GENERAL_RULES.items():
        assert " ".join(sentence.replace("*", " ").split()) in prose, (code, sentence)
    for calls, condition, _doc, _before, after in _rows():
        for call in (c.strip() for c in calls.split("/")):
            assert call in docs, f"{call} is not declared in {header}"
            assert after in docs[call] or after in GENERAL_RULES, (
                f"{call} ({condition}): {after} not in {sorted(docs[call])}")
