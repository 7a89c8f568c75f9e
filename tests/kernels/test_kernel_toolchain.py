"""NVRTC as the kernels layer sees it: loaded only to compile, checked against the driver.

- A warm disk cache serves the first kernel operation of a fresh process
  without loading NVRTC (``cuda.bindings.nvrtc`` is never imported there).
- The NVRTC that would compile is identified from file metadata
  (:func:`_nvrtc_id.fingerprint`); its version and architectures are
  remembered in the cache (:mod:`_toolchain`), and wrong remembered facts
  are corrected at the next compile.
- An NVRTC whose major version is above the driver's CUDA version is refused
  with :class:`~gpuarray.errors.NvrtcVersionError` naming the extra to install
  (simulated driver versions here).
- NVRTC's output buffers are fresh writable buffers.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gpuarray
from gpuarray._kernels import _cache, _nvrtc, _nvrtc_id, _toolchain
from gpuarray.errors import NvrtcError, NvrtcVersionError

ROOT = Path(__file__).resolve().parents[2]


def _nvrtc_or_skip() -> _nvrtc.Toolchain:
    try:
        return _nvrtc.loaded_toolchain()
    except (NvrtcError, OSError, RuntimeError) as e:
        pytest.skip(f"NVRTC is not installed here ({e})")


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    d = tmp_path / "kcache"
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE_DIR", str(d))
    monkeypatch.delenv("GPUARRAY_KERNEL_CACHE", raising=False)
    monkeypatch.setenv("GPUARRAY_SIM_COMPILE", "1")
    saved = dict(_cache._memory)
    _cache._memory.clear()
    _toolchain.forget()
    yield d
    _toolchain.forget()
    _cache._memory.clear()
    _cache._memory.update(saved)


# ------------------------------------------------ a warm cache loads no NVRTC
_FIRST_OP = textwrap.dedent("""
    import json, sys
    import numpy as np
    import gpuarray
    from gpuarray import _driver
    if sys.argv[1] != "-":
        _driver.get_backend().driver_version = lambda: int(sys.argv[1])
    a = gpuarray.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    try:
        b = a.T.astype(np.int16)
        out = {"values": b.copy_to_host().tolist()}
    except gpuarray.errors.NvrtcVersionError as e:
        out = {"error": str(e)}
    out["nvrtc_loaded"] = "cuda.bindings.nvrtc" in sys.modules
    print(json.dumps(out))
