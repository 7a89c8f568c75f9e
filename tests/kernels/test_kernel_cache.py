"""The compiled-kernel cache: memory and disk, keys, corruption, threads, atomicity."""

from __future__ import annotations

import os
import threading
import time

import pytest

from gpuarray._kernels import _cache, _nvrtc, _source, _specs
from gpuarray.errors import NvrtcError

TARGET = _nvrtc.Target("cubin", "sm_90")
SPEC = _specs.copy_spec("f4", "f8", 2, "i32", "g")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """A private disk cache and an empty memory cache for every test."""
    d = tmp_path / "kcache"
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE_DIR", str(d))
    monkeypatch.delenv("GPUARRAY_KERNEL_CACHE", raising=False)
    saved = dict(_cache._memory)
    _cache._memory.clear()
    yield d
    _cache._memory.clear()
    _cache._memory.update(saved)


class Counter:
    """A fake NVRTC: returns a deterministic image, counts calls, optionally slow or failing."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.calls = 0
        self.delay = delay
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, source, headers, options, kind, name="x") -> bytes:
        with self.lock:
            self.calls += 1
        time.sleep(self.delay)
        if self.fail:
            raise NvrtcError("nvrtcCompileProgram failed: NVRTC_ERROR_COMPILATION", "log", options,
                             source)
        return b"\x7fELF-fake-" + " ".join(options).encode() + b"-" + str(len(source)).encode()


def _get(compile_fn, source=None, target=TARGET):
    source = source if source is not None else _specs.program_source([SPEC])
    return _cache.get_image(source, _source.kernel_headers(), target, compile_fn=compile_fn)


def _files(d):
    return sorted(p for p in d.iterdir()) if d.exists() else []


def test_real_compile_miss_then_memory_hit_then_disk_hit(cache_dir, monkeypatch):
    calls = []
    real = _nvrtc.compile_program

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(_nvrtc, "compile_program", counting)
    first = _get(None)
    assert len(calls) == 1 and first[:4] == b"\x7fELF"
    assert _get(None) == first and len(calls) == 1          # memory hit
    _cache._memory.clear()
    assert _get(None) == first and len(calls) == 1          # disk hit
    info = _cache.cache_info()
    assert info["path"] == str(cache_dir) and info["entries"] == 1
    assert info["bytes"] > len(first) and info["enabled"] is True


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty", "header-only"])
def test_corrupt_entry_is_a_miss_and_is_rewritten(cache_dir, damage):
    c = Counter()
    image = _get(c)
    (path,) = _files(cache_dir)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:-3])
    elif damage == "flip":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(data[:_cache._HEADER.size])
    _cache._memory.clear()
    assert _get(c) == image and c.calls == 2
    assert path.read_bytes() == data                           # rewritten whole
    _cache._memory.clear()
    assert _get(c) == image and c.calls == 2


def test_entry_under_another_key_is_a_miss(cache_dir):
    c = Counter()
    _get(c, source="// a\n")
    _get(c, source="// b\n")
    a, b = _files(cache_dir)
    b.write_bytes(a.read_bytes())  # a valid file, but for the other key
    _cache._memory.clear()
    _get(c, source="// a\n")
    _get(c, source="// b\n")
    assert c.calls == 3


def test_disabled_disk_cache_writes_and_reads_nothing(cache_dir, monkeypatch):
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE", "0")
    c = Counter()
    _get(c)
    assert not cache_dir.exists()
    _cache._memory.clear()
    _get(c)
    assert c.calls == 2 and not cache_dir.exists()
    assert _cache.cache_info()["enabled"] is False


def test_key_changes_with_every_input():
    hd = _source.kernel_headers()
    src = _specs.program_source([SPEC])
    opts = _nvrtc.compile_options(TARGET)
    base = _cache.cache_key(src, hd, opts, TARGET, (13, 0))
    variants = [
        _cache.cache_key(src + " ", hd, opts, TARGET, (13, 0)),
        _cache.cache_key(src, {**hd, "ga_copy.cuh": hd["ga_copy.cuh"] + "\n"}, opts, TARGET, (13, 0)),
        _cache.cache_key(src, hd, opts + ["-lineinfo"], TARGET, (13, 0)),
        _cache.cache_key(src, hd, opts, _nvrtc.Target("cubin", "sm_80"), (13, 0)),
        _cache.cache_key(src, hd, opts, _nvrtc.Target("ptx", "sm_90"), (13, 0)),
        _cache.cache_key(src, hd, opts, TARGET, (13, 1)),
    ]
    assert len({base, *variants}) == len(variants) + 1
    assert _cache.cache_key(src, dict(reversed(list(hd.items()))), opts, TARGET, (13, 0)) == base


def test_options_and_architecture_select_different_entries(cache_dir):
    c = Counter()
    a = _get(c, target=_nvrtc.Target("cubin", "sm_90"))
    b = _get(c, target=_nvrtc.Target("cubin", "sm_80"))
    fast = _cache.get_image(_specs.program_source([SPEC]), _source.kernel_headers(), TARGET,
                            compile_fn=c, fast=True)
    assert c.calls == 3 and len({a, b, fast}) == 3 and len(_files(cache_dir)) == 3


def test_concurrent_requests_compile_once():
    c = Counter(delay=0.3)
    barrier = threading.Barrier(8)
    results, errors = [], []

    def work():
        barrier.wait()
        try:
            results.append(_get(c))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and c.calls == 1 and len(set(results)) == 1 and len(results) == 8


def test_failed_compile_reaches_every_waiter_and_is_not_cached(cache_dir):
    c = Counter(delay=0.2, fail=True)
    barrier = threading.Barrier(4)
    errors = []

    def work():
        barrier.wait()
        try:
            _get(c)
        except NvrtcError as e:
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 4 and c.calls == 1 and _files(cache_dir) == []
    c.fail = False
    _get(c)
    assert c.calls == 2


def test_writes_are_atomic(cache_dir, monkeypatch):
    """The final name only ever appears complete: written aside, then os.replace'd."""
    c = Counter()
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        src, dst = str(src), str(dst)
        assert os.path.dirname(src) == os.path.dirname(dst)      # same folder: atomic rename
        assert not os.path.exists(dst)
        with open(src, "rb") as f:
            data = f.read()
        magic, version, kind, length, digest, key = _cache._HEADER.unpack_from(data)
        assert length == len(data) - _cache._HEADER.size         # complete before the rename
        seen.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    _get(c)
    assert len(seen) == 1 and [p.name for p in _files(cache_dir)] == [os.path.basename(seen[0])]


def test_a_failed_write_leaves_no_file(cache_dir, monkeypatch):
    c = Counter()

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    image = _get(c)                       # the compile result is still returned
    assert image and _files(cache_dir) == []


def test_unwritable_cache_folder_is_not_an_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE_DIR", str(blocker / "sub"))
    c = Counter()
    assert _get(c)
    assert _cache.cache_info()["entries"] == 0


def test_clear_cache_removes_only_cache_files(cache_dir):
    c = Counter()
    _get(c, source="// 1\n")
    _get(c, source="// 2\n")
    (cache_dir / "README").write_text("keep me")
    (cache_dir / ".abc-123.tmp").write_bytes(b"partial")
    assert _cache.cache_info()["entries"] == 2
    assert _cache.clear_cache() == 3
    assert [p.name for p in _files(cache_dir)] == ["README"]
    assert _cache.cache_info()["memory_entries"] == 0
    _get(c, source="// 1\n")
    assert c.calls == 3


def test_default_location_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("GPUARRAY_KERNEL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _cache.cache_dir() == tmp_path / "xdg" / "gpuarray" / "kernels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _cache.cache_dir() == tmp_path / "home" / ".cache" / "gpuarray" / "kernels"
