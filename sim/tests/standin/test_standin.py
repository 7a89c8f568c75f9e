"""The stand-in driver (``libcuda.so.1`` over the simulator) under the real cuda backend.

Each scenario runs in a child process started over the stand-in (the
library must be found when the process starts), on ``GPUARRAY_BACKEND=cuda``:
``gpuarray/_driver/cuda/`` and the installed ``cuda.bindings`` talk to the
simulator through the C entry points.  The child asserts and prints ``OK``;
a broken stand-in fails the assertion, the import or the process.  The
serving side's own contract (never raising, keeping errors) is tested in
process.  These tests run in every suite: on ``make test`` (the simulator)
and over the stand-in itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from gpuarray_sim import standin as _standin
from gpuarray_sim.standin import _serve as _standin_serve
from gpuarray_sim.standin import _support as _standin_support

pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")


@pytest.fixture(scope="module")
def folder():
    try:
        return _standin.build()
    except _standin.StandinUnavailableError as e:
        pytest.skip(f"the stand-in driver cannot be built here: {e}")


def run(folder, code: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    e = _standin.environment(folder)
    for k in ("CUDA_VISIBLE_DEVICES", "GPUARRAY_SIM_DEVICES", "CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM"):
        e.pop(k, None)
    e.update(env)
    prelude = ("from gpuarray._driver import get_backend\n"
               "from gpuarray.errors import CudaError\n"
               "b = get_backend().backend  # the cuda backend, past gpuarray's capture checkpoint\n"
               "assert b.name == 'cuda', b\n")
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout, env=e)


#: A command's start for tests of the real cuda.bindings over the stand-in: ``d`` (the
#: driver module), ``ctypes``, ``chk`` (asserts CUDA_SUCCESS, returns the results) and the
#: primary context of device 0 current.
BINDINGS_PRELUDE = """
import ctypes
from cuda.bindings import driver as d
def chk(r):
    r = r if isinstance(r, tuple) else (r,)
    assert r[0] == d.CUresult.CUDA_SUCCESS, r
    return r[1] if len(r) == 2 else r[1:]