""")


def _first_op(cache: Path, driver: str = "-") -> dict:
    env = dict(os.environ, GPUARRAY_BACKEND="sim", GPUARRAY_KERNEL_CACHE_DIR=str(cache),
               GPUARRAY_SIM_COMPILE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                          if p))
    env.pop("GPUARRAY_KERNEL_CACHE", None)
    r = subprocess.run([sys.executable, "-c", _FIRST_OP, driver], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_warm_cache_serves_first_operation_without_loading_nvrtc(tmp_path):
    _nvrtc_or_skip()
    expected = np.arange(6, dtype=np.float32).reshape(2, 3).T.astype(np.int16).tolist()
    cold = _first_op(tmp_path / "c")
    assert cold == {"values": expected, "nvrtc_loaded": True}        # compiled: loaded
    warm = _first_op(tmp_path / "c")
    assert warm == {"values": expected, "nvrtc_loaded": False}       # cache hit: not loaded


def test_driver_check_needs_no_nvrtc_on_a_warm_cache(tmp_path):
    tc = _nvrtc_or_skip()
    _first_op(tmp_path / "c")                                        # fill the cache
    older = f"{tc.version[0] - 1}080"
    out = _first_op(tmp_path / "c", driver=older)
    assert out["nvrtc_loaded"] is False
    assert f'pip install "gpuarray[cu{tc.version[0] - 1}]"' in out["error"]


# ------------------------------------------------------------ the driver check
def test_newer_nvrtc_than_the_driver_is_refused(sim, private_cache, monkeypatch):
    tc = _nvrtc_or_skip()
    major = tc.version[0] - 1
    monkeypatch.setattr(sim, "driver_version", lambda: major * 1000 + 80)
    a = gpuarray.to_device(np.arange(4, dtype=np.float32))
    with pytest.raises(NvrtcVersionError) as ei:
        a.astype(np.float16)
    e = ei.value
    assert isinstance(e, NvrtcError)
    assert e.nvrtc_version == tc.version and e.driver_version == major * 1000 + 80
    assert f'pip install "gpuarray[cu{major}]"' in str(e)
    assert f"NVRTC {tc.version[0]}.{tc.version[1]}" in str(e)


def test_driver_as_new_as_nvrtc_is_accepted(sim, private_cache, monkeypatch):
    tc = _nvrtc_or_skip()
    monkeypatch.setattr(sim, "driver_version", lambda: tc.version[0] * 1000)
    a = gpuarray.to_device(np.arange(4, dtype=np.float32))
    assert a.astype(np.float16).copy_to_host().tolist() == [0, 1, 2, 3]


def test_simulator_without_compilation_does_not_check(sim, private_cache, monkeypatch):
    monkeypatch.setenv("GPUARRAY_SIM_COMPILE", "0")
    monkeypatch.setattr(sim, "driver_version", lambda: 11080)
    a = gpuarray.to_device(np.arange(4, dtype=np.float32))
    assert a.astype(np.float16).copy_to_host().tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("nvrtc, driver, extra", [
    ((13, 0), 12080, "cu12"), ((13, 2), 12000, "cu12"), ((14, 0), 13010, "cu13"),
    ((12, 9), 11080, None)])
def test_check_driver_refuses_newer_majors(nvrtc, driver, extra):
    with pytest.raises(NvrtcVersionError) as ei:
        _toolchain.check_driver(nvrtc, driver)
    assert ei.value.extra == extra
    text = str(ei.value)
    assert str(driver) in text
    if extra:
        assert f'pip install "gpuarray[{extra}]"' in text
    else:
        assert "update the driver" in text
    again = pickle.loads(pickle.dumps(ei.value))
    assert type(again) is NvrtcVersionError and str(again) == text


@pytest.mark.parametrize("nvrtc, driver", [((13, 0), 13000), ((12, 8), 13000), ((12, 4), 12020)])
def test_check_driver_accepts_same_or_older_majors(nvrtc, driver):
    _toolchain.check_driver(nvrtc, driver)


# ---------------------------------------------------- fingerprint and facts
def test_fingerprint_follows_the_library_files(tmp_path, monkeypatch):
    site = tmp_path / "site"
    lib = site / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    monkeypatch.syspath_prepend(str(site))
    _nvrtc_id.fingerprint.cache_clear()
    before = _nvrtc_id.fingerprint()
    so = lib / "libnvrtc.so.13"
    so.write_bytes(b"\x7fELF one build")
    _nvrtc_id.fingerprint.cache_clear()
    with_lib = _nvrtc_id.fingerprint()
    os.utime(so, ns=(1, 1))
    _nvrtc_id.fingerprint.cache_clear()
    touched = _nvrtc_id.fingerprint()
    so.write_bytes(b"\x7fELF another build, longer")
    os.utime(so, ns=(1, 1))
    _nvrtc_id.fingerprint.cache_clear()
    rebuilt = _nvrtc_id.fingerprint()
    monkeypatch.setenv("PATH", "/nowhere")       # no NVRTC file added: same identity
    _nvrtc_id.fingerprint.cache_clear()
    assert _nvrtc_id.fingerprint() == rebuilt
    assert len({before, with_lib, touched, rebuilt}) == 4
    _nvrtc_id.fingerprint.cache_clear()


def test_fingerprint_sees_ld_library_path(tmp_path, monkeypatch):
    _nvrtc_id.fingerprint.cache_clear()
    before = _nvrtc_id.fingerprint()
    (tmp_path / "libnvrtc.so.12").write_bytes(b"\x7fELF")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    _nvrtc_id.fingerprint.cache_clear()
    assert _nvrtc_id.fingerprint() != before
    _nvrtc_id.fingerprint.cache_clear()


def test_fingerprint_follows_files_listed_by_ld_so_cache(tmp_path, monkeypatch):
    lib = tmp_path / "cuda" / "lib64" / "libnvrtc.so.12"
    lib.parent.mkdir(parents=True)
    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(b"glibc-ld.so.cache1.1\0libnvrtc.so.12\0" + str(lib).encode() + b"\0")
    monkeypatch.setattr(_nvrtc_id, "_LD_SO_CACHE", str(cache))
    assert _nvrtc_id._ld_cache_paths() == [str(lib)]  # not the cache file: ldconfig rewrites it
    prints = []
    for content in (None, b"\x7fELF 12.4", b"\x7fELF 12.6 build"):
        if content is not None:
            lib.write_bytes(content)
        _nvrtc_id.fingerprint.cache_clear()
        prints.append(_nvrtc_id.fingerprint())
    _nvrtc_id.fingerprint.cache_clear()
    assert len(set(prints)) == 3


def test_facts_are_remembered_and_read_back(private_cache, monkeypatch):
    tc = _nvrtc_or_skip()
    assert _toolchain.current() == tc
    assert (private_cache / (_toolchain.facts_key(tc.ident) + ".gakf")).is_file()
    _toolchain.forget()
    monkeypatch.setattr(_nvrtc, "loaded_toolchain",
                        lambda: pytest.fail("NVRTC asked although its facts are on disk"))
    assert _toolchain.current() == tc


@pytest.mark.parametrize("payload", [b"", b"13\n90\n", b"x.y\n90\n", b"13.0\n\n", b"13.0\n90\nz"])
def test_unreadable_facts_are_asked_again(private_cache, payload):
    tc = _nvrtc_or_skip()
    _cache.write_entry(_toolchain.facts_key(tc.ident), "facts", payload)
    assert _toolchain.current() == tc


def test_wrong_facts_are_corrected_at_the_next_compile(private_cache, monkeypatch):
    tc = _nvrtc_or_skip()
    wrong = _nvrtc.Toolchain((tc.version[0], tc.version[1] + 1), tc.archs, tc.ident)
    _cache.write_entry(_toolchain.facts_key(tc.ident), "facts", _toolchain._encode(wrong))
    assert _toolchain.current() == wrong
    from gpuarray._kernels import _loader, _specs

    image = _loader.build_image(_specs.copy_spec("f4", "u1", 1, "i32", "g"), (9, 0), fast=True)
    assert image[:4] == b"\x7fELF"
    assert _toolchain.current() == tc
    _toolchain.forget()
    assert _toolchain.current() == tc                   # the disk entry was rewritten


def test_key_depends_on_the_library_identity():
    t = _nvrtc.Target("cubin", "sm_90")
    a = _cache.cache_key("src", {}, ["-x"], t, (13, 0), "a" * 64)
    b = _cache.cache_key("src", {}, ["-x"], t, (13, 0), "b" * 64)
    assert a != b


# ------------------------------------------------------------ output buffers
class _FakeNvrtc:
    """Enough of cuda.bindings.nvrtc for compile_program, writing through the buffer it gets."""

    def __init__(self, out: bytes) -> None:
        self.out = out
        self.buffers: list = []

    def nvrtcCreateProgram(self, *args):
        return (0, "prog")

    def nvrtcCompileProgram(self, prog, n, opts):
        return (0,)

    def _size(self, prog):
        return (0, len(self.out))

    nvrtcGetPTXSize = nvrtcGetCUBINSize = _size

    def _get(self, prog, buf):
        self.buffers.append(buf)
        memoryview(buf)[:] = self.out        # what NVRTC does to the memory it is given
        return (0,)

    nvrtcGetPTX = nvrtcGetCUBIN = _get

    def nvrtcDestroyProgram(self, prog):
        return (0,)


@pytest.mark.parametrize("kind, out", [("ptx", b"\0"), ("cubin", b"\x7f"), ("ptx", b".v\0")])
def test_output_buffers_are_fresh_and_writable(monkeypatch, kind, out):
    fake = _FakeNvrtc(out)
    monkeypatch.setattr(_nvrtc, "_nvrtc", lambda: fake)
    got = _nvrtc.compile_program("x", {}, ["-arch=sm_90"], kind)
    assert got == (out if kind == "cubin" or out.endswith(b"\0") else out + b"\0")
    (buf,) = fake.buffers
    assert not isinstance(buf, bytes) and not memoryview(buf).readonly
    assert list(b" " * 1) == [32]            # the interpreter's one-byte b" " is intact


def test_missing_nvrtc(sim, private_cache, monkeypatch):
    def gone():
        raise NvrtcError("NVRTC is not available (simulated)")

    monkeypatch.setattr(_nvrtc, "_nvrtc", gone)
    _nvrtc.nvrtc_version.cache_clear()
    _nvrtc.supported_archs.cache_clear()
    try:
        assert _toolchain.current() is None
        with pytest.raises(NvrtcError, match="simulated"):
            _toolchain.require()
        # The simulator then runs the reference kernels without compiling.
        a = gpuarray.to_device(np.arange(4, dtype=np.float32))
        assert a.astype(np.int8).copy_to_host().tolist() == [0, 1, 2, 3]
    finally:
        _nvrtc.nvrtc_version.cache_clear()
        _nvrtc.supported_archs.cache_clear()


def test_fingerprint_does_not_depend_on_what_is_already_imported_or_loaded():
    # Importing cuda.bindings.nvrtc maps its own modules and loading NVRTC
    # maps libnvrtc: neither may change the key (the disk cache would split).
    code = ("from gpuarray._kernels import _nvrtc_id as n, _nvrtc\n"
            "a = n.fingerprint(); n.fingerprint.cache_clear()\n"
            "import cuda.bindings.nvrtc\n"
            "b = n.fingerprint(); n.fingerprint.cache_clear()\n"
            "_nvrtc.nvrtc_version()\n"
            "print(a == b == n.fingerprint())\n")
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, GPUARRAY_BACKEND="sim"))
    if "NVRTC is not available" in r.stderr:
        pytest.skip("NVRTC is not installed here")
    assert r.stdout.strip() == "True", r.stdout + r.stderr
