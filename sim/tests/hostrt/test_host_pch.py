"""The precompiled runtime header of host builds (``kernels/_host.py`` ``_precompiled``).

Every PTX unit the simulator compiles (a translated kernel, a batch of the
interpreter's handlers) starts with the PTX runtime's headers, ~1,600 lines
whose parsing is most of a small unit's compile; they are compiled once
into a precompiled header in the kernel cache's ``pch`` folder and each
unit includes it.  These tests hold that it is made on a fresh machine (no
cache folder yet: the first build of a process comes before any cache
write), used by the builds, and that a unit built without it is the same
program.
"""

from __future__ import annotations

import ctypes
import os
import stat
import subprocess

import pytest
from gpuarray_sim.kernels import _host

pytestmark = pytest.mark.skipif(_host.compiler() is None, reason="no C++ compiler for the host build")

PREFIX = "#pragma once\nstatic inline int ga_test_twice(int x) { return 2 * x; }\n"
UNIT = 'extern "C" __attribute__((visibility("default"))) int ga_test_f(int x) ' \
       "{ return ga_test_twice(x) + 1; }\n"


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A kernel cache folder that does not exist yet, and no remembered headers."""
    d = tmp_path / "not-made-yet" / "kernels"
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE_DIR", str(d))
    monkeypatch.delenv("GPUARRAY_KERNEL_CACHE", raising=False)
    monkeypatch.setattr(_host, "_pch_done", {})
    return d


def test_the_first_build_on_a_fresh_machine_makes_the_precompiled_header(fresh_cache):
    cc = _host.compiler()
    header = _host._precompiled(cc, PREFIX)
    assert header is not None, "no precompiled header where the cache folder did not exist yet"
    assert os.path.isfile(header) and os.path.isfile(header + ".gch")
    assert os.path.dirname(header) == str(fresh_cache / "pch")
    assert stat.S_IMODE(os.stat(fresh_cache).st_mode) == 0o700


def test_a_build_with_a_prefix_includes_the_precompiled_header(fresh_cache, monkeypatch):
    seen: list[list[str]] = []
    real = subprocess.run

    def run(cmd, *a, **k):
        seen.append(list(cmd))
        return real(cmd, *a, **k)

    monkeypatch.setattr(_host.subprocess, "run", run)
    lib = _host.load_library(_host.build_library(_host.compiler(), UNIT, "a test unit",
                                                 prefix=PREFIX))
    assert lib.ga_test_f(20) == 41
    units = [c for c in seen if "c++-header" not in c]
    assert len(units) == 1 and "-include" in units[0], units
    assert units[0][units[0].index("-include") + 1].startswith(str(fresh_cache / "pch"))


def test_without_the_cache_the_prefix_is_compiled_as_text(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE", "0")
    monkeypatch.setattr(_host, "_pch_done", {})
    lib = _host.load_library(_host.build_library(_host.compiler(), UNIT, "a test unit",
                                                 prefix=PREFIX))
    f = lib.ga_test_f
    f.argtypes, f.restype = [ctypes.c_int], ctypes.c_int
    assert f(-4) == -7
