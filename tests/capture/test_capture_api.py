"""Stream capture and CUDA graphs through gpuarray's API.

Runs on the simulator and over the stand-in (``cuda`` backend through the
real bindings): a captured copy/cast/transpose pipeline replayed on new
inputs under every mode; operations that a capture forbids refused with
StreamCaptureError *before* any driver call, so the capture still ends and
launches; graph memory released on close and collection; and the rule that
gpuarray never invalidates a capture -- its own or another thread's
global-mode one.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import weakref

import numpy as np
import pytest

import gpuarray
from gpuarray._driver import get_backend
from gpuarray.errors import CudaError, StreamCaptureError
from tests.support import backend_is_sim, simulated, the_simulator


def nb_stream():
    return gpuarray.stream(non_blocking=True)


@pytest.mark.parametrize("mode", ["global", "thread_local", "relaxed"])
def test_captured_cast_transpose_pipeline_replays_on_new_inputs(mode):
    s = nb_stream()
    x = gpuarray.to_device(np.zeros((3, 4), np.int32), stream=s)  # the static input
    s.begin_capture(mode)
    assert s.is_capturing()
    y = x.astype(np.float32).T.copy()        # cast + transpose: static outputs
    z = y[1:, ::2].copy()                    # strided copy of a static output
    y[0] = -1                                # setitem recorded
    g = s.end_capture()
    assert not s.is_capturing()
    for k in (1, 7, 100):
        host = np.arange(12, dtype=np.int32).reshape(3, 4) * k
        x.copy_to_device(host, stream=s)
        g.launch()
        s.synchronize()
        want = host.astype(np.float32).T.copy()
        np.testing.assert_array_equal(z.copy_to_host(), want[1:, ::2])
        want[0] = -1
        np.testing.assert_array_equal(y.copy_to_host(), want)
    g.close()


def test_zeros_on_a_capturing_stream_is_a_static_output_with_a_fixed_address():
    s = nb_stream()
    s.begin_capture()
    a = gpuarray.zeros(5, stream=s)
    a.fill(3)
    g = s.end_capture()
    ptr = a.ptr
    for _ in range(2):
        g.launch()
        s.synchronize()
        assert a.ptr == ptr
        np.testing.assert_array_equal(a.copy_to_host(), np.full(5, 3.0))


def test_using_a_static_output_before_the_first_launch_is_a_clear_error():
    s = nb_stream()
    s.begin_capture()
    y = gpuarray.zeros(4, stream=s)
    g = s.end_capture()
    with pytest.raises(StreamCaptureError, match="before its graph was launched"):
        y.copy_to_host()
    g.launch()
    np.testing.assert_array_equal(y.copy_to_host(), np.zeros(4))


def test_pinned_uploads_are_recorded_and_reread_at_each_launch():
    s = nb_stream()
    h = gpuarray.pinned_array(4, dtype=np.float64)
    d = gpuarray.zeros(4, stream=s)
    s.begin_capture()
    d.copy_to_device(h, stream=s)
    g = s.end_capture()
    for v in (2.0, 5.0):
        h[:] = v
        g.launch()
        s.synchronize()
        np.testing.assert_array_equal(d.copy_to_host(), np.full(4, v))


def _refusals(s, x, pageable):
    ev = gpuarray.event()
    yield "synchronize", s.synchronize
    yield "query", s.query
    yield "download", x.copy_to_host
    yield "pageable upload", lambda: x.copy_to_device(pageable, stream=s)
    yield "device sync", gpuarray.synchronize
    yield "event", lambda: (ev.record(s), ev.synchronize())
    yield "event query", ev.query
    yield "print", lambda: repr(x)


def test_refused_operations_leave_the_capture_valid():
    s = nb_stream()
    x = gpuarray.to_device(np.arange(4.0), stream=s)
    s.begin_capture()
    y = x.copy()
    seen = []
    for name, op in _refusals(s, x, np.ones(4)):
        with pytest.raises(StreamCaptureError, match="capturing|captures|recorded on a capturing"):
            op()
        seen.append(name)
    assert len(seen) == 8
    g = s.end_capture()  # still valid: nothing reached the driver
    g.launch()
    s.synchronize()
    np.testing.assert_array_equal(y.copy_to_host(), np.arange(4.0))


def test_legacy_stream_is_refused_while_a_blocking_stream_captures():
    s = gpuarray.stream()  # blocking
    a = gpuarray.zeros(3)   # on the legacy default stream
    s.begin_capture()
    with pytest.raises(StreamCaptureError, match="legacy default stream"):
        a.fill(1)
    g = s.end_capture()
    g.launch()
    a.fill(1)
    np.testing.assert_array_equal(a.copy_to_host(), np.ones(3))


def test_an_array_of_another_stream_in_a_capture_is_refused():
    s, t = nb_stream(), nb_stream()
    a = gpuarray.zeros(3, stream=t)
    s.begin_capture()
    with pytest.raises(StreamCaptureError, match="not part of the capture"):
        a.copy(stream=s)
    g = s.end_capture()
    s.wait_stream(t)  # the documented way: order before begin_capture, then bind
    s.begin_capture()
    c = a.bind(s).copy()
    g.close()
    g = s.end_capture()
    g.launch()
    np.testing.assert_array_equal(c.copy_to_host(), np.zeros(3))


# ----------------------------------------------------------- bad input
def test_bad_mode_legacy_stream_and_end_without_begin():
    s = nb_stream()
    with pytest.raises(ValueError, match="'global', 'thread_local', 'relaxed'"):
        s.begin_capture("strict")
    with pytest.raises(StreamCaptureError, match="legacy default stream"):
        gpuarray.legacy_default_stream().begin_capture()
    with pytest.raises(StreamCaptureError, match="not capturing"):
        s.end_capture()
    s.begin_capture()
    with pytest.raises(StreamCaptureError, match="capturing already"):
        s.begin_capture()
    s.end_capture()


@pytest.mark.parametrize("mode", ["global", "thread_local"])
def test_end_on_another_thread_is_refused_and_the_capture_stays(mode):
    s = nb_stream()
    s.begin_capture(mode)
    errors = []

    def other():
        try:
            s.end_capture()
        except StreamCaptureError as e:
            errors.append(str(e))

    t = threading.Thread(target=other)
    t.start()
    t.join(30)
    assert len(errors) == 1 and "WRONG_THREAD" in errors[0]
    assert s.is_capturing()
    s.end_capture().close()


def test_relaxed_capture_ends_on_another_thread():
    s = nb_stream()
    s.begin_capture("relaxed")
    a = gpuarray.zeros(2, stream=s)
    graphs = []
    t = threading.Thread(target=lambda: graphs.append(s.end_capture()))
    t.start()
    t.join(30)
    graphs[0].launch()
    np.testing.assert_array_equal(a.copy_to_host(), np.zeros(2))


def test_launching_a_closed_graph_is_an_error():
    s = nb_stream()
    s.begin_capture()
    g = s.end_capture()
    g.close()
    g.close()  # twice: nothing
    assert g.closed and "closed" in repr(g)
    with pytest.raises(ValueError, match="closed"):
        g.launch()
    with pytest.raises(ValueError, match="closed"):
        g.upload()
    with pytest.raises(TypeError, match="end_capture"):
        gpuarray.Graph()


def test_a_captured_kernel_that_faults_gives_a_sticky_error_at_the_next_sync():
    if not backend_is_sim():  # a fresh simulator per test on sim only
        pytest.skip("poisons the process's context: over the stand-in, test_capture_standin "
                    "runs it in a child process")
    s = nb_stream()
    x = gpuarray.to_device(np.arange(8.0), stream=s)
    s.begin_capture()
    y = x[::2].copy()  # a copy kernel reading x
    g = s.end_capture()
    x.gpu_data.owner.free()  # the graph's static input, freed explicitly
    gpuarray.memory.get_memory_manager().deallocations.clear()
    g.launch()
    with pytest.raises(CudaError) as e:
        s.synchronize()
    assert e.value.code == 700 and "use after free" in str(e.value)
    with pytest.raises(CudaError) as e2:
        gpuarray.zeros(1)
    assert e2.value.code == 700
    del y


@pytest.mark.parametrize("how", ["close", "collect"])
def test_a_graph_keeps_the_memory_it_reads_and_writes_until_it_goes(how):
    s = nb_stream()
    x = gpuarray.to_device(np.arange(6, dtype=np.int32), stream=s)  # read by the graph
    out = gpuarray.zeros(6, np.int32, stream=s)                     # written by the graph
    h = gpuarray.pinned_array(6, np.int32)                          # re-read at each launch
    h[:] = 7
    refs = [weakref.ref(x.gpu_data.owner), weakref.ref(out.gpu_data.owner), weakref.ref(h)]
    s.begin_capture()
    y = x.astype(np.float64)
    out[...] = x
    z = gpuarray.zeros(6, np.int32, stream=s)
    z.copy_to_device(h, stream=s)
    g = s.end_capture()
    del x, out, h  # the last user references to the graph's inputs
    gc.collect()
    gpuarray.memory.get_memory_manager().deallocations.clear()
    assert all(r() is not None for r in refs)  # kept by the graph
    for _ in range(2):
        g.launch()  # reads x and h, writes the memory of out: none of it was freed
        np.testing.assert_array_equal(y.copy_to_host(), np.arange(6.0))
        np.testing.assert_array_equal(z.copy_to_host(), np.full(6, 7))
    if how == "close":
        g.close()
    else:
        del g
    gc.collect()
    assert [r() for r in refs] == [None, None, None]  # released with the graph


def test_capture_block_gives_the_graph_after_the_block():
    s = nb_stream()
    x = gpuarray.to_device(np.arange(3, dtype=np.int32), stream=s)
    with s.capture("thread_local") as cap:
        assert s.is_capturing() and cap.mode == "thread_local" and cap.stream is s
        with pytest.raises(StreamCaptureError, match="has not ended"):
            _ = cap.graph
        y = x.astype(np.float32)
    assert not s.is_capturing() and "ended" in repr(cap)
    for k in (1, 4):
        x.copy_to_device(np.arange(3, dtype=np.int32) * k, stream=s)
        cap.graph.launch()
        np.testing.assert_array_equal(y.copy_to_host(), np.arange(3.0) * k)
    cap.graph.close()
    with pytest.raises(ValueError, match="capture mode"):
        with s.capture("eager"):
            pass
    assert not s.is_capturing()


def test_a_capture_block_that_raises_ends_the_capture_and_keeps_the_error():
    s = nb_stream()
    with pytest.raises(StreamCaptureError, match=r"synchronize\(\)"):
        with s.capture() as cap:
            gpuarray.zeros(2, stream=s)
            s.synchronize()
    assert not s.is_capturing() and not gpuarray._driver.get_backend().capturing
    with pytest.raises(StreamCaptureError, match="no graph"):
        _ = cap.graph
    with pytest.raises(KeyError):  # an error of the block itself
        with s.capture():
            raise KeyError("x")
    assert not s.is_capturing()
    np.testing.assert_array_equal(gpuarray.zeros(2, stream=s).copy_to_host(), np.zeros(2))


# --------------------------------------------------------------- leaks
def _used():
    return the_simulator().memory.used[0]


@pytest.mark.parametrize("how", ["close", "collect"])
def test_graph_memory_is_released_when_graph_and_arrays_are_gone(how):
    if not simulated():
        pytest.skip("reads the simulator's memory accounting")
    s = nb_stream()
    x = gpuarray.to_device(np.arange(1024.0), stream=s)
    gpuarray.synchronize()
    base = _used()
    s.begin_capture()
    y = x.astype(np.float32)
    tmp = x.copy()
    del tmp  # a temporary: a free node in the graph
    g = s.end_capture()
    g.launch()
    s.synchronize()
    assert _used() == base + 4096  # y is mapped; the temporary is not
    if how == "close":
        g.close()
    else:
        del g
        gc.collect()
    assert _used() == base + 4096  # y still uses it
    del y
    gc.collect()
    assert _used() == base


def test_a_failed_capture_leaves_no_graph_memory():
    if not simulated():
        pytest.skip("reads the simulator's memory accounting")
    s = nb_stream()
    base = _used()
    s.begin_capture()
    y = gpuarray.zeros(16, stream=s)
    with pytest.raises(CudaError):  # a raw driver call: it invalidates the capture
        get_backend().backend.stream_synchronize(s.handle)  # past the checkpoint
    with pytest.raises(StreamCaptureError, match="901|INVALIDATED"):
        s.end_capture()
    assert not s.is_capturing() and not gpuarray._driver.get_backend().capturing
    del y
    gc.collect()
    assert _used() == base


# ------------------------------------------------- never invalidating
def _foreign_capture(b, handle, mode="global"):
    """Another library's capture on this thread (through the driver interface, as cuda.core does)."""
    b.stream_begin_capture(handle, mode)