chk(d.cuInit(0)); dev = chk(d.cuDeviceGet(0)); ctx = chk(d.cuDevicePrimaryCtxRetain(dev))
chk(d.cuCtxSetCurrent(ctx))
"""


def run_bindings(folder, body: str, **env: str) -> str:
    """Run ``body`` after :data:`BINDINGS_PRELUDE` over the stand-in; its output (it must end in OK)."""
    return ok(run(folder, BINDINGS_PRELUDE + textwrap.dedent(body), **env))


def ok(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 0 and res.stdout.rstrip().endswith("OK"), (
        f"exit {res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}")
    return res.stdout


def test_cli_info_says_the_cuda_backend_runs_over_the_standin(folder):
    e = _standin.environment(folder)
    e.pop("CUDA_VISIBLE_DEVICES", None)
    res = subprocess.run([sys.executable, "-m", "gpuarray", "standin", "--", sys.executable,
                          "-m", "gpuarray", "info"], capture_output=True, text=True, timeout=180,
                         env={k: v for k, v in e.items() if k not in ("GPUARRAY_BACKEND", "GPUARRAY_STANDIN")})
    assert res.returncode == 0, res.stderr
    assert "backend: cuda (from GPUARRAY_BACKEND) over the stand-in driver" in res.stdout
    assert _standin_serve.STANDIN_DEVICE_MARK in res.stdout


def test_the_simulators_own_cli_runs_a_command_over_the_standin(folder):
    # python -m gpuarray_sim standin is the stand-in's own command line; python -m
    # gpuarray standin (above) hands over to it through an entry point.
    code = "import os, gpuarray; print(os.environ['GPUARRAY_BACKEND'], gpuarray.device_count())"
    res = subprocess.run([sys.executable, "-m", "gpuarray_sim", "standin", "--", sys.executable, "-c",
                          code], capture_output=True, text=True, timeout=180,
                         env={k: v for k, v in os.environ.items()
                              if k not in ("GPUARRAY_BACKEND", "GPUARRAY_STANDIN", "CUDA_VISIBLE_DEVICES",
                                           "GPUARRAY_SIM_DEVICES")})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["cuda", "1"], res.stdout


def test_cli_without_a_command_is_a_usage_error():
    res = subprocess.run([sys.executable, "-m", "gpuarray", "standin"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "no command given" in res.stderr


def test_arrays_kernels_and_queries_through_cuda_py(folder):
    ok(run(folder, """
        import ctypes, numpy as np, gpuarray as ga
        from gpuarray._driver import _base
        assert type(b).__name__ == 'CudaBackend'
        assert b.driver_version() == 13050
        assert 'gpuarray simulated device 0' in b.device_name(0)
        for attr in _base.DEVICE_ATTRIBUTES:
            b.device_attribute(attr, 0)
        assert b.device_attribute('warp_size', 0) == 32
        assert len(b.device_uuid(0)) == 16
        host = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
        for view in (host, host[:, ::2, ::-1], host.transpose(2, 0, 1)):
            d = ga.to_device(view)
            np.testing.assert_array_equal(d.copy_to_host(), view)
        d = ga.to_device(host)
        np.testing.assert_array_equal(d.astype(np.float64).copy_to_host(), host)  # NVRTC kernel
        d[:, ::2] = 7
        h2 = host.copy(); h2[:, ::2] = 7
        np.testing.assert_array_equal(d.copy_to_host(), h2)
        free, total = b.mem_get_info()
        assert 0 < free <= total == b.device_total_memory(0)
        info = b.pointer_info(d.ptr + 4)
        assert (info.memory_type, info.device_ordinal, info.base) == (2, 0, d.ptr)
        pinned = ga.pinned_array(8, np.int16)
        assert b.pointer_info(pinned.ctypes.data).memory_type == 1
        assert b.pointer_info(np.zeros(4).ctypes.data).memory_type == 0
        try:
            b.device_name(5)
        except CudaError as e:
            assert e.name == 'CUDA_ERROR_INVALID_DEVICE', e
        else:
            raise AssertionError('no error for device 5')
        print('OK')
    """))


def test_use_after_free_is_a_sticky_fault_through_cuda_py(folder):
    ok(run(folder, """
        import gpuarray as ga
        ctx = b.primary_ctx_retain(0); b.ctx_set_current(ctx)
        s = b.stream_create(non_blocking=True)
        p = b.mem_alloc_async(256, s)
        b.mem_free_async(p, s)
        b.memset_d8_async(p, 1, 256, s)      # checked when queued: still allocated then
        try:
            b.stream_synchronize(s)
        except CudaError as e:
            assert e.name == 'CUDA_ERROR_ILLEGAL_ADDRESS' and e.call == 'cuStreamSynchronize', e
        else:
            raise AssertionError('use after cuMemFreeAsync was not reported')
        try:
            b.mem_alloc(16)                  # sticky: the context is unusable
        except CudaError as e:
            assert e.name == 'CUDA_ERROR_ILLEGAL_ADDRESS' and e.call == 'cuMemAlloc', e
        else:
            raise AssertionError('the fault was not sticky')
        assert b.device_count() == 1          # device queries still work
        b.primary_ctx_reset(0)
        b.ctx_set_current(b.primary_ctx_retain(0))
        b.mem_free(b.mem_alloc(16))           # usable again after the reset
        print('OK')
    """))


def test_stream_race_is_reported_with_the_simulators_message(folder):
    res = run(folder, """
        from gpuarray_sim.standin import _serve as _standin_serve
        ctx = b.primary_ctx_retain(0); b.ctx_set_current(ctx)
        s, t = b.stream_create(non_blocking=True), b.stream_create(non_blocking=True)
        p = b.mem_alloc(64)
        b.memset_d8_async(p, 1, 64, s)
        try:
            b.memset_d8_async(p, 2, 64, t)
            b.ctx_synchronize()
        except CudaError as e:
            assert e.name == 'CUDA_ERROR_UNKNOWN', e
            err = _standin_serve.last_error()
            assert type(err).__name__ == 'StreamOrderError', repr(err)
        else:
            raise AssertionError('the race was not reported')
        print('OK')
    """, GPUARRAY_SIM_RACECHECK="error")
    ok(res)
    assert "StreamOrderError" in res.stderr  # the message is printed, never lost


def test_host_callbacks_run_on_a_driver_thread_and_may_not_call_cuda(folder):
    ok(run(folder, """
        import threading
        ctx = b.primary_ctx_retain(0); b.ctx_set_current(ctx)
        s = b.stream_create()
        seen, done = [], threading.Event()
        def cb(status):
            seen.append((status, threading.current_thread().name))
            try:
                b.mem_get_info()
            except CudaError as e:
                seen.append(e.name)
            done.set()
        p = b.mem_alloc(1 << 16)
        b.memset_d32_async(p, 5, 1 << 14, s)
        b.stream_add_callback(s, cb)
        b.stream_synchronize(s)
        assert done.wait(30)
        assert seen == [(0, 'gpuarray-sim-callback'), 'CUDA_ERROR_NOT_PERMITTED'], seen
        print('OK')
    """))


def test_several_devices_and_visible_devices(folder):
    ok(run(folder, """
        from gpuarray_sim._visible import machine_uuid
        assert b.device_count() == 2
        assert b.device_uuid(0) == machine_uuid(2) and b.device_uuid(1) == machine_uuid(0)
        assert 'device 2' in b.device_name(0)
        assert b.device_can_access_peer(0, 1)
        c0, c1 = b.primary_ctx_retain(0), b.primary_ctx_retain(1)
        b.ctx_set_current(c1)
        assert b.ctx_get_device() == 1
        s1 = b.stream_create()
        assert b.stream_get_ctx(s1) == c1
        p1 = b.mem_alloc(64)
        assert b.pointer_info(p1).device_ordinal == 1  # on every binding: see the next test
        b.ctx_set_current(c0)
        b.ctx_enable_peer_access(c1)
        b.ctx_enable_peer_access(c1)         # ALREADY_ENABLED is not an error for the backend
        b.mem_free(p1)
        print('OK')
    """, GPUARRAY_SIM_DEVICES="3", CUDA_VISIBLE_DEVICES="2,0"))


def test_the_device_of_a_pointer_comes_from_its_context_where_the_binding_misreads_it(folder):
    """cuda-bindings 13.2.0-13.4.2 read CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL as 0 (13.3.1 on
    the H200 run): then gpuarray asks the pointer's context (forced here on any binding)."""
    from gpuarray._driver.cuda._state import misreads_device_ordinal
    assert [v for v in ("12.9.10", "13.1.1", "13.2.0", "13.3.1", "13.4.2", "13.4.3", "13.5.0")
            if misreads_device_ordinal(v)] == ["13.2.0", "13.3.1", "13.4.2"]
    out = ok(run(folder, """
        from gpuarray._driver.cuda import _state as S
        c0, c1 = b.primary_ctx_retain(0), b.primary_ctx_retain(1)  # the binding is loaded
        if not hasattr(S._d, "cuCtxGetDevice_v2"):
            print("no cuCtxGetDevice_v2"); print("OK"); raise SystemExit
        if not S._ORDINAL_VIA_CONTEXT:
            S._ORDINAL_VIA_CONTEXT = True
            S._PTR_ATTRS.append(S._d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_CONTEXT)
        b.ctx_set_current(c1)
        p1 = b.mem_alloc(64)
        b.ctx_set_current(c0)
        p0 = b.mem_alloc(64)
        assert b.pointer_info(p1).device_ordinal == 1, b.pointer_info(p1)
        assert b.pointer_info(p0).device_ordinal == 0
        b.mem_free(p0); b.mem_free(p1)
        print('OK')
    """, GPUARRAY_SIM_DEVICES="2"))
    if "no cuCtxGetDevice_v2" in out:
        pytest.skip("cuda-bindings 12 has no cuCtxGetDevice_v2 (the bindings that misread the "
                    "ordinal are 13.x, which have it)")


