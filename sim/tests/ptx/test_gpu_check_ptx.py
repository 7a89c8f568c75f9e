"""The ``ptx-vs-gpu`` step of ``make gpu-check`` (issue 34), rehearsed without a GPU.

sim/tools/ptx_compare/ptx_compare.py launches PTX programs on a device and on the
simulator's PTX executor and compares the outputs bit for bit.  Here the
device side is a second simulator (``--rehearse``): a small subset must come
out equal, and a difference planted on the device side must be reported as
the step says -- a failure outside the executor's documented unknown
classes, a finding inside them (``.approx``, NaN payloads) -- with its count,
ulp distance, index and both values.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

# every test once per tier: translated and built, and interpreted (conftest.py)
pytestmark = pytest.mark.usefixtures("ptx_tier")

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "tools" / "gpu_check"
COMPARE = ROOT / "sim" / "tools" / "ptx_compare"


def _load(name: str, folder: Path = TOOL):
    spec = importlib.util.spec_from_file_location(f"gpu_check_{name}", folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look the module up by name
    spec.loader.exec_module(mod)
    return mod


cmp = _load("ptx_compare", COMPARE)
run_py = sys.modules.get("gpu_check_run") or _load("run")

# one program of each source, and the classes the planted differences need
SUBSET = ("ops:add_rn_f32,ops:ex2_approx,ops:abs_neg_f32,numba:numba_warp_reduce,"
          "numba:numba_atomics,nvrtc:copy_f2_f4_1d,saxpy")


def _rehearse(tmp_path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "ptx.json"
    rc = cmp.main(["--rehearse", "--programs", SUBSET, "--jobs", "1", "--json", str(out),
                   *extra])
    return rc, {e["program"]: e for e in json.loads(out.read_text())["programs"]}


def test_the_rehearsal_of_a_subset_is_equal_bit_for_bit(tmp_path, capsys):
    rc, got = _rehearse(tmp_path)
    assert rc == 0
    assert sorted(got) == sorted(SUBSET.split(","))
    for name, e in got.items():
        assert e["status"] == "equal", e
        assert sum(b["compared"] for b in e["buffers"]) > 0, name
    # the exchange and compare-and-swap results depend on the threads' order: not compared
    (atomics,) = got["numba:numba_atomics"]["buffers"]
    assert atomics["compared"] == atomics["elements"] - 2
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("ptx-vs-gpu: 7 programs: 7 equal, 0 findings")
    assert run_py.step_summary(capsys.readouterr().out + last + "\n") == last


def _flip(name: str, pick):
    """An ``_attempt`` that flips the low bit of one element of ``name``'s device output."""
    real = cmp._attempt

    def attempt(side, prog):
        outs = real(side, prog)
        if side.name == "device" and prog.name == name:
            a = outs[0].reshape(-1)
            bits = a.view(f"u{a.itemsize}")
            bits[pick(a)] ^= 1
        return outs
    return attempt


def test_a_difference_outside_the_unknown_classes_fails_the_step(monkeypatch, tmp_path):
    monkeypatch.setattr(cmp, "_attempt", _flip("ops:add_rn_f32", lambda a: 5))
    rc, got = _rehearse(tmp_path)
    assert rc == 1
    e = got["ops:add_rn_f32"]
    assert e["status"] == "DIFFERS" and e["unknown_classes"] == []
    (b,) = e["buffers"]
    assert (b["differ"], b["max_ulp"], b["first_index"]) == (1, 1, 5)
    assert b["device"] != b["simulator"] and "0x" in b["device"]
    assert "1 differ, max 1 ulp, first at [5]" in cmp.line(e)
    assert all(x["status"] == "equal" for k, x in got.items() if k != "ops:add_rn_f32")


def test_differences_in_the_documented_unknown_classes_are_findings(monkeypatch, tmp_path):
    monkeypatch.setattr(cmp, "_attempt", _flip("ops:ex2_approx", lambda a: 0))
    # a NaN's payload, in a program (abs, neg) of no unknown instruction class
    monkeypatch.setattr(cmp, "_attempt", _flip("ops:abs_neg_f32",
                                               lambda a: int(np.flatnonzero(np.isnan(a))[0])))
    rc, got = _rehearse(tmp_path)
    assert rc == 0
    assert got["ops:ex2_approx"]["status"] == "finding"
    assert got["ops:ex2_approx"]["unknown_classes"] == ["approx"]
    assert got["ops:ex2_approx"]["buffers"][0]["differ"] == 1
    nan = got["ops:abs_neg_f32"]
    assert nan["status"] == "finding" and nan["unknown_classes"] == ["NaN payload"]
    assert nan["buffers"][0]["nan_payload_only"]


@pytest.mark.parametrize("text, classes", [
    ("add.f32 %d, %a, %b;", ["unfused add/mul"]),
    ("mul.ftz.f64 %d, %a, %b;", ["unfused add/mul"]),
    ("add.rn.f32 %d, %a, %b;", []),
    ("fma.rn.f32 %d, %a, %b, %c;", []),
    ("add.s32 %d, %a, %b;", []),
    ("ex2.approx.ftz.f32 %d, %a;", ["approx"]),
    ("fma.rn.f16 %d, %a, %b, %c;", ["f16 fma / bf16 double rounding"]),
    ("fma.rn.f16x2 %d, %a, %b, %c;", ["f16 fma / bf16 double rounding"]),
    ("add.rn.bf16 %d, %a, %b;", ["f16 fma / bf16 double rounding"]),
    ("add.rn.f16 %d, %a, %b;", []),
    ("cvt.rn.bf16.f32 %d, %a;", []),
])
def test_the_unknown_classes_are_recognised_in_ptx(text, classes):
    assert cmp.unknown_classes(text) == classes