def test_gpuarray_frees_and_allocations_on_another_thread_leave_a_global_capture_valid():
    b = get_backend().backend  # the other library calls the driver, not gpuarray's checkpoint
    s = nb_stream()
    gpuarray.to_device(np.ones(4)).copy_to_host()  # kernels loaded, context current
    ready, done = threading.Event(), threading.Event()
    errors = []

    def worker():
        try:
            ready.wait(30)
            arrays = [gpuarray.to_device(np.arange(100.0) + i) for i in range(30)]
            h = gpuarray.pinned_array(64)
            h[:] = 1
            for a in arrays[::2]:
                a[1:] = a[:-1]  # temporaries, kernels
            del arrays, h  # past the deferred-free limits: flushes run
            gc.collect()
            gpuarray.get_memory_info()
        except BaseException as e:  # reported below
            errors.append(e)
        finally:
            done.set()

    t = threading.Thread(target=worker)
    t.start()
    _foreign_capture(b, s.handle)  # PyTorch's default: global mode
    ready.set()
    assert done.wait(60)
    t.join(30)
    assert errors == []
    assert b.stream_is_capturing(s.handle) == "active"
    b.graph_destroy(b.stream_end_capture(s.handle))


def _alloc_on_a_thread(b, ctx) -> list:
    """``cuMemAlloc`` on a new thread (``ctx`` made current there first unless None): codes."""
    codes = []

    def worker():
        try:
            if ctx is not None:
                b.ctx_set_current(ctx)
            b.mem_free(b.mem_alloc(256))
            codes.append(0)
        except CudaError as e:
            codes.append(e.code)

    t = threading.Thread(target=worker)
    t.start()
    t.join(30)
    return codes


