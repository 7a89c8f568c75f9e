"""The DLPack C exchange table under threads (issue 30, defect 1).

- Two threads asking ``dltensor_from_py_object_no_sync`` for an array not
  yet exported both prepare its ``DLTensor``; the first to finish keeps it on
  the array and the other gets the same one (before, the second overwrote the
  first and freed the capsule the first caller's borrowed ``shape`` and
  ``strides`` pointed into).
- ``current_work_stream`` updates its cache before it drops the old key, so
  Python code run by that drop (a ``__del__``) finds the cache consistent.
- Called from a thread that has no Python thread state (a C library's
  worker), ``current_work_stream`` and the allocator report a failure they
  cannot hand back as a Python exception through ``sys.unraisablehook``
  instead of losing it; ``SetError`` still gets the allocator's error.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import gpuarray
from gpuarray import _config
from gpuarray.interop import _dlpack_capsule as dl
from gpuarray.interop import _dlpack_table

if dl.CORE != "c":
    pytest.skip(f"the exchange table needs the C core; this process uses {dl.CORE_DESCRIPTION}",
                allow_module_level=True)

from gpuarray.interop import _dlpack_core  # noqa: E402
from gpuarray.interop._dlpack_protocol import DLPACK_MAX_VERSION  # noqa: E402
from tests.interop.test_dlpack_exchange import DLTensor, Table, _GetPointer  # noqa: E402


def _install(prepare=_dlpack_table._prepare, stream=_dlpack_table._stream, holder=_config,
             name="_config"):
    return _dlpack_core.exchange_install(gpuarray.DeviceNDArray, prepare, _dlpack_table._to_py,
                                         _dlpack_table._allocate, stream, DLPACK_MAX_VERSION[1],
                                         holder, name)


@pytest.fixture
def reinstall():
    yield _install
    _dlpack_table.install()


def _dims_address(cap) -> int:
    """Where the shape held by a prepared capsule lives (``Prepared``: DLTensor, flags, dims)."""
    return _GetPointer(cap, b"gpuarray.dltensor") + ctypes.sizeof(DLTensor) + 8


def test_two_threads_preparing_one_array_get_the_one_kept(reinstall):
    arr = gpuarray.to_device(np.arange(24.0).reshape(2, 3, 4))
    b_done = threading.Event()
    calls = []

    def prepare(a):
        calls.append(threading.current_thread().name)
        if threading.current_thread().name == "A":
            assert b_done.wait(60), "thread B never finished"  # a GIL switch mid-preparation
        return _dlpack_table._prepare(a)

    reinstall(prepare=prepare)
    table = Table()
    got = {}

    def ask(name):
        t = DLTensor()
        assert table.dltensor(id(arr), ctypes.byref(t)) == 0
        got[name] = (ctypes.addressof(t.shape.contents), tuple(t.shape[i] for i in range(3)))
        if name == "B":
            b_done.set()

    a = threading.Thread(target=ask, args=("A",), name="A")
    a.start()
    while not calls:  # A is inside its preparation
        threading.Event().wait(0.001)
    b = threading.Thread(target=ask, args=("B",), name="B")
    b.start()
    b.join()
    a.join()
    assert sorted(calls) == ["A", "B"]
    kept = _dims_address(arr._dlt)
    assert got["A"] == got["B"] == (kept, (2, 3, 4)), (got, kept)


_REENTRANT = """
import ctypes, types
import gpuarray
from gpuarray.interop import _dlpack_table
from tests.interop.test_dlpack_exchange import Table
from tests.interop.test_dlpack_exchange_threads import _install

calls = []
def stream(device_type, device_id):
    calls.append(device_id)
    return 0x1000 + len(calls)

inner = []
class Key:
    def __del__(self):  # runs while current_work_stream drops the old key
        inner.append(Table().stream(2, 0))

