"""Host functions of simulated streams: where they run, and what they may not do.

One concern: the rule ``cuStreamAddCallback`` documents -- "the callback
function must not make any CUDA API calls; attempting to use a CUDA API will
result in ``CUDA_ERROR_NOT_PERMITTED``".  The simulator calls every host
function through :func:`call_host_fn`, which marks the calling thread as
inside a host function; every public call of the simulator checks that mark
first (``_core._locked`` / ``_core._api``) and raises
``CudaError(NOT_PERMITTED, <CUDA call>, ...)``, whatever the thread.
``CALL_NAMES`` names the CUDA driver function of each call of the driver
interface, for that error.

Host functions run on a driver thread of their context (:class:`Worker`),
never while the simulator's lock is held (``_stream_calls.py``), so other
threads' calls proceed while one runs, as on CUDA.
"""

from __future__ import annotations

import collections
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from gpuarray.errors import CudaError

from . import _signals
from ._codes import NOT_PERMITTED

#: The CUDA driver function of each call of the driver interface (``_base.Backend``).
CALL_NAMES: dict[str, str] = {
    "init": "cuInit",
    "driver_version": "cuDriverGetVersion",
    "device_count": "cuDeviceGetCount",
    "device_name": "cuDeviceGetName",
    "device_attribute": "cuDeviceGetAttribute",
    "device_total_memory": "cuDeviceTotalMem",
    "device_uuid": "cuDeviceGetUuid",
    "device_can_access_peer": "cuDeviceCanAccessPeer",
    "primary_ctx_retain": "cuDevicePrimaryCtxRetain",
    "primary_ctx_release": "cuDevicePrimaryCtxRelease",
    "primary_ctx_reset": "cuDevicePrimaryCtxReset",
    "ctx_set_current": "cuCtxSetCurrent",
    "ctx_get_current": "cuCtxGetCurrent",
    "ctx_get_device": "cuCtxGetDevice",
    "ctx_synchronize": "cuCtxSynchronize",
    "ctx_enable_peer_access": "cuCtxEnablePeerAccess",
    "profiler_start": "cuProfilerStart",
    "profiler_stop": "cuProfilerStop",
    "mem_alloc": "cuMemAlloc",
    "mem_free": "cuMemFree",
    "mem_alloc_async": "cuMemAllocAsync",
    "mem_free_async": "cuMemFreeAsync",
    "mempool_set_release_threshold": "cuMemPoolSetAttribute",
    "mem_get_info": "cuMemGetInfo",
    "mem_host_alloc": "cuMemHostAlloc",
    "mem_free_host": "cuMemFreeHost",
    "mem_host_register": "cuMemHostRegister",
    "mem_host_unregister": "cuMemHostUnregister",
    "mem_host_get_device_pointer": "cuMemHostGetDevicePointer",
    "pointer_info": "cuPointerGetAttributes",
    "memcpy_htod_async": "cuMemcpyHtoDAsync",
    "memcpy_dtoh_async": "cuMemcpyDtoHAsync",
    "memcpy_dtod_async": "cuMemcpyDtoDAsync",
    "memcpy_2d_async": "cuMemcpy2DAsync",
    "memset_d8_async": "cuMemsetD8Async",
    "memset_d16_async": "cuMemsetD16Async",
    "memset_d32_async": "cuMemsetD32Async",
    "stream_create": "cuStreamCreate",
    "stream_destroy": "cuStreamDestroy",
    "stream_query": "cuStreamQuery",
    "stream_synchronize": "cuStreamSynchronize",
    "stream_wait_event": "cuStreamWaitEvent",
    "stream_get_ctx": "cuStreamGetCtx",
    "event_create": "cuEventCreate",
    "event_destroy": "cuEventDestroy",
    "event_record": "cuEventRecord",
    "event_query": "cuEventQuery",
    "event_synchronize": "cuEventSynchronize",
    "event_elapsed_time": "cuEventElapsedTime",
    "module_load_data": "cuModuleLoadData",
    "module_unload": "cuModuleUnload",
    "module_get_function": "cuModuleGetFunction",
    "launch_kernel": "cuLaunchKernel",
    "ipc_get_mem_handle": "cuIpcGetMemHandle",
    "ipc_open_mem_handle": "cuIpcOpenMemHandle",
    "ipc_close_mem_handle": "cuIpcCloseMemHandle",
    "ipc_get_event_handle": "cuIpcGetEventHandle",
    "ipc_open_event_handle": "cuIpcOpenEventHandle",
    "mem_alloc_managed": "cuMemAllocManaged",
    "stream_add_callback": "cuStreamAddCallback",
    "stream_begin_capture": "cuStreamBeginCapture",
    "stream_end_capture": "cuStreamEndCapture",
    "stream_is_capturing": "cuStreamIsCapturing",
    "stream_capture_info": "cuStreamGetCaptureInfo",
    "exchange_capture_mode": "cuThreadExchangeStreamCaptureMode",
    "graph_instantiate": "cuGraphInstantiateWithFlags",
    "graph_launch": "cuGraphLaunch",
    "graph_upload": "cuGraphUpload",
    "graph_exec_destroy": "cuGraphExecDestroy",
    "graph_destroy": "cuGraphDestroy",
    "user_object_create": "cuUserObjectCreate",
    "user_object_retain": "cuUserObjectRetain",
    "user_object_release": "cuUserObjectRelease",
    "graph_retain_user_object": "cuGraphRetainUserObject",
    "graph_release_user_object": "cuGraphReleaseUserObject",
}


