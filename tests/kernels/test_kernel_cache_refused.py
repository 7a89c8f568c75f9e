"""A cached kernel image the driver refuses is a miss: dropped and built again, once (issue 35).

An entry whose header and digest verify can still hold an image the driver
refuses (``CUDA_ERROR_INVALID_IMAGE``, ``NO_BINARY_FOR_GPU``,
``INVALID_PTX``, ``UNSUPPORTED_PTX_VERSION``): a driver or toolchain change
the key does not see, a damaged compiler output.  Before: every launch of
that kernel failed with the driver's error, for good.  Now the loader drops
the entry (memory and disk), builds the image again and loads that; when the
driver refuses the new image too, its error goes up.  On the ``sim`` backend
and on the cuda backend over the stand-in driver (the simulator checks
images as a driver does).
"""

from __future__ import annotations

import pytest

import gpuarray
from gpuarray._driver import get_backend
from gpuarray._kernels import _cache, _loader, _nvrtc, _specs, _toolchain
from gpuarray.errors import CudaError
from tests.support import backend_is_sim, simulated

SPEC = _specs.copy_spec("f4", "f8", 2, "i32", "g")

pytestmark = [
    pytest.mark.skipif(not simulated(), reason="the simulator checks the images (sim, or the stand-in)"),
    pytest.mark.skipif(_toolchain.current() is None, reason="needs NVRTC to build kernel images"),
]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """A private disk cache, empty memory caches, compilation on the simulator."""
    d = tmp_path / "kcache"
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE_DIR", str(d))
    monkeypatch.delenv("GPUARRAY_KERNEL_CACHE", raising=False)
    monkeypatch.delenv("GPUARRAY_SIM_COMPILE", raising=False)
    saved = dict(_cache._memory)
    _cache._memory.clear()
    _loader.forget_loaded()
    yield d
    _cache._memory.clear()
    _cache._memory.update(saved)
    _loader.forget_loaded()


@pytest.fixture
def compiles(monkeypatch):
    """The number of NVRTC compilations so far (a list of one counter)."""
    count = [0]
    real = _nvrtc.compile_program

    def counting(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(_nvrtc, "compile_program", counting)
    return count


def _load():
    b = get_backend()
    with gpuarray.get_device().activate():
        return _loader.get_kernel(SPEC, b)


def _image_entry(d):
    """``(key, kind)`` of the one kernel image in the disk cache (other entries: host builds)."""
    kinds = {v: k for k, v in _cache._KINDS.items()}
    found = []
    for p in d.iterdir():
        if p.suffix == ".gakc":
            kind = kinds[_cache._HEADER.unpack(p.read_bytes()[:_cache._HEADER.size])[2]]
            if kind in ("cubin", "ptx"):
                found.append((p.name[:-len(".gakc")], kind))
    (entry,) = found
    return entry


def test_a_verified_entry_whose_image_the_driver_refuses_is_rebuilt(cache_dir, compiles):
    _load()
    assert compiles[0] == 1
    key, kind = _image_entry(cache_dir)
    _cache.write_entry(key, kind, b"not an image the driver loads\0")  # header and digest verify
    assert _cache.read_entry(key, kind) == b"not an image the driver loads\0"
    _cache._memory.clear()  # a new process: the disk entry is read
    _loader.forget_loaded()
    func, _info = _load()  # before: CudaError (INVALID_IMAGE / INVALID_PTX), for good
    assert func
    assert compiles[0] == 2  # built again, once
    good = _cache.read_entry(key, kind)
    assert good is not None and good != b"not an image the driver loads\0"  # replaced on disk


@pytest.mark.skipif(not backend_is_sim(), reason="injects faults into the sim backend")
@pytest.mark.parametrize("code", [200, 209, 218, 222])
def test_a_rebuilt_image_the_driver_refuses_too_raises_the_drivers_error(cache_dir, compiles, code):
    _load()
    _loader.forget_loaded()
    b = get_backend().backend  # the simulator, behind the capture checkpoint
    b.inject_fault("module", nth=1, code=code)
    b.inject_fault("module", nth=2, code=code)
    with pytest.raises(CudaError) as e:
        _load()
    assert e.value.code == code
    assert compiles[0] == 2  # the first build, and one rebuild: no loop
    _loader.forget_loaded()
    assert _load()[0]  # nothing refused now: loads (the rebuilt image)
    assert compiles[0] == 2


@pytest.mark.skipif(not backend_is_sim(), reason="injects faults into the sim backend")
def test_another_load_error_is_not_a_miss(cache_dir, compiles):
    _load()
    _loader.forget_loaded()
    get_backend().backend.inject_fault("module", nth=1, code=2)  # out of memory: the image is fine
    with pytest.raises(CudaError) as e:
        _load()
    assert e.value.code == 2
    assert compiles[0] == 1  # nothing rebuilt
