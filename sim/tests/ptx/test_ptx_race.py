"""The race detector sees what kernels translated from PTX touch.

A PTX kernel declares nothing before it runs (``PtxKernel.accesses`` is
empty); the executor's checked accesses record, per allocation, the bytes
it read and wrote, and the scheduler judges them when the launch has run,
on the clock the launch had when it was queued (``sim/_race.py``,
``Reports``), running the launch early enough for the verdict to come from
the call that races.  So two streams touching the same bytes through PTX
kernels (or a PTX kernel and a copy or memset) with no happens-before edge
raise :class:`~gpuarray.errors.StreamOrderError` at the second of the two
calls, as declared accesses do -- at the synchronisation that runs the
launch only where a host function that has not returned held it back --
and the same work ordered by its stream, an event or a host
synchronisation never does.  The kernels are NVRTC's ``saxpy`` (reads ``x``,
reads and writes ``y``) and numba-cuda's warp-shuffle reduction (reads
``a``, adds atomically to ``out``) from ``sim/tests/ptx/fixtures``.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest
from gpuarray_sim import ptx

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from gpuarray.errors import StreamOrderError
from sim.tests.ptx.support import download, fixture, u64, upload
from sim.tests.standin.test_standin import folder, ok, run  # noqa: F401  (the module-scoped fixture)

# every test once per tier: translated and built, and interpreted (conftest.py)
pytestmark = pytest.mark.usefixtures("ptx_tier")

N = 256  # saxpy's elements per launch (one block of 256 threads)


@pytest.fixture
def saxpy(b):
    return b.module_get_function(b.module_load_data(fixture("saxpy").encode() + b"\0"), "saxpy")


def _saxpy(b, f, x: int, y: int, stream: int, n: int = N) -> None:
    """Queue ``y[:n] = 2 * x[:n] + y[:n]`` (float32) on ``stream``."""
    b.launch_kernel(f, (1, 1, 1), (256, 1, 1), 0, stream,
                    [ctypes.c_float(2.0), u64(x), u64(y), ctypes.c_int32(n)])


def _streams(b):
    return b.stream_create(non_blocking=True), b.stream_create(non_blocking=True)


def _buffers(b):
    x = upload(b, np.ones(N, np.float32))
    y = upload(b, np.zeros(4 * N, np.float32))  # room for two saxpys side by side
    b.ctx_synchronize()
    return x, y


def test_two_streams_writing_overlapping_bytes_race(b, saxpy):
    x, y = _buffers(b)
    s1, s2 = _streams(b)
    _saxpy(b, saxpy, x, y, s1)
    with pytest.raises(StreamOrderError, match=r"kernel saxpy \(\w+ bytes.*races with kernel saxpy \(writes"):
        _saxpy(b, saxpy, x, y + 4 * (N // 2), s2)  # half of its range is s1's


def test_two_streams_writing_disjoint_bytes_do_not(b, saxpy):
    x, y = _buffers(b)
    s1, s2 = _streams(b)
    _saxpy(b, saxpy, x, y, s1)
    _saxpy(b, saxpy, x, y + 4 * N, s2)  # the next N elements: x is only read by both
    b.ctx_synchronize()
    assert (download(b, y, 2 * N, np.float32) == 2).all()


def test_same_stream_event_and_host_sync_order_the_launches(b, saxpy):
    x, y = _buffers(b)
    s1, s2 = _streams(b)
    _saxpy(b, saxpy, x, y, s1)
    _saxpy(b, saxpy, x, y, s1)  # same stream
    ev = b.event_create(timing=False)
    b.event_record(ev, s1)
    b.stream_wait_event(s2, ev)
    _saxpy(b, saxpy, x, y, s2)  # after the event
    b.stream_synchronize(s2)
    _saxpy(b, saxpy, x, y, s1)  # after the host saw s2's work complete
    b.ctx_synchronize()
    assert (download(b, y, N, np.float32) == 8).all()


def test_a_kernel_reading_what_another_stream_writes_races(b, saxpy):
    x, y = _buffers(b)
    s1, s2 = _streams(b)
    _saxpy(b, saxpy, y, y + 4 * N, s1)  # reads y[:N] as its x
    with pytest.raises(StreamOrderError, match=r"\(writes bytes.*races with kernel saxpy \(reads"):
        _saxpy(b, saxpy, x, y, s2)  # writes y[:N]: the call that races


def test_a_numba_kernel_reading_what_a_memset_on_another_stream_writes_races(b):
    text = fixture("numba_warp_reduce")
    f = b.module_get_function(b.module_load_data(text.encode() + b"\0"),
                              next(iter(ptx.parse(text).entries)))
    a = upload(b, np.arange(64, dtype=np.float32))
    out1, out2 = upload(b, np.zeros(1, np.float32)), upload(b, np.zeros(1, np.float32))
    b.ctx_synchronize()
    s1, s2 = _streams(b)

    def reduce(out, stream):  # numba's seven parameters per 1-d array
        b.launch_kernel(f, (1, 1, 1), (64, 1, 1), 0, stream,
                        [u64(0), u64(0), u64(64), u64(4), u64(a), u64(64), u64(4),
                         u64(0), u64(0), u64(1), u64(4), u64(out), u64(1), u64(4)])

    reduce(out1, s1)
    reduce(out2, s2)  # both read a: no race
    b.ctx_synchronize()
    assert download(b, out1, 1, np.float32)[0] == download(b, out2, 1, np.float32)[0] == 2016
    reduce(out1, s1)
    with pytest.raises(StreamOrderError, match=r"cuMemsetD32Async.*races with kernel \w*warp_reduce"
                                               r"\w* \(reads bytes"):
        b.memset_d32_async(a + 128, 0, 4, s2)  # a[32:36] while s1's kernel reads all of a


def test_later_work_ordered_after_the_kernel_does_not_race(b, saxpy):
    """Work queued after the launch but before it ran is already recorded when the
    launch reports: ordered after it (an event), it is no race."""
    x, y = _buffers(b)
    s1, s2 = _streams(b)
    _saxpy(b, saxpy, x, y, s1)
    ev = b.event_create(timing=False)
    b.event_record(ev, s1)
    b.stream_wait_event(s2, ev)
    b.memset_d32_async(y, 0, N, s2)  # recorded now; the kernel has not run
    b.ctx_synchronize()
    assert (download(b, y, N, np.float32) == 0).all()


def test_a_memset_racing_with_a_queued_launch_is_refused_at_its_call(b, saxpy):
    """The launch on s1 has not run when the memset on s2 is queued: it runs first, so the
    memset is judged against what the launch touched, by the memset's own call."""
    x, y = _buffers(b)
    s1, s2 = _streams(b)
    _saxpy(b, saxpy, x, y, s1)
    with pytest.raises(StreamOrderError, match=r"cuMemsetD32Async.*races with kernel saxpy"):
        b.memset_d32_async(y + 4 * 10, 0, 1, s2)