class _State(threading.local):
    #: Whether this thread is inside a host function now.
    active = False
    #: Whether this thread is queueing a host function (inside cuStreamAddCallback).
    adding = False


_state = _State()


def adding() -> bool:
    """Whether this thread is inside ``cuStreamAddCallback`` now.

    Only a garbage collection inside that call (a Python release of gpuarray
    memory: ``cuMemFree``) can make a driver call there.  Such a call must not
    wait for the host function being queued: its driver thread may not have
    it yet, and it touches no device memory.  (On CUDA no Python runs inside
    the driver, so the case cannot arise there.)
    """
    return _state.adding


def inside() -> bool:
    """Whether the calling thread is running a host function."""
    return _state.active


def refuse(call: str) -> None:
    """Raise CUDA's error for a driver call made from inside a host function."""
    raise CudaError(NOT_PERMITTED, call,
                    "(called from inside a stream callback: a stream callback must not call "
                    "CUDA, as cuStreamAddCallback and cuLaunchHostFunc document)")


def call_host_fn(fn: Callable[[int], Any], status: int) -> None:
    """Call ``fn(status)`` as CUDA's callback thread does: no driver call, no exception out."""
    before = _state.active
    _state.active = True
    try:
        fn(status)
    except Exception as e:  # CUDA cannot raise into the host: report, never lose
        _unraisable(e, fn)
    finally:
        _state.active = before


class Worker:
    """The driver thread of one context: its host functions, one at a time, in queue order.

    As CUDA's callback thread: thousands of callbacks cost one thread, not
    one each.  The thread (named ``gpuarray-sim-callback``) starts with the
    first item and ends when none is left, so nothing outlives the work.
    Items are taken in the order they were submitted, which is the order
    their host functions were queued (``cuStreamAddCallback`` submits under
    the simulator's lock): a host function only waits for work queued before
    it, so the earliest unfinished one can always run, and none deadlocks.
    """

    def __init__(self) -> None:
        self._items: collections.deque[Callable[[], None]] = collections.deque()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, item: Callable[[], None]) -> None:
        """Run ``item()`` on the driver thread after the items submitted before it."""
        with self._lock:
            self._items.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="gpuarray-sim-callback")
                self._thread.start()

    def _run(self) -> None:
        _signals.block_in_this_thread()  # the main thread takes them (see _signals.py)
        while True:
            with self._lock:
                if not self._items:
                    self._thread = None
                    return
                item = self._items.popleft()
            try:
                item()
            except Exception as e:  # a bug of the simulator: report it, keep the thread alive
                _unraisable(e, item)


def _unraisable(exc: BaseException, fn: Any) -> None:
    """Report an exception of a host callback as CPython reports one of a ctypes callback."""
    sys.unraisablehook(types.SimpleNamespace(
        exc_type=type(exc), exc_value=exc, exc_traceback=exc.__traceback__,
        err_msg="Exception ignored in a stream callback", object=fn))
