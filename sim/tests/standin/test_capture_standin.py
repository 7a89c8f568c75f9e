"""Stream capture and graphs through the real backend (``gpuarray/_driver/cuda/``, cuda.bindings) over the stand-in.

A child process on the ``cuda`` backend over the stand-in ``libcuda.so.1``:
the capture/graph forms the bindings resolve (``cuStreamBeginCapture_v2``,
``cuStreamGetCaptureInfo_v3``, ``cuGraphInstantiateWithFlags`` ...) reach
the simulator's rules.  The whole API suite (``tests/capture/test_capture_api.py``)
also runs over the stand-in with ``make test-standin``.
"""

from __future__ import annotations

import pytest

from sim.tests.standin.test_standin import folder, ok, run  # noqa: F401  (the module's fixture)

pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")


def test_captured_pipeline_replays_and_rules_hold_through_cuda_py(folder):  # noqa: F811
    ok(run(folder, """
        import threading
        import numpy as np
        import gpuarray
        from gpuarray.errors import StreamCaptureError

        for mode in ("global", "thread_local", "relaxed"):
            s = gpuarray.stream(non_blocking=True)
            x = gpuarray.to_device(np.zeros((2, 3), np.int32), stream=s)
            s.begin_capture(mode)
            assert s.is_capturing() and b.stream_capture_info(s.handle)[0] == "active"
            y = x.astype(np.float64).T.copy()
            try:
                s.synchronize()
                raise AssertionError("synchronize in a capture was not refused")
            except StreamCaptureError:
                pass
            g = s.end_capture()
            for k in (1, 3):
                host = np.arange(6, dtype=np.int32).reshape(2, 3) * k
                x.copy_to_device(host, stream=s)
                g.upload()
                g.launch()
                s.synchronize()
                assert (y.copy_to_host() == host.T).all(), y.copy_to_host()
            g.close()

        # Another library's global capture on this thread; gpuarray works on another thread.
        s = gpuarray.stream(non_blocking=True)
        b.stream_begin_capture(s.handle, "global")
        errors = []
        def worker():
            try:
                arrays = [gpuarray.to_device(np.arange(50.0) + i) for i in range(25)]
                del arrays
                gpuarray.pinned_array(8)
            except BaseException as e:
                errors.append(e)
        t = threading.Thread(target=worker); t.start(); t.join(60)
        assert errors == [], errors
        assert b.stream_is_capturing(s.handle) == "active"
        b.graph_destroy(b.stream_end_capture(s.handle))

        # The same allocation made raw: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, then 901.
        b.stream_begin_capture(s.handle, "global")
        codes = []
        ctx = b.ctx_get_current()
        def raw():  # a new thread has no current context (201 before any capture rule)
            b.ctx_set_current(ctx)
            try:
                b.mem_alloc(64)
            except CudaError as e:
                codes.append(e.code)
        t = threading.Thread(target=raw); t.start(); t.join(60)
        assert codes == [900], codes
        try:
            b.stream_end_capture(s.handle)
            raise AssertionError("an invalidated capture ended")
        except CudaError as e:
            assert e.code == 901 and e.name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", e
        try:
            b.stream_begin_capture(1, "global")
        except CudaError as e:
            assert e.code == 1, e
        print("OK")
    """))


def test_a_captured_kernel_that_faults_is_sticky_at_the_next_sync_through_cuda_py(folder):  # noqa: F811
    ok(run(folder, """
        import numpy as np
        import gpuarray

        s = gpuarray.stream(non_blocking=True)
        x = gpuarray.to_device(np.arange(8.0), stream=s)
        s.begin_capture()
        y = x[::2].copy()
        g = s.end_capture()
        x.gpu_data.owner.free()  # the graph keeps x alive: freed explicitly
        gpuarray.memory.get_memory_manager().deallocations.clear()
        g.launch()
        for call in (s.synchronize, lambda: gpuarray.zeros(1)):
            try:
                call()
                raise AssertionError("the fault of the replay was lost")
            except CudaError as e:
                assert e.code == 700, e
        print("OK")
    """))


def test_instantiate_with_params_and_user_objects_through_the_bindings(folder):  # noqa: F811
    """cuda.core's graph path: cuGraphInstantiateWithParams (its struct, upload flag and
    result) and user objects a graph keeps alive, with cuda.h's codes for bad input."""
    ok(run(folder, """
        import ctypes
        import threading
        import numpy as np
        import gpuarray
        from cuda.bindings import driver as d

        R = d.CUresult
        s = gpuarray.stream(non_blocking=True)
        x = gpuarray.zeros(4, np.float32, stream=s)
        s.synchronize()
        destroyed, done = [], threading.Event()

        @ctypes.CFUNCTYPE(None, ctypes.c_void_p)
        def dtor(p):
            destroyed.append(p)
            done.set()

        fn = d.CUhostFn(ctypes.cast(dtor, ctypes.c_void_p).value)
        nosync = d.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC
        assert d.cuUserObjectCreate(7, fn, 1, 0)[0] == R.CUDA_ERROR_INVALID_VALUE  # flag required
        err, obj = d.cuUserObjectCreate(1234, fn, 1, nosync)
        assert err == R.CUDA_SUCCESS
        assert d.cuUserObjectRelease(obj, 2)[0] == R.CUDA_ERROR_INVALID_VALUE  # holds 1

        d.cuStreamBeginCapture(s.handle, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL)
        x.fill(2)
        err, status, _, graph, *_ = d.cuStreamGetCaptureInfo(s.handle)
        move = d.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE
        assert d.cuGraphRetainUserObject(graph, obj, 1, move)[0] == R.CUDA_SUCCESS
        err, g = d.cuStreamEndCapture(s.handle)
        assert err == R.CUDA_SUCCESS and int(g) == int(graph)

        p = d.CUDA_GRAPH_INSTANTIATE_PARAMS()
        p.flags = d.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
        err, _ = d.cuGraphInstantiateWithParams(g, p)
        assert err == R.CUDA_ERROR_INVALID_VALUE, err
        assert p.result_out == d.CUgraphInstantiateResult.CUDA_GRAPH_INSTANTIATE_ERROR
        upload = d.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD
        assert d.cuGraphInstantiate(g, upload)[0] == R.CUDA_ERROR_INVALID_VALUE  # WithFlags

        p = d.CUDA_GRAPH_INSTANTIATE_PARAMS()
        p.flags = upload
        p.hUploadStream = d.CUstream(s.handle)
        err, ex = d.cuGraphInstantiateWithParams(g, p)
        assert err == R.CUDA_SUCCESS and int(ex) != 0, err
        assert p.result_out == d.CUgraphInstantiateResult.CUDA_GRAPH_INSTANTIATE_SUCCESS
        assert d.cuGraphDestroy(g)[0] == R.CUDA_SUCCESS
        assert destroyed == []  # the executable graph took its own reference
        assert d.cuGraphLaunch(ex, s.handle)[0] == R.CUDA_SUCCESS
        assert d.cuGraphExecDestroy(ex)[0] == R.CUDA_SUCCESS
        assert done.wait(30) and destroyed == [1234]  # after the launch, on a driver thread
        assert (x.copy_to_host() == 2).all()
        print("OK")
    """))