def test_no_visible_device_is_cuda_unavailable(folder):
    ok(run(folder, """
        from gpuarray.errors import CudaUnavailableError
        try:
            b.device_count()
        except CudaUnavailableError as e:
            assert 'no CUDA-capable device is detected' in e.reason, e.reason
        else:
            raise AssertionError('no error without a visible device')
        print('OK')
    """, CUDA_VISIBLE_DEVICES=""))


def test_ipc_in_a_second_process(folder):
    ok(run(folder, """
        import os, subprocess, sys, numpy as np
        import gpuarray as ga
        d = ga.to_device(np.arange(32, dtype=np.int32))
        d.stream.synchronize()                # the consumer must see the copy done
        handle = b.ipc_get_mem_handle(d.ptr)
        assert len(handle) == 64
        child = ("from gpuarray._driver import get_backend\\n"
                 "import numpy as np, sys\\n"
                 "b = get_backend(); b.ctx_set_current(b.primary_ctx_retain(0))\\n"
                 "p = b.ipc_open_mem_handle(bytes.fromhex(sys.argv[1]))\\n"
                 "out = np.zeros(32, np.int32)\\n"
                 "b.memcpy_dtoh_async(out.ctypes.data, p, 128, 0); b.ctx_synchronize()\\n"
                 "assert (out == np.arange(32)).all(), out\\n"
                 "b.ipc_close_mem_handle(p)\\n"
                 "print('child OK')\\n")
        r = subprocess.run([sys.executable, '-c', child, handle.hex()], capture_output=True, text=True)
        assert r.returncode == 0 and 'child OK' in r.stdout, r.stderr
        print('OK')
    """))


