"""The README's example runs exactly as the README tells a reader without a GPU.

The test takes the Python block the README says to save as ``example.py``,
saves it so in an empty folder next to a ``.venv`` link to the environment
running the tests (the one ``make demo``/``make test`` made), runs the
README's shell lines for the simulator -- ``. .venv/bin/activate`` and the
``GPUARRAY_BACKEND=sim`` line -- with bash, and compares what it prints with
the output the README shows.  The install lines name extras that exist.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def _blocks_after(marker: str) -> list[tuple[str, str]]:
    text = README.read_text(encoding="utf-8")
    at = text.index(marker)
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text, at)]


def test_readme_example_runs_as_told_without_a_gpu(tmp_path):
    blocks = _blocks_after("Save this as `example.py`")
    (lang, example), (sh_lang, commands), (out_lang, expected) = blocks[:3]
    assert (lang, sh_lang, out_lang) == ("python", "sh", "text"), blocks[:3]
    lines = [line.split("#", 1)[0].strip() for line in commands.splitlines()]
    activate = [line for line in lines if line.endswith("activate")]
    sim = [line for line in lines if "GPUARRAY_BACKEND=sim" in line]
    assert activate == [". .venv/bin/activate"], lines
    assert len(sim) == 1 and sim[0].endswith("example.py"), lines

    venv = Path(sys.prefix)
    if not (venv / "bin" / "activate").is_file():
        pytest.skip(f"the README's commands activate a virtual environment; {venv} is none "
                    "(make test runs the tests in .venv)")
    (tmp_path / "example.py").write_text(example, encoding="utf-8")
    (tmp_path / ".venv").symlink_to(venv, target_is_directory=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUARRAY_") and k != "VIRTUAL_ENV"}
    env["GPUARRAY_KERNEL_CACHE_DIR"] = str(tmp_path / "kernel-cache")
    proc = subprocess.run(["bash", "-ec", f"{activate[0]}\n{sim[0]}\n"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{sim[0]!r} failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout == expected, (proc.stdout, expected)


def test_readme_example_fails_clearly_without_the_simulator_setting(tmp_path):
    # The reason the README tells readers to set GPUARRAY_BACKEND=sim: the
    # default backend is the GPU, and without one it says how to use the
    # simulator instead of falling back silently.
    from gpuarray._driver.cuda import CudaBackend
    from gpuarray.errors import CudaUnavailableError

    try:
        CudaBackend().init()
    except CudaUnavailableError:
        pass
    else:  # pragma: no cover - a machine with a GPU
        from gpuarray_sim import standin as _standin

        pytest.skip("the stand-in driver is in place (GPUARRAY_STANDIN): the example runs on it"
                    if _standin.active() else
                    "this machine has a usable GPU: the example runs without the simulator")
    example = _blocks_after("Save this as `example.py`")[0][1]
    (tmp_path / "example.py").write_text(example, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUARRAY_")}
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "GPUARRAY_BACKEND=sim" in proc.stderr, proc.stderr[-2000:]


def test_readme_install_lines_name_the_cuda_extras():
    text = README.read_text(encoding="utf-8")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # no tomllib on 3.10
    for extra in ("cu12", "cu13"):
        assert f'pip install ".[{extra}]"' in text
        assert re.search(rf"^{extra} = \[", pyproject, re.M), f"no extra {extra} in pyproject.toml"
    assert "CUDA_EXTRA=cu12" in text