def test_a_launch_held_back_by_a_host_function_races_even_once_the_host_saw_the_other_work(
        b, saxpy):
    """Behind a host function that has not returned the launch cannot run early: the verdict
    is then the synchronisation's, and the one a declared launch gets -- the memset on s2
    races with the launch queued before it on s1, even when s2 is synchronised first."""
    x, y = _buffers(b)
    s1, s2 = _streams(b)
    go = threading.Event()
    b.launch_host_func(s1, lambda: go.wait(30))
    _saxpy(b, saxpy, x, y, s1)
    b.memset_d32_async(y + 4 * 10, 0, 1, s2)  # the launch is held back: judged later
    b.stream_synchronize(s2)  # the host sees the memset complete; the kernel has not run
    go.set()
    with pytest.raises(StreamOrderError, match=r"kernel saxpy.*races with cuMemsetD32Async"):
        b.stream_synchronize(s1)


def test_racecheck_warn_warns_at_the_call_that_races(b, saxpy):
    b.sched.racecheck = "warn"
    x, y = _buffers(b)
    s1, s2 = _streams(b)
    _saxpy(b, saxpy, x, y, s1)
    with pytest.warns(RuntimeWarning, match="unordered access.*kernel saxpy"):
        _saxpy(b, saxpy, x, y, s2)
    b.ctx_synchronize()
    assert (download(b, y, N, np.float32) == 4).all()  # both ran