def test_a_raw_allocation_on_another_thread_would_invalidate_it():
    """The hazard the test above guards against is real: the same call without relaxed mode."""
    b = get_backend().backend  # past the checkpoint
    s = nb_stream()
    gpuarray.zeros(1).copy_to_host()
    ctx = b.ctx_get_current()
    _foreign_capture(b, s.handle)
    try:
        # the thread makes the context current first: a new thread has none (next test)
        codes = _alloc_on_a_thread(b, ctx)
        state = b.stream_is_capturing(s.handle)
    finally:
        with pytest.raises(CudaError) as e:  # never leave the capture open (a GPU run did)
            b.stream_end_capture(s.handle)
    assert codes == [900]
    assert state == "invalidated"
    assert e.value.code == 901


def test_a_stream_ordered_allocation_outside_a_global_capture_is_unsafe():
    """cuMemAllocAsync on a stream outside the capture: 900 in global mode, as an H200
    answered (2026-11-28) where the simulator allowed it; relaxed mode allows it."""
    b = get_backend().backend
    s = nb_stream()
    gpuarray.zeros(1).copy_to_host()
    _foreign_capture(b, s.handle)
    try:
        prev = b.exchange_capture_mode("relaxed")
        try:
            p = b.mem_alloc_async(256, 1)  # relaxed: allowed, the capture stays valid
        finally:
            b.exchange_capture_mode(prev)
        relaxed_state = b.stream_is_capturing(s.handle)
        with pytest.raises(CudaError) as e:
            b.mem_alloc_async(256, 1)
        state = b.stream_is_capturing(s.handle)
    finally:
        with contextlib.suppress(CudaError):
            b.graph_destroy(b.stream_end_capture(s.handle))
    b.mem_free_async(p, 1)
    b.stream_synchronize(1)
    assert relaxed_state == "active"
    assert e.value.code == 900 and state == "invalidated"