def test_stream_ordered_pool_and_events(folder):
    ok(run(folder, """
        import numpy as np
        ctx = b.primary_ctx_retain(0); b.ctx_set_current(ctx)
        b.mempool_set_release_threshold(0, 1 << 20)
        s, t = b.stream_create(non_blocking=True), b.stream_create(non_blocking=True, priority=-1)
        p = b.mem_alloc_async(4096, s)
        b.memset_d16_async(p, 0x1234, 2048, s)
        ev, e0 = b.event_create(timing=False), b.event_create()
        b.event_record(e0, s)
        b.event_record(ev, s)
        b.stream_wait_event(t, ev)
        out = np.zeros(2048, np.uint16)
        b.memcpy_dtoh_async(out.ctypes.data, p, 4096, t)
        b.mem_free_async(p, t)
        b.stream_synchronize(t)
        assert (out == 0x1234).all()
        assert b.event_query(ev) and b.stream_query(s)
        b.event_synchronize(e0)
        try:
            b.event_elapsed_time(e0, ev)
        except CudaError as e:
            assert e.name == 'CUDA_ERROR_INVALID_HANDLE', e
        else:
            raise AssertionError('timing of a non-timing event')
        b.event_destroy(ev); b.event_destroy(e0); b.stream_destroy(s); b.stream_destroy(t)
        b.profiler_start(); b.profiler_stop()
        print('OK')
    """))


def test_per_thread_default_stream_forms(folder):
    res = run(folder, """
        import numpy as np, gpuarray as ga
        x = np.arange(100, dtype=np.float64)
        d = ga.to_device(x, stream=ga.per_thread_default_stream())
        np.testing.assert_array_equal(d.copy_to_host(), x)
        print('OK')
    """, CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM="1", GPUARRAY_STANDIN_TRACE="1")
    ok(res)
    assert "flags=2) -> served" in res.stderr  # the bindings asked for the _ptsz forms


