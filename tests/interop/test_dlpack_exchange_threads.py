"""The DLPack C exchange table under threads (issue 30, defect 1).

- Two threads asking ``dltensor_from_py_object_no_sync`` for an array not
  yet exported both prepare its ``DLTensor``; the first to finish keeps it on
  the array and the other gets the same one (before, the second overwrote the
  first and freed the capsule the first caller's borrowed ``shape`` and
  ``strides`` pointed into).
- ``current_work_stream`` answers from its cache without the GIL (issue 43:
  a C consumer's thread never waits for Python, and the tvm-ffi call paid two
  GIL state switches and an attribute lookup per call), per device, until the
  configuration is read again.
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


def _install(prepare=_dlpack_table._prepare, stream=_dlpack_table._stream):
    return _dlpack_core.exchange_install(gpuarray.DeviceNDArray, prepare, _dlpack_table._to_py,
                                         _dlpack_table._allocate, stream, DLPACK_MAX_VERSION[1])


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


def test_the_stream_hook_is_asked_once_per_device_until_the_configuration_is_read_again(
        reinstall):
    calls = []

    def stream(device_type, device_id):
        calls.append((device_type, device_id))
        return 0x1000 + len(calls)

    reinstall(stream=stream)
    t = Table()
    assert [t.stream(2, 0), t.stream(2, 0), t.stream(13, 0), t.stream(2, 0)] == [
        0x1001, 0x1001, 0x1002, 0x1001]
    _config.reload()  # the configuration says which default stream: asked again
    assert [t.stream(2, 0), t.stream(13, 0), t.stream(13, 0)] == [0x1003, 0x1004, 0x1004]
    assert calls == [(2, 0), (13, 0), (2, 0), (13, 0)]


def test_a_cached_stream_is_given_without_the_gil(helper_lib):
    tab = Table()
    assert tab.stream(2, 0) == 1  # cached now
    fn = ctypes.PyDLL(helper_lib._name).stream_while_python_holds_the_gil  # keeps the GIL
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    out = ctypes.c_void_p()
    # Before: the C thread waited for the GIL this thread holds (-3 after 5 s).
    assert fn(tab.raw.current_work_stream, ctypes.byref(out)) == 0
    assert out.value == 1


_HELPER = r"""
    #define _GNU_SOURCE
    #include <pthread.h>
    #include <stddef.h>
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>
    #include <time.h>

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

    struct asked { void *fn; void *out; int rc; };

    static void *ask_stream(void *p)
    {
        struct asked *a = (struct asked *)p;
        a->rc = ((stream_t)a->fn)(2, 0, &a->out);
        return NULL;
    }

    /* Calls current_work_stream `fn` from a new thread while the caller holds the GIL:
       0 and the answer, or -3 when it did not return within 5 s (left running). */
    int stream_while_python_holds_the_gil(void *fn, void **out)
    {
        struct asked *a = (struct asked *)calloc(1, sizeof *a);
        struct timespec until;
        pthread_t t;
        a->fn = fn;
        if (pthread_create(&t, NULL, ask_stream, a) != 0)
            return -2;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 5;
        if (pthread_timedjoin_np(t, NULL, &until) != 0) {
            pthread_detach(t);
            return -3;
        }
        *out = a->out;
        free(a);
        return 0;
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
def helper_lib(tmp_path_factory):
    cc = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if cc is None:
        pytest.skip("no C compiler (cc, gcc, clang) to build a thread without Python")
    d = tmp_path_factory.mktemp("exchange-threads")
    src = d / "helper.c"
    src.write_text(textwrap.dedent(_HELPER))
    res = subprocess.run([cc, "-O1", "-shared", "-fPIC", "-pthread", "-o", str(d / "helper.so"),
                          str(src)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return ctypes.CDLL(str(d / "helper.so"))  # releases the GIL while the thread runs


@pytest.fixture
def helper(helper_lib):
    fn = helper_lib.from_c_thread
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