def test_an_allocation_from_a_thread_without_a_context_fails_and_leaves_the_capture_valid():
    """A fresh thread has no current context: cuMemAlloc answers 201 before any capture rule.

    Seen on an H200 (2026-11-28): the simulator answered 900 and invalidated the capture.
    """
    b = get_backend().backend
    s = nb_stream()
    gpuarray.zeros(1).copy_to_host()
    _foreign_capture(b, s.handle)
    try:
        codes = _alloc_on_a_thread(b, None)
        state = b.stream_is_capturing(s.handle)
    finally:
        b.graph_destroy(b.stream_end_capture(s.handle))
    assert codes == [201]
    assert state == "active"


@pytest.mark.parametrize("mode", ["global", "thread_local"])
def test_mem_alloc_relaxed_leaves_another_threads_capture_valid_and_restores_the_mode(mode):
    """The backend call the default manager allocates with (cuda: one lean method)."""
    b = get_backend()
    s = nb_stream()
    gpuarray.zeros(1).copy_to_host()
    ctx = b.ctx_get_current()
    got, ptrs = [], []

    def worker():
        b.ctx_set_current(ctx)
        b.exchange_capture_mode(mode)
        try:
            ptrs.append(b.mem_alloc_relaxed(256))
            got.append(b.exchange_capture_mode("global"))  # the mode it left: the thread's own
        except CudaError as e:
            got.append(e.code)

    _foreign_capture(b, s.handle)
    t = threading.Thread(target=worker)
    t.start()
    t.join(30)
    assert got == [mode]
    assert b.stream_is_capturing(s.handle) == "active"
    b.graph_destroy(b.stream_end_capture(s.handle))
    b.mem_free(ptrs[0])  # (a free during the capture would invalidate it: cuMemFree is unsafe)