def test_a_function_the_standin_does_not_model_answers_not_supported(folder):
    # issue 45: every function of cuda.h is there; what the simulator does not model
    # refuses every call with CUDA_ERROR_NOT_SUPPORTED (a caller's "unsupported" path runs)
    ok(run(folder, """
        from cuda.bindings import driver
        b.init()
        err, = driver.cuCtxResetPersistingL2Cache()
        assert err == driver.CUresult.CUDA_ERROR_NOT_SUPPORTED, err
        print('OK')
    """))


# ------------------------------------------------------- the serving side
def test_serve_never_raises_and_keeps_the_error(capsys):
    assert _standin_serve.serve("cuInit", (0,)) == 0  # before it every call is NOT_INITIALIZED
    assert _standin_serve.serve("cuMemAlloc_v2", (0, 16)) == 1  # NULL output pointer
    assert "NULL output pointer" in str(_standin_serve.last_error())
    assert _standin_serve.serve("cuNoSuchCall", ()) == 999
    assert isinstance(_standin_serve.last_error(), KeyError)
    assert "cuNoSuchCall failed (CUDA_ERROR_UNKNOWN)" in capsys.readouterr().err


def test_serve_decodes_signed_arguments():
    assert _standin_support._signed((1 << 64) - 1) == -1
    assert _standin_support._signed(5) == 5


def test_build_refuses_a_folder_others_may_write(tmp_path, monkeypatch):
    d = tmp_path / "standin"
    d.mkdir(mode=0o777)
    os.chmod(d, 0o777)
    monkeypatch.setenv("GPUARRAY_STANDIN_DIR", str(d))
    try:
        _standin._compiler()
    except _standin.StandinUnavailableError as e:
        pytest.skip(str(e))
    with pytest.raises(_standin.StandinUnavailableError, match="may write to it"):
        _standin.build()


def test_the_build_key_covers_every_file_the_source_includes():
    """A header _libcuda.c includes is hashed into the build's folder name and shipped:
    a change of it rebuilds, and an installed gpuarray builds the stand-in (HEADERS)."""
    import re

    included = set()
    for src in (_standin.SOURCE, *_standin.HEADERS):
        included |= set(re.findall(r'^#include "([^"]+)"', src.read_text(), re.MULTILINE))
    assert included == {h.name for h in _standin.HEADERS}
    assert all(h.is_file() for h in _standin.HEADERS)


def test_build_without_a_compiler_says_so(monkeypatch):
    monkeypatch.setenv("CC", "")
    monkeypatch.setattr(_standin.shutil, "which", lambda name: None)
    with pytest.raises(_standin.StandinUnavailableError, match="no C compiler found"):
        _standin.build()


