"""The PTX executor's build cache: a warm load compiles nothing; a corrupt entry is a miss.

The translated tier's cache (``GPUARRAY_SIM_PTX_TIER=compiled``); the
interpreter's handlers are ``test_ptx_tiers.py``'s.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from gpuarray_sim.ptx import _build

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from sim.tests.ptx.support import backend, download, fixture, launch, u64, upload


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GPUARRAY_KERNEL_CACHE", raising=False)
    monkeypatch.setenv("GPUARRAY_SIM_PTX_TIER", "compiled")  # the translated build's cache
    _build._programs.clear()
    yield tmp_path
    _build._programs.clear()


def _saxpy(text: str) -> np.ndarray:
    b = backend()
    x, y = np.arange(64, dtype=np.float32), np.ones(64, np.float32)
    dx, dy = upload(b, x), upload(b, y)
    launch(b, text, "saxpy", [ctypes.c_float(2.0), u64(dx), u64(dy), ctypes.c_int32(64)],
           block=(64, 1, 1))
    return download(b, dy, 64, np.float32)


def test_a_warm_load_compiles_nothing_and_a_corrupt_entry_is_a_miss(cache):
    text = fixture("saxpy")
    want = 2 * np.arange(64, dtype=np.float32) + 1
    assert np.array_equal(_saxpy(text), want)
    assert _build.load(text).built_now  # compiled here, written to the cache
    key = _build.load(text).build_key
    assert key is not None
    entries = [p for p in cache.rglob("*") if p.is_file() and key in p.name]
    assert len(entries) == 1
    _build._programs.clear()  # as a new process: parse again, the build from disk
    assert np.array_equal(_saxpy(text), want)
    assert not _build.load(text).built_now
    data = bytearray(entries[0].read_bytes())
    data[len(data) // 2] ^= 0xFF  # damage the library inside the entry
    entries[0].write_bytes(bytes(data))
    _build._programs.clear()
    assert np.array_equal(_saxpy(text), want)
    assert _build.load(text).built_now  # the digest did not match: rebuilt, not loaded


def test_the_key_names_the_code_and_the_toolchain(cache):
    a = _build.cache_key("c++-1", "cc-1")
    assert a != _build.cache_key("c++-2", "cc-1")
    assert a != _build.cache_key("c++-1", "cc-2")


def _renamed(text: str, old: str, new: str) -> str:
    return text.replace(old, new)


def test_the_same_kernel_under_other_names_hits_the_build_of_another_process(cache):
    # numba-cuda names a kernel after its Python function, with the address of a
    # dispatcher and a per-process counter in the name: another process compiling the
    # same kernel hands over PTX that differs in names only, and must not compile again
    text = fixture("saxpy")
    want = 2 * np.arange(64, dtype=np.float32) + 1
    assert np.array_equal(_saxpy(text), want)
    assert _build.load(text).built_now
    _build._programs.clear()  # as a new process
    other = _renamed(text, "saxpy", "saxpyB3v14B92cw51cXTLSUwv_0x7f601ff87f60")
    b = backend()
    x, y = np.arange(64, dtype=np.float32), np.ones(64, np.float32)
    dx, dy = upload(b, x), upload(b, y)
    launch(b, other, "saxpyB3v14B92cw51cXTLSUwv_0x7f601ff87f60",
           [ctypes.c_float(2.0), u64(dx), u64(dy), ctypes.c_int32(64)], block=(64, 1, 1))
    assert np.array_equal(download(b, dy, 64, np.float32), want)
    assert not _build.load(other).built_now
    _build.load(text).build()
    assert _build.load(other).build_key == _build.load(text).build_key
    edited = text.replace("mad.lo.s32", "mad.hi.s32")  # another kernel: another build
    _build._programs.clear()
    _build.load(edited).build()
    assert _build.load(edited).built_now