def test_racecheck_off_reports_nothing(saxpy, b):
    b.sched.racecheck = "0"
    x, y = _buffers(b)
    s1, s2 = _streams(b)
    _saxpy(b, saxpy, x, y, s1)
    _saxpy(b, saxpy, x, y, s2)
    b.ctx_synchronize()
    assert b.sched.reporting == {}



def test_a_captured_launch_replayed_on_two_streams_races(b, saxpy):
    """A graph replays the launch as it was queued: it still reports what it touched."""
    x, y = _buffers(b)
    s1, s2 = _streams(b)
    cap = b.stream_create(non_blocking=True)
    b.stream_begin_capture(cap)
    _saxpy(b, saxpy, x, y, cap)
    graph = b.stream_end_capture(cap)
    one, two = b.graph_instantiate(graph), b.graph_instantiate(graph)
    b.graph_launch(one, s1)
    b.graph_launch(one, s2)  # launches of one executable graph are ordered
    b.ctx_synchronize()
    b.graph_launch(one, s1)
    with pytest.raises(StreamOrderError, match="kernel saxpy"):
        b.graph_launch(two, s2)  # another instance: the same bytes, unordered with s1's replay

_STANDIN_CHILD = """
import ctypes
from cuda.bindings import driver as d
from gpuarray_sim.standin import _serve
from gpuarray.errors import StreamOrderError

def chk(r, want=d.CUresult.CUDA_SUCCESS):
    err = r[0] if isinstance(r, tuple) else r
    assert err == want, (err, want)
    return r[1] if isinstance(r, tuple) and len(r) == 2 else r

chk(d.cuInit(0))
dev = chk(d.cuDeviceGet(0))
ctx = chk(d.cuDevicePrimaryCtxRetain(dev))
chk(d.cuCtxSetCurrent(ctx))
mod = chk(d.cuModuleLoadData(open(PTX_PATH, "rb").read() + b"\\0"))
f = chk(d.cuModuleGetFunction(mod, b"saxpy"))
x = chk(d.cuMemAlloc(4 * 256))
y = chk(d.cuMemAlloc(4 * 512))
chk(d.cuMemsetD32(x, 0, 256))
chk(d.cuMemsetD32(y, 0, 512))
chk(d.cuCtxSynchronize())  # the memsets ran on the legacy stream
s1 = chk(d.cuStreamCreate(1))
s2 = chk(d.cuStreamCreate(1))

def saxpy(yy, s):
    a, px, py, n = ctypes.c_float(2.0), ctypes.c_uint64(int(x)), ctypes.c_uint64(yy), ctypes.c_int32(256)
    ptrs = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in (a, px, py, n)])
    chk(d.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, s, ctypes.addressof(ptrs), 0))

saxpy(int(y), s1)
saxpy(int(y) + 4 * 256, s2)  # disjoint
chk(d.cuCtxSynchronize())
saxpy(int(y), s1)
a, px, py, n = ctypes.c_float(2.0), ctypes.c_uint64(int(x)), ctypes.c_uint64(int(y) + 4 * 128), ctypes.c_int32(256)
ptrs = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in (a, px, py, n)])
chk(d.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, s2, ctypes.addressof(ptrs), 0),
    d.CUresult.CUDA_ERROR_UNKNOWN)  # overlapping, unordered: refused by the launch that races
err = _serve.last_error()
assert isinstance(err, StreamOrderError) and "saxpy" in str(err), repr(err)
print("OK")
"""


def test_overlapping_launches_over_the_standin_driver_race(folder):  # noqa: F811
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not "
                                                        "installed")
    from sim.tests.ptx.support import FIXTURES

    code = f"PTX_PATH = {str(FIXTURES / 'saxpy.ptx')!r}\n" + _STANDIN_CHILD
    ok(run(folder, code))


def test_sticky_launch_fault_leaves_nothing_outstanding(b, saxpy):
    x, y = _buffers(b)
    s1 = b.stream_create(non_blocking=True)
    _saxpy(b, saxpy, x, y + 4 * 4 * N, s1)  # past the end of y: 700 at the sync
    with pytest.raises(Exception, match="ILLEGAL_ADDRESS|700"):
        b.ctx_synchronize()
    assert b.sched.reporting == {}