# --------------------------------- the cuda backend's lazy initialisation
def test_every_backend_method_initialises_the_driver_when_called_first():
    """Each method of ``CudaBackend`` may be the first call: it runs ``cuInit`` itself.

    Over the stand-in each call then reaches the driver (success or a
    ``CudaError``: invalid handles on purpose); with no driver each raises
    ``CudaUnavailableError``. Never on a real GPU: a real driver may crash on
    the invalid handles used here.
    """
    import ctypes

    import numpy as np

    from gpuarray._driver import cuda as cudamod
    from gpuarray._driver.cuda import CudaBackend
    from gpuarray.errors import CudaError, CudaUnavailableError

    try:
        CudaBackend().init()
    except CudaUnavailableError:
        driver = False
    else:
        driver = True
        if not _standin.active():
            pytest.skip("a real CUDA driver is present: invalid handles could crash it")
    results: dict[str, object] = {}

    def first(name: str, *args):
        b = CudaBackend()
        try:
            results[name] = getattr(b, name)(*args)
        except CudaError as e:
            results[name] = e
            assert driver, f"{name}: {e!r}"
        except CudaUnavailableError:
            assert not driver, name
            results[name] = 0
        else:
            assert driver, name
        assert b._ready is driver, name
        return results[name] if isinstance(results[name], int) else 0

    host = np.zeros(4096, np.uint8)
    first("driver_version")
    first("device_count")
    first("device_name", 0)
    first("device_attribute", "warp_size", 0)
    first("device_total_memory", 0)
    first("device_uuid", 0)
    first("device_can_access_peer", 0, 0)
    ctx = first("primary_ctx_retain", 0)
    first("ctx_set_current", ctx)
    first("ctx_get_current")
    first("ctx_get_device")
    first("ctx_synchronize")
    first("ctx_enable_peer_access", ctx)
    first("profiler_start")
    first("profiler_stop")
    first("mem_get_info")
    first("mempool_set_release_threshold", 0, 0)
    dev = first("mem_alloc", 256)
    dev2 = first("mem_alloc_async", 256, 0)
    pinned = first("mem_host_alloc", 256, True)
    first("mem_host_get_device_pointer", pinned)
    first("mem_host_register", host.ctypes.data, host.nbytes)
    first("mem_host_unregister", host.ctypes.data)
    first("pointer_info", dev)
    first("memcpy_htod_async", dev, host.ctypes.data, 256, 0)
    first("memcpy_dtod_async", dev2, dev, 256, 0)
    first("memcpy_dtoh_async", host.ctypes.data, dev2, 256, 0)
    first("memcpy_2d_async", dev, 16, True, host.ctypes.data, 16, False, 16, 4, 0)
    first("memset_d8_async", dev, 1, 256, 0)
    first("memset_d16_async", dev, 1, 128, 0)
    first("memset_d32_async", dev, 1, 64, 0)
    s = first("stream_create")
    ev = first("event_create")
    first("event_record", ev, s)
    first("stream_wait_event", s, ev)
    first("stream_query", s)
    first("stream_synchronize", s)
    first("stream_get_ctx", s)
    first("event_query", ev)
    first("event_synchronize", ev)
    first("event_elapsed_time", ev, ev)
    first("stream_add_callback", s, lambda status: None)
    first("stream_synchronize", s)
    first("event_destroy", ev)
    first("stream_destroy", s)
    first("stream_add_callback", s, lambda status: None)  # a destroyed stream: refused
    mod = first("module_load_data", b".version 8.0\n.target sm_90\n// no kernel\n")
    first("module_get_function", mod, "no_such_kernel")
    first("launch_kernel", 0x1234, (1, 1, 1), (1, 1, 1), 0, 0, [ctypes.c_int(1)])
    first("module_unload", mod)
    first("ipc_get_mem_handle", dev)
    first("ipc_open_mem_handle", bytes(64))
    first("ipc_close_mem_handle", 0x1234)
    managed = first("mem_alloc_managed", 64)
    first("mem_free", managed)
    first("mem_free_async", dev2, 0)
    first("ctx_synchronize")
    first("mem_free_host", pinned)
    first("mem_free", dev)
    first("primary_ctx_release", 0)
    if driver:
        assert isinstance(results["device_name"], str)
        assert isinstance(results["ipc_get_mem_handle"], bytes) and len(results["ipc_get_mem_handle"]) == 64
        assert dev and dev2 and pinned and managed and s and ev and mod
        assert isinstance(results["module_get_function"], CudaError)
        assert isinstance(results["launch_kernel"], CudaError)
        assert not cudamod._host_fns  # the refused callback is not kept


def test_a_kept_error_does_not_keep_the_callers_objects_alive():
    """The error kept for ``last_error`` must not hold the failing call's frames.

    A traceback holds its frames and, through ``f_back``, every caller's:
    over the stand-in the callers are the cuda backend and the layers above it, whose
    locals (temporary device arrays) would then stay allocated until the
    thread's next failed call (found by tests/driver/test_faults.py over the stand-in).
    """
    import weakref

    class Held:
        pass

    def caller():
        obj = Held()
        assert _standin_serve.serve("cuInit", (0,)) == 0
        assert _standin_serve.serve("cuMemAlloc_v2", (0, 16)) == 1
        return weakref.ref(obj)

    ref = caller()
    assert ref() is None
    assert "NULL output pointer" in str(_standin_serve.last_error())