def test_frees_are_held_during_gpuarray_captures_and_run_after():
    s = nb_stream()
    queue = gpuarray.memory.get_memory_manager().deallocations
    s.begin_capture()
    for _ in range(40):
        gpuarray.zeros(8)  # allocated on the legacy stream: not captured (s is non-blocking)
    assert queue.pending_count >= 30  # held: no cuMemFree during the capture
    g = s.end_capture()
    assert queue.pending_count <= 10  # released when the capture ended
    g.close()


# --------------------------------------------------------------- interop
def test_dlpack_export_to_a_capturing_consumer_stream_waits_externally():
    s, t = nb_stream(), nb_stream()
    x = gpuarray.to_device(np.arange(3.0), stream=t)
    s.begin_capture()
    cap = x.__dlpack__(stream=s.handle)  # the consumer's stream is capturing
    del cap
    g = s.end_capture()  # still valid: the wait was an external event wait
    g.launch()
    s.synchronize()


def test_cai_import_adopting_a_capturing_producer_stream_records_its_work():
    s = nb_stream()
    x = gpuarray.to_device(np.arange(3.0), stream=s)
    s.begin_capture()
    imported = gpuarray.as_cuda_array(x)  # adopts x's stream: the capturing one
    y = imported.copy()
    g = s.end_capture()
    g.launch()
    np.testing.assert_array_equal(y.copy_to_host(), np.arange(3.0))
