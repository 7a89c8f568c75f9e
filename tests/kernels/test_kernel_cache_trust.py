"""The disk cache against hostile contents: odd entries and untrusted folders.

A cache entry that is a symlink to a FIFO, a FIFO, or a symlink to
``/dev/zero`` must be a miss -- never a hang, never an unbounded read.  Those
cases run in a subprocess with a time limit and an address-space limit, so a
regression fails the test instead of hanging the suite or eating the memory.
The folder itself is created ``0o700`` and refused (with a warning, compiling
without the disk cache) when it is not the user's or others may write to it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuarray._kernels import _cache, _nvrtc, _source, _specs

ROOT = Path(__file__).resolve().parents[2]
TARGET = _nvrtc.Target("cubin", "sm_90")
SOURCE = _specs.program_source([_specs.copy_spec("f4", "f8", 1, "i32", "g")])


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "kcache"
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE_DIR", str(d))
    monkeypatch.delenv("GPUARRAY_KERNEL_CACHE", raising=False)
    saved = dict(_cache._memory)
    _cache._memory.clear()
    getattr(_cache, "_warned", set()).clear()   # (absent before the trust check)
    yield d
    _cache._memory.clear()
    _cache._memory.update(saved)
    getattr(_cache, "_warned", set()).clear()   # (absent before the trust check)


def fake_compile(source, headers, options, kind, name="x") -> bytes:
    return b"\x7fELF-fake-" + " ".join(options).encode()


def _get():
    return _cache.get_image(SOURCE, _source.kernel_headers(), TARGET, compile_fn=fake_compile)


# ------------------------------------------------------------ odd entries
_ODD_ENTRY = textwrap.dedent("""
    import os, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    from gpuarray._kernels import _cache, _nvrtc, _source, _specs
    calls = []
    def compile_fn(source, headers, options, kind, name="x"):
        calls.append(1)
        return b"\\x7fELF-fake-" + " ".join(options).encode()
    src = _specs.program_source([_specs.copy_spec("f4", "f8", 1, "i32", "g")])
    get = lambda: _cache.get_image(src, _source.kernel_headers(),
                                   _nvrtc.Target("cubin", "sm_90"), compile_fn=compile_fn)
    image = get()
    d = _cache.cache_dir()
    (entry,) = [n for n in os.listdir(d) if n.endswith(".gakc")]
    path = os.path.join(d, entry)
    os.unlink(path)
    how, where = sys.argv[1], sys.argv[2]
    if how == "fifo":
        os.mkfifo(path)
    elif how == "symlink-fifo":
        os.mkfifo(where)
        os.symlink(where, path)
    else:
        os.symlink(where, path)
    _cache._memory.clear()
    assert get() == image and len(calls) == 2, calls   # a miss: compiled again
    assert os.path.isfile(path) and not os.path.islink(path)   # replaced by a real entry
    _cache._memory.clear()
    assert get() == image and len(calls) == 2, calls   # and that one is a hit
    print("ok")
""")


@pytest.mark.parametrize("how", ["symlink-fifo", "fifo", "symlink-dev-zero"])
def test_odd_entry_is_a_miss_not_a_hang(tmp_path, cache_dir, how):
    where = str(tmp_path / "fifo") if how == "symlink-fifo" else "/dev/zero"
    env = dict(os.environ, GPUARRAY_KERNEL_CACHE_DIR=str(cache_dir), OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                          if p))
    try:
        r = subprocess.run([sys.executable, "-c", _ODD_ENTRY, how, where], env=env,
                           capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading a cache entry that is a {how} hung")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr[-3000:]


def test_entry_longer_than_its_header_says_is_a_miss(cache_dir):
    image = _get()
    (path,) = [p for p in cache_dir.iterdir() if p.suffix == ".gakc"]
    path.write_bytes(path.read_bytes() + b"trailing")
    _cache._memory.clear()
    calls = []

    def counting(*a, **k):
        calls.append(1)
        return fake_compile(*a, **k)

    assert _cache.get_image(SOURCE, _source.kernel_headers(), TARGET, compile_fn=counting) == image
    assert calls == [1]


def test_oversized_entry_is_not_read(cache_dir, monkeypatch):
    image = _get()
    (path,) = [p for p in cache_dir.iterdir() if p.suffix == ".gakc"]
    monkeypatch.setattr(_cache, "MAX_ENTRY_BYTES", len(image) - 1)
    reads = []
    real_read = os.read

    def spy(fd, n):
        reads.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", spy)
    _cache._memory.clear()
    assert _cache.read_entry(path.stem, "cubin") is None and reads == []


# ---------------------------------------------------------- folder trust
def test_new_folder_is_private(cache_dir):
    old = os.umask(0o022)
    try:
        _get()
    finally:
        os.umask(old)
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777])
def test_folder_writable_by_others_is_refused(cache_dir, mode):
    cache_dir.mkdir()
    cache_dir.chmod(mode)
    with pytest.warns(RuntimeWarning, match="may write to it") as rec:
        image = _get()
    assert str(cache_dir) in str(rec[0].message)
    assert image.startswith(b"\x7fELF-fake")
    assert list(cache_dir.iterdir()) == []                     # nothing written there


def test_planted_entry_in_untrusted_folder_is_not_loaded(cache_dir):
    good = _get()
    (path,) = [p for p in cache_dir.iterdir() if p.suffix == ".gakc"]
    cache_dir.chmod(0o777)
    # Someone else rewrites the (valid-looking) entry with their own code.
    planted = good.replace(b"fake", b"evil")
    import hashlib

    magic, version, kind, length, digest, key = _cache._HEADER.unpack_from(path.read_bytes())
    path.write_bytes(_cache._HEADER.pack(magic, version, kind, len(planted),
                                         hashlib.sha256(planted).digest(), key) + planted)
    _cache._memory.clear()
    with pytest.warns(RuntimeWarning, match="kernel cache folder"):
        assert _get() == good


def test_folder_of_another_user_is_refused(cache_dir, monkeypatch):
    cache_dir.mkdir(mode=0o700)
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1)
    with pytest.warns(RuntimeWarning, match=rf"belongs to uid {me}, not to this user"):
        _get()
    assert list(cache_dir.iterdir()) == []


def test_refusal_warns_once_per_folder(cache_dir):
    cache_dir.mkdir()
    cache_dir.chmod(0o777)
    with pytest.warns(RuntimeWarning) as rec:
        _get()
        _cache._memory.clear()
        _get()
    assert len(rec) == 1


def test_private_folder_is_used_without_warning(cache_dir):
    cache_dir.mkdir(mode=0o700)
    _get()                                     # filterwarnings=error: no warning
    assert len(list(cache_dir.iterdir())) == 1