holder = types.SimpleNamespace(key=Key())
_install(stream=stream, holder=holder, name="key")
t = Table()
first = t.stream(2, 0)
holder.key = types.SimpleNamespace()  # a new configuration: the next call asks the hook
second = t.stream(2, 0)
print(first, second, inner, calls)
"""


def test_the_stream_cache_is_consistent_while_the_old_key_is_dropped():
    import os
    from pathlib import Path

    res = subprocess.run([sys.executable, "-c", _REENTRANT], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parents[2],
                         env={**os.environ, "GPUARRAY_BACKEND": "sim"})
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    # The hook answered twice; the __del__ run by the second call saw its answer cached.
    assert res.stdout.split() == ["4097", "4098", "[4098]", "[0,", "0]"], res.stdout


_HELPER = r"""
    #include <pthread.h>
    #include <stddef.h>
    #include <stdint.h>
    #include <string.h>

    typedef int (*stream_t)(int32_t, int32_t, void **);
    typedef void (*set_error_t)(void *, const char *, const char *);
    typedef int (*alloc_t)(void *, void **, void *, set_error_t);

    struct job { void *fn; int which; int rc; char kind[64]; char message[256]; };

    static void set_error(void *ctx, const char *kind, const char *message)
    {
        struct job *j = (struct job *)ctx;
        strncpy(j->kind, kind, sizeof j->kind - 1);
        strncpy(j->message, message, sizeof j->message - 1);
    }

    static void *worker(void *p)
    {
        struct job *j = (struct job *)p;
        void *out = NULL;
        if (j->which == 0)
            j->rc = ((stream_t)j->fn)(2, 0, NULL);             /* NULL out: an error */
        else if (j->which == 1)
            j->rc = ((alloc_t)j->fn)(NULL, (void **)&out, j, NULL);  /* no SetError */
        else
            j->rc = ((alloc_t)j->fn)(NULL, (void **)&out, j, set_error);
        return NULL;
    }

    /* Calls the table function `fn` from a new thread without Python. */
    int from_c_thread(void *fn, int which, char *kind, char *message)
    {
        struct job j;
        pthread_t t;
        memset(&j, 0, sizeof j);
        j.fn = fn;
        j.which = which;
        j.rc = 12345;
        if (pthread_create(&t, NULL, worker, &j) != 0)
            return -2;
        pthread_join(t, NULL);
        strcpy(kind, j.kind);
        strcpy(message, j.message);
        return j.rc;
    }
"""


@pytest.fixture(scope="module")
def helper(tmp_path_factory):
    cc = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if cc is None:
        pytest.skip("no C compiler (cc, gcc, clang) to build a thread without Python")
    d = tmp_path_factory.mktemp("exchange-threads")
    src = d / "helper.c"
    src.write_text(textwrap.dedent(_HELPER))
    res = subprocess.run([cc, "-O1", "-shared", "-fPIC", "-pthread", "-o", str(d / "helper.so"),
                          str(src)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lib = ctypes.CDLL(str(d / "helper.so"))  # releases the GIL while the thread runs
    fn = lib.from_c_thread
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p]
    return fn


def _from_c_thread(helper, fn, which, monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u))
    kind, message = ctypes.create_string_buffer(64), ctypes.create_string_buffer(256)
    rc = helper(fn, which, kind, message)
    return rc, kind.value.decode(), message.value.decode(), seen


def test_current_work_stream_from_a_thread_without_python_reports_its_error(helper,
                                                                            monkeypatch):
    rc, _, _, seen = _from_c_thread(helper, Table().raw.current_work_stream, 0, monkeypatch)
    assert rc == -1
    assert len(seen) == 1 and isinstance(seen[0].exc_value, ValueError), seen
    assert "out_current_stream is NULL" in str(seen[0].exc_value)
    assert "no Python thread state" in str(seen[0].object)


def test_the_allocator_from_a_thread_without_python_reports_its_error(helper, monkeypatch):
    fn = Table().raw.managed_tensor_allocator
    rc, _, _, seen = _from_c_thread(helper, fn, 1, monkeypatch)  # no SetError: unraisable
    assert rc == -1
    assert len(seen) == 1 and "prototype is NULL" in str(seen[0].exc_value), seen
    rc, kind, message, seen = _from_c_thread(helper, fn, 2, monkeypatch)  # SetError gets it
    assert (rc, kind, seen) == (-1, "ValueError", []), (rc, kind, seen)
    assert "prototype is NULL" in message
