"""What ``import gpuarray`` loads: a fixed allow-list, so that growth is a decision.

PERF.md wants ``import gpuarray`` within NumPy's import + 30 ms.  The package
imports what the first ``to_device`` needs and loads the rest of its API on
first use (``gpuarray/__init__.py``: ``_LAZY``, PEP 562; the kernel loader
and cache with the first kernel launch, ``gpuarray/_kernels``).  A change that makes
import load another gpuarray module, or another module beyond NumPy's, fails
here: add it to the list only when the import needs it (and measure:
``python bench/import_time.py``).  Each check runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: gpuarray's modules that ``import gpuarray`` may load (prefix ``gpuarray.`` omitted).
GPUARRAY_MODULES = frozenset("""
    _array _array_protocols _array_views _capture_foreign _coerce _config _creation
    _device _driver _driver._base _driver._call_kinds _driver._checkpoint _driver._finalize
    _driver._fork _footprint _graph _kernels _kernels._dtypes _kernels._launch
    _kernels._plan _kernels._specs _layout _staging _stream
    _stream_capture _stream_host _transfer _wire errors interop interop._cai interop._cai_desc interop._core
    interop._dlpack interop._dlpack_capsule interop._dlpack_core interop._dlpack_export
    interop._dlpack_protocol interop._dlpack_table memory memory._deallocs memory._default
    memory._host memory._ipc memory._managed memory._manager memory._pointer memory._pool
    memory._pool_held memory._stream_ordered
""".split())

#: Other modules it may load beyond what ``import numpy`` loads (standard library only:
#: no CUDA binding, no peer library, nothing heavy such as logging, tempfile or inspect).
#: ``__future__`` (our ``from __future__ import annotations``): NumPy up to 2.4 loads it
#: first, NumPy 2.5 does not (the GPU image's, 2026-11-28).
OTHER_MODULES = frozenset("""
    __future__ _heapq _queue atexit copy dataclasses heapq queue signal threading
""".split())

#: Modules of the API that load on first use, never at import.
LAZY_MODULES = ("_context", "_hostdev", "_support")

_PROBE = """
import json, sys
import numpy
before = set(sys.modules)
import gpuarray
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _loaded(code: str = _PROBE, backend: str = "sim") -> list[str]:
    # As an installed wheel's import sees it: -S leaves out site, and with it the editable
    # install's finder, which loads pathlib and urllib at startup (so their cost was hidden
    # here and paid by every wheel user: issue 43); the package from this checkout, NumPy
    # from this environment's site-packages.
    env = dict(os.environ, GPUARRAY_BACKEND=backend)
    where = sysconfig.get_paths()
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(
        p for p in (str(ROOT), where["purelib"], where["platlib"], env.get("PYTHONPATH")) if p))
    r = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["sim", "cuda"])
def test_import_gpuarray_loads_only_the_allowed_modules(backend):
    # The backend is chosen at first use, so both load the same.
    loaded = _loaded(backend=backend)
    ours = {m.removeprefix("gpuarray.") for m in loaded if m == "gpuarray" or m.startswith("gpuarray.")}
    ours.discard("gpuarray")
    other = {m for m in loaded if m != "gpuarray" and not m.startswith("gpuarray.")}
    assert not ours - GPUARRAY_MODULES, (
        f"import gpuarray now loads {sorted(ours - GPUARRAY_MODULES)}: load them on first use "
        "(gpuarray/__init__.py _LAZY, or an import inside the function), or add them to "
        "GPUARRAY_MODULES if the import needs them")
    assert not other - OTHER_MODULES, f"import gpuarray now also loads {sorted(other - OTHER_MODULES)}"
    assert not any(m.startswith(("cuda", "torch", "cupy", "numba")) for m in loaded)
    assert not any(m.startswith("gpuarray_sim") for m in loaded), "import gpuarray loaded the simulator"
    assert not {f"gpuarray.{m}" for m in LAZY_MODULES} & set(loaded)


def test_every_lazy_name_loads_on_first_use_and_is_the_modules_own():
    code = """
import json, sys, importlib
import gpuarray
out = {}
for name, module in sorted(gpuarray._LAZY.items()):
    value = getattr(gpuarray, name)
    out[name] = value is getattr(importlib.import_module(module, "gpuarray"), name)
print(json.dumps(out))
"""
    env = dict(os.environ, GPUARRAY_BACKEND="sim")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert seen and all(seen.values()), seen
    import gpuarray

    assert set(gpuarray._LAZY) <= set(gpuarray.__all__)  # lazy names are public, listed
    assert set(gpuarray._LAZY) <= set(dir(gpuarray))


def test_what_a_lazy_module_installed_is_installed_by_import_alone():
    # The IPC handle's array factory was set by _hostdev at import; with
    # _hostdev lazy, a spawned child's open_ipc_array failed ("array layer
    # is not imported") until the package set it itself.
    code = """
import sys
import gpuarray
from gpuarray.memory import _ipc
print(_ipc._array_factory is gpuarray.DeviceNDArray, "gpuarray._hostdev" in sys.modules)
"""
    env = dict(os.environ, GPUARRAY_BACKEND="sim")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False"]


def test_an_unknown_name_is_an_attribute_error_naming_it():
    import gpuarray

    with pytest.raises(AttributeError, match="'no_such_name'"):
        gpuarray.no_such_name  # noqa: B018
