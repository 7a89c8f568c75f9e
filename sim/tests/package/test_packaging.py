"""The distribution gpuarray-sim ships what the simulator needs at run time.

Builds the wheel of ``sim/`` (``python -m build --no-isolation``, no
download) from a copy of that folder and checks it: every module of
``gpuarray_sim``, the sources it builds on demand with the machine's
compilers (the fiber runtime, the host build's header, the PTX executor's
runtime headers and ptxas's table, the stand-in ``libcuda.so.1``), the pin on
gpuarray of the same version, and the entry points through which gpuarray
finds it.
"""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SIM = Path(__file__).resolve().parents[2]
PACKAGE = SIM / "gpuarray_sim"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    pytest.importorskip("build", reason="needs the 'build' package (the test extra)")
    work = tmp_path_factory.mktemp("sim-packaging")
    src = work / "src"
    shutil.copytree(SIM, src, ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "build", "dist", "tests", "*.so"))
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                           str(work / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"python -m build failed:\n{proc.stdout}\n{proc.stderr}"
    (path,) = (work / "dist").glob("gpuarray_sim-*.whl")
    with zipfile.ZipFile(path) as zf:
        yield zf


def test_wheel_ships_every_module_and_the_sources_built_on_demand(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    wanted = {p.relative_to(SIM).as_posix() for p in PACKAGE.rglob("*")
              if p.is_file() and "__pycache__" not in p.parts}
    assert any(n.endswith(".cpp") for n in wanted) and any(n.endswith("_libcuda.c") for n in wanted)
    assert sorted(wanted - names) == [], "not in the gpuarray-sim wheel (package-data in sim/pyproject.toml)"
    for name in wanted:
        assert wheel.read(name) == (SIM / name).read_bytes(), f"{name} differs in the wheel"
    assert not [n for n in names if n.startswith(("tests/", "sim/"))], sorted(names)[:10]


def test_wheel_pins_gpuarray_and_declares_its_entry_points(wheel: zipfile.ZipFile) -> None:
    (meta_name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    meta = email.parser.Parser().parsestr(wheel.read(meta_name).decode())
    assert meta["Name"] == "gpuarray-sim"
    import gpuarray

    assert meta["Version"] == gpuarray.__version__
    assert f"gpuarray=={gpuarray.__version__}" in [r.replace(" ", "") for r in meta.get_all("Requires-Dist")]
    (eps,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(eps).decode()
    for line in ("[gpuarray.backends]", "sim = gpuarray_sim:backend", "[gpuarray.commands]",
                 "standin = gpuarray_sim.standin:main", "[gpuarray.info]"):
        assert line in text, text
