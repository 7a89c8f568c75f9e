"""The distribution ships what the package needs at run time.

Builds the sdist and, from it, the wheel (``python -m build --no-isolation``,
so no download) from a copy of the source tree, then checks the wheel: the CUDA
C sources of ``kernels/`` under ``gpuarray/_kernel_sources/`` byte for byte,
``py.typed``, every module of ``gpuarray/``, the licence and its metadata, and
the declared dependencies and extras.  The ``network`` tests resolve the
built wheel's CUDA extras with ``pip install --dry-run --report`` into an
empty virtual environment (they need the package index and skip, saying so,
when it cannot be reached).
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "kernels"
KERNEL_PREFIX = "gpuarray/_kernel_sources/"

# Top-level entries that are not part of the distribution (or are outputs).
_NOT_COPIED = {
    ".git",
    ".venv",
    ".ci",
    "build",
    "dist",
    "docs",
    "bench",
    "tests",
    ".pytest_cache",
    ".hypothesis",
    ".benchmarks",
    ".mypy_cache",
    ".ruff_cache",
    ".whl",
    ".gl",
}


def _ignore(directory: str, names: list[str]) -> set[str]:
    top = Path(directory) == ROOT
    return {
        n
        for n in names
        if n == "__pycache__" or n.endswith((".egg-info", ".so", ".pyd"))
        or (top and n in _NOT_COPIED)
    }


@pytest.fixture(scope="module")
def wheel_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from the sdist of a copy of the source tree."""
    pytest.importorskip(
        "build", reason="needs the 'build' package (in the test extra: pip install -e '.[test]')"
    )
    work = tmp_path_factory.mktemp("packaging")
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=_ignore)
    out = work / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        pytest.fail(f"python -m build failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    wheels = sorted(out.glob("gpuarray-*.whl"))
    assert len(wheels) == 1, f"expected one wheel, got {wheels}"
    sdists = sorted(out.glob("gpuarray-*.tar.gz"))
    assert len(sdists) == 1, f"expected one sdist, got {sdists}"
    return wheels[0]


@pytest.fixture(scope="module")
def wheel(wheel_path: Path) -> Iterator[zipfile.ZipFile]:
    with zipfile.ZipFile(wheel_path) as zf:
        yield zf


def _metadata(wheel: zipfile.ZipFile):
    (meta_name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return email.parser.Parser().parsestr(wheel.read(meta_name).decode())


def _kernel_sources_on_disk() -> dict[str, Path]:
    return {
        p.relative_to(KERNELS).as_posix(): p
        for p in sorted(KERNELS.rglob("*"))
        if p.suffix in (".cu", ".cuh") and "__pycache__" not in p.parts
    }


def test_wheel_ships_every_kernel_source(wheel: zipfile.ZipFile) -> None:
    on_disk = _kernel_sources_on_disk()
    assert on_disk, f"{KERNELS} holds no .cu or .cuh file"
    in_wheel = {
        n[len(KERNEL_PREFIX) :]
        for n in wheel.namelist()
        if n.startswith(KERNEL_PREFIX) and n.endswith((".cu", ".cuh"))
    }
    assert in_wheel == set(on_disk), (
        f"missing from the wheel: {sorted(set(on_disk) - in_wheel)}; "
        f"not in kernels/: {sorted(in_wheel - set(on_disk))} "
        "(package-data in pyproject.toml takes kernels/*.cu and kernels/*.cuh, no subfolders)"
    )
    for rel, path in on_disk.items():
        assert wheel.read(KERNEL_PREFIX + rel) == path.read_bytes(), f"{rel} differs in the wheel"


def test_wheel_ships_what_the_kernel_loader_needs(wheel: zipfile.ZipFile) -> None:
    from gpuarray._kernels._source import KERNEL_FILES

    assert KERNEL_FILES
    missing = [f for f in KERNEL_FILES if KERNEL_PREFIX + f not in wheel.namelist()]
    assert not missing, f"the kernel loader needs {missing}, which the wheel lacks"


def test_wheel_ships_every_module_and_py_typed(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert (ROOT / "gpuarray" / "__init__.py").is_file(), "gpuarray/__init__.py does not exist"
    modules = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "gpuarray").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    missing = sorted(modules - names)
    assert not missing, (
        f"not in the wheel: {missing} (setup.py's find_packages only takes folders with an "
        "__init__.py)"
    )
    assert "gpuarray/py.typed" in names


#: What only the simulator's distribution (gpuarray-sim, ``sim/``) may hold.
SIMULATOR_PARTS = ("gpuarray_sim", "standin", "_libcuda", "_hostrt", "ga_host.cuh", "/ptx/",
                   "ptxrt.h", "legal_forms", "_reference.py", ".cpp")


def test_wheel_holds_no_simulator(wheel: zipfile.ZipFile) -> None:
    """The simulator, stand-in, fiber runtime and PTX translator ship in gpuarray-sim only."""
    leaked = [n for n in wheel.namelist() if any(part in n for part in SIMULATOR_PARTS)]
    assert not leaked, f"the gpuarray wheel holds parts of the simulator: {leaked}"


def test_sim_extra_pins_the_simulator_to_the_same_version(wheel: zipfile.ZipFile) -> None:
    meta = _metadata(wheel)
    sim = [r for r in meta.get_all("Requires-Dist") or [] if "extra" in r and "sim" in r]
    assert len(sim) == 1 and sim[0].replace(" ", "").startswith(f"gpuarray-sim=={meta['Version']};"), sim


def _without_the_simulator(wheel_path: Path, tmp_path: Path) -> Path:
    """A venv with this one's packages less gpuarray and gpuarray-sim, and the built gpuarray wheel.

    The venv gets links to every entry of this environment's site-packages
    except gpuarray's and gpuarray-sim's (their editable installs and
    metadata), so numpy, cuda-bindings and pytest need no download; pip then
    installs the wheel itself (no dependencies: they are there).
    """
    import site
    import sysconfig

    env = tmp_path / "nosim"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    (target,) = (env / "lib").glob("python3*/site-packages")
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():
        low = entry.name.lower()
        if low.startswith(("gpuarray", "__editable__")) or low.endswith(".pth"):
            continue
        (target / entry.name).symlink_to(entry)
    assert site  # the links are the environment; nothing of this one's .pth files is taken
    proc = _pip("--python", str(env / "bin" / "python"), "install", "--no-deps", "--no-index",
                "--quiet", str(wheel_path))
    assert proc.returncode == 0, proc.stderr
    return env / "bin" / "python"


def test_gpuarray_alone_imports_runs_its_non_simulator_tests_and_names_the_extra(
        wheel_path: Path, tmp_path: Path) -> None:
    """Where gpuarray-sim is not installed: import gpuarray works and loads nothing of it,
    the tests that need no driver pass, and GPUARRAY_BACKEND=sim names ``gpuarray[sim]``."""
    py = _without_the_simulator(wheel_path, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUARRAY_", "PYTHON"))}
    code = ("import importlib.util, sys, gpuarray\n"
            "assert importlib.util.find_spec('gpuarray_sim') is None, 'gpuarray_sim is importable'\n"
            "assert not [m for m in sys.modules if m.startswith('gpuarray_sim')]\n"
            "print(gpuarray.__file__)\n")
    proc = subprocess.run([str(py), "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert str(tmp_path / "nosim") in proc.stdout, proc.stdout   # the wheel's gpuarray, not the tree's
    sim = dict(env, GPUARRAY_BACKEND="sim")
    proc = subprocess.run([str(py), "-c", "import gpuarray; gpuarray.to_device([1.0])"], cwd=tmp_path,
                          env=sim, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "SimulatorNotInstalledError" in proc.stderr, proc.stderr
    assert 'pip install "gpuarray[sim]"' in proc.stderr, proc.stderr
    proc = subprocess.run([str(py), "-m", "gpuarray", "standin", "--", "true"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and 'pip install "gpuarray[sim]"' in proc.stderr, proc.stderr
    # The tests that reach no driver, from the tree, against the installed wheel (appended:
    # the tree's own gpuarray/ is not imported first).
    proc = subprocess.run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--import-mode=append", "-c", str(ROOT / "pyproject.toml"),
                           "--rootdir", str(ROOT), str(ROOT / "tests" / "nodriver")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout, proc.stdout[-2000:]


def _requirement_name(req: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req)
    assert match, f"unparsable Requires-Dist: {req!r}"
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def test_wheel_declares_dependencies_and_extras(wheel: zipfile.ZipFile) -> None:
    meta = _metadata(wheel)
    assert meta["Name"] == "gpuarray"
    assert meta["Version"] == "0.1.0"
    assert meta["Requires-Python"] == ">=3.10"

    requires = meta.get_all("Requires-Dist") or []
    unconditional = {_requirement_name(r) for r in requires if ";" not in r}
    # The CUDA major version (and with it NVRTC) is chosen by an extra.
    assert unconditional == {"numpy", "cuda-bindings", "cuda-pathfinder"}, requires

    extras: dict[str, set[str]] = {}
    for r in requires:
        found = re.search(r"""extra\s*==\s*["']([^"']+)["']""", r)
        if found:
            extras.setdefault(found.group(1), set()).add(_requirement_name(r))
    expected = {
        "cu12": {"cuda-bindings", "nvidia-cuda-nvrtc-cu12"},
        "cu13": {"cuda-bindings", "nvidia-cuda-nvrtc"},
        "test": {"pytest", "pytest-benchmark", "hypothesis", "ml-dtypes", "build"},
        "bench": {"pytest-benchmark", "matplotlib"},
        "docs": {"sphinx", "numpydoc", "pydata-sphinx-theme"},
        "cupy": {"cupy-cuda13x"},
        "torch": {"torch"},
    }
    for extra, names in expected.items():
        assert names <= extras.get(extra, set()), f"extra {extra!r}: {extras.get(extra)}"
    assert set(expected) <= set(meta.get_all("Provides-Extra") or [])


def test_wheel_ships_the_licence_and_its_metadata(wheel: zipfile.ZipFile) -> None:
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("BSD 3-Clause License")
    assert "Neither the name of the copyright holder" in licence  # clause 3
    (in_wheel,) = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    assert wheel.read(in_wheel).decode() == licence
    meta = _metadata(wheel)
    assert meta["License-Expression"] == "BSD-3-Clause"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Author"] and meta["Maintainer"], (meta["Author"], meta["Maintainer"])


def test_sdist_ships_the_licence(wheel_path: Path) -> None:
    import tarfile

    (sdist,) = wheel_path.parent.glob("gpuarray-*.tar.gz")
    with tarfile.open(sdist) as tf:
        names = tf.getnames()
    assert "gpuarray-0.1.0/LICENSE" in names, sorted(names)[:20]


# ------------------------------------------------ resolving the CUDA extras
# What each extra must bring: cuda-bindings of its major version and the
# NVRTC wheel of the same major version (never the other one).
NVRTC_WHEEL = {12: "nvidia-cuda-nvrtc-cu12", 13: "nvidia-cuda-nvrtc"}


def _pip(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def index_reachable() -> None:
    proc = _pip("index", "versions", "cuda-bindings", timeout=120)
    if proc.returncode != 0 or "12.9." not in proc.stdout or "13." not in proc.stdout:
        pytest.skip("the package index cannot be reached (pip index versions cuda-bindings: "
                    f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}); the extras "
                    "are resolved where it can (CI)")


def _resolve(wheel_path: Path, extra: str, tmp_path: Path) -> dict[str, str]:
    """``{name: version}`` that pip would install for ``gpuarray[extra]`` into an empty venv."""
    env = tmp_path / f"env-{extra or 'base'}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True,
                   timeout=120)
    report = tmp_path / f"report-{extra or 'base'}.json"
    target = f"{wheel_path}[{extra}]" if extra else str(wheel_path)
    proc = _pip("--python", str(env / "bin" / "python"), "install", "--dry-run", "--quiet",
                "--report", str(report), target)
    assert proc.returncode == 0, f"pip could not resolve {target}:\n{proc.stderr}"
    installs = json.loads(report.read_text())["install"]
    return {_requirement_name(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}


def _major(version: str) -> int:
    return int(version.split(".")[0])


@pytest.mark.network
@pytest.mark.parametrize("major", [12, 13])
def test_cuda_extra_resolves_to_matching_majors(wheel_path, index_reachable, tmp_path, major):
    got = _resolve(wheel_path, f"cu{major}", tmp_path)
    assert {"gpuarray", "numpy", "cuda-bindings", "cuda-pathfinder"} <= set(got), got
    assert _major(got["cuda-bindings"]) == major, got
    nvrtc = NVRTC_WHEEL[major]
    assert nvrtc in got and _major(got[nvrtc]) == major, got
    other = NVRTC_WHEEL[25 - major]
    assert other not in got, f"gpuarray[cu{major}] also pulls {other}: {got}"
    assert "cuda-python" not in got, got


@pytest.mark.network
def test_base_install_takes_bindings_12_or_13_and_no_nvrtc(wheel_path, index_reachable, tmp_path):
    got = _resolve(wheel_path, "", tmp_path)
    assert _major(got["cuda-bindings"]) in (12, 13), got
    assert not set(NVRTC_WHEEL.values()) & set(got), got


def test_wheel_ships_the_compiled_dlpack_core(wheel: zipfile.ZipFile) -> None:
    """setup.py builds gpuarray.interop._dlpack_core against the Limited API (abi3):
    the wheel holds the extension and an abi3 tag. The copied
    tree has no prebuilt extension, so this is the build's own work."""
    names = wheel.namelist()
    built = [n for n in names if n.startswith("gpuarray/interop/_dlpack_core.")
             and n.endswith((".so", ".pyd"))]
    assert len(built) == 1, f"no compiled DLPack core in the wheel: {sorted(names)}"
    assert ".abi3." in built[0] or built[0].endswith(".pyd"), built
    (wheel_meta,) = [n for n in names if n.endswith(".dist-info/WHEEL")]
    tags = [line for line in wheel.read(wheel_meta).decode().splitlines()
            if line.startswith("Tag:")]
    assert tags and all("-abi3-" in t for t in tags), tags