def test_a_launch_failing_on_one_side_only_fails_the_program():
    prog = cmp.ptx_programs.Program("p", "add.rn.f32 %d, %a, %b;", [], lambda p: [])
    one = cmp.judge(prog, "CudaError 700: illegal address", [np.zeros(2, np.float32)])
    assert one["status"] == "DIFFERS" and one["device_error"].startswith("CudaError")
    both = cmp.judge(prog, "CudaError 700: at line 3", "CudaError 700: at line 4")
    assert both["status"] == "equal"
    other = cmp.judge(prog, "CudaError 700: at line 3", "CudaError 719: at line 3")
    assert other["status"] == "DIFFERS"


def test_ulp_distance_crosses_zero_and_counts_both_widths():
    for dt in (np.float32, np.float64):
        dev = np.array([0.0, 1.0, -0.0, np.nan], dt)
        sim = np.array([-0.0, np.nextafter(dt(1), dt(2)), np.nextafter(dt(0), dt(-1)), 2.0], dt)
        r = cmp.compare("out", dev, sim)
        assert r["differ"] == 4 and r["max_ulp"] == 1 and r["nan_mismatch"] == 1
        assert not r["nan_payload_only"]
    ints = cmp.compare("out", np.array([1, 2, 3], np.int64), np.array([1, -2, 3], np.int64))
    assert (ints["differ"], ints["max_abs_diff"], ints["first_index"]) == (1, 4, 1)


def test_the_gpu_check_plan_runs_the_comparison_with_its_own_limit(tmp_path):
    run = run_py.Run(sys.executable, tmp_path, tmp_path, "x", {"GPUARRAY_BACKEND": "cuda"}, 8,
                     1.0)
    steps = {s.name: s for s in run_py.plan(run)}
    s = steps["ptx-vs-gpu"]
    assert s.argv is not None and s.argv[1].endswith("ptx_compare.py")
    assert s.argv[-1] == str(tmp_path / "x.ptx.json")
    assert 0 < s.floor < s.cap <= 60
    names = list(steps)
    assert names.index("suite") < names.index("ptx-vs-gpu") < names.index("report")


class _PickyDriver:
    """A simulator that refuses PTX a device might: ``.version`` 9.5 is 222 (CUDA 13.0's
    ptxas reads 9.0), and -- standing in for a form a GPU's JIT refuses that the executor
    runs -- ``sub.rn.f16`` is 218."""

    def __init__(self):
        from gpuarray_sim import SimBackend

        self._b = SimBackend()

    def __getattr__(self, name):
        return getattr(self._b, name)

    def module_load_data(self, image: bytes) -> int:
        from gpuarray.errors import CudaError

        if b".version 9.5" in image:
            raise CudaError(222, "cuModuleLoadData", "PTX ISA 9.5 is newer than this driver's")
        if b"sub.rn.f16" in image:
            raise CudaError(218, "cuModuleLoadData", "ptxas: illegal rounding modifier")
        return self._b.module_load_data(image)


def test_the_device_gets_ptx_it_loads_and_its_refusals_are_reported(monkeypatch, tmp_path):
    import gpuarray  # noqa: F401  (the executor's toolchain)

    monkeypatch.setattr(cmp, "device_side",
                        lambda rehearse, ptxas: (cmp.Side("device", _PickyDriver()), "picky"))
    out = tmp_path / "ptx.json"
    rc = cmp.main(["--programs", "ops:add_rn_f32,ops:sub_rn_f16,ops:fma_rn_f32,saxpy",
                   "--jobs", "1", "--json", str(out)])
    rep = json.loads(out.read_text())
    got = {e["program"]: e for e in rep["programs"]}
    assert rc == 1  # the simulator runs what the device refuses: more lenient, a failure
    refused = got["ops:sub_rn_f16"]
    assert refused["status"] == "DIFFERS" and refused["device_error"].startswith("CudaError 218")
    assert refused["simulator_error"] is None
    # the other entries of the refused shared module, and saxpy's 9.5 lowered to 9.0
    for name in ("ops:add_rn_f32", "ops:fma_rn_f32", "saxpy"):
        assert got[name]["status"] == "equal", got[name]
    assert "lowered to 9.0" in got["saxpy"]["note"]
    assert any("refuses 1 of 3 entries" in n for n in rep["notes"])


def test_the_rehearsal_with_ptxas_loads_what_the_toolkit_assembles(tmp_path):
    if cmp.find_ptxas() is None:
        pytest.skip("no CUDA toolkit ptxas on PATH or in /usr/local/cuda*/bin")
    out = tmp_path / "ptx.json"
    rc = cmp.main(["--rehearse", "--ptxas", "--programs", "ops:add_rn_f32,saxpy", "--jobs", "1",
                   "--json", str(out)])
    rep = json.loads(out.read_text())
    assert rc == 0 and rep["counts"]["equal"] == 2
    assert "ptxas" in rep["device"]
