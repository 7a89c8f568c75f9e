"""The kinds of driver call: what CUDA's stream-capture rules make of each.

One concern: the declaration, next to nothing else, of every method of the
driver interface (``_base.Backend``) with its kind -- from ``cuda.h`` and the
CUDA programming guide's "Prohibited and Unhandled Operations" -- and what
the capture checkpoint (``_checkpoint.py``) does with each kind.  The testing
guide's tables are checked against these by ``tests/capture/test_capture_checkpoint.py``,
which also fails for an interface method with no declared kind.
"""

from __future__ import annotations

# The kinds of driver call, and what the checkpoint does with each (the
# testing guide's table is checked against this by tests/capture/test_capture_checkpoint.py).
QUERY = "query"
OBJECT = "object"
UNSAFE = "unsafe"
RELAXED = "relaxed"
FREE = "free"
STREAM = "stream"
STREAM_FREE = "stream-free"
HOST_COPY = "host-copy"
RECORD = "record"
WAIT = "wait"
STREAM_SYNC = "stream-sync"
DEVICE_SYNC = "device-sync"
EVENT_SYNC = "event-sync"
GRAPH_LAUNCH = "graph-launch"
CALLBACK = "callback"
CAPTURE = "capture"

#: What the checkpoint does with each kind of call.
RULES: dict[str, str] = {
    QUERY: "thread-local state or a pure query: let through",
    OBJECT: "creates or destroys an object no capture refers to (context, stream, event, "
            "graph): let through",
    UNSAFE: "\"potentially unsafe\": made with the thread in relaxed capture mode",
    RELAXED: "potentially unsafe, relaxed by its own implementation: let through",
    FREE: "potentially unsafe release: relaxed; deferred while a capture of gpuarray's is "
          "in progress (made when the last one ends)",
    STREAM: "stream-ordered work: StreamCaptureError on the legacy stream while a blocking "
            "stream captures",
    STREAM_FREE: "stream-ordered free: as stream, but on the legacy stream while a blocking "
                 "stream captures it is deferred until the legacy stream is usable",
    HOST_COPY: "stream-ordered copy touching host memory: as stream, and StreamCaptureError "
               "on a capturing stream when the host memory is pageable",
    RECORD: "event record: as stream; remembers whether the event was recorded in a capture",
    WAIT: "stream waits for an event: as stream; a capturing stream waits with "
          "CU_EVENT_WAIT_EXTERNAL for work outside its capture; StreamCaptureError when "
          "the event was recorded in a capture the stream is not part of",
    STREAM_SYNC: "host waits for a stream: StreamCaptureError when it captures, or on the "
                 "legacy stream while a blocking stream captures",
    DEVICE_SYNC: "host waits for the device: StreamCaptureError while any capture known to "
                 "gpuarray runs in the context",
    EVENT_SYNC: "host query of an event: StreamCaptureError when it was last recorded in a "
                "capture",
    GRAPH_LAUNCH: "launch of an executable graph: as stream, and StreamCaptureError into a "
                  "capturing stream",
    CALLBACK: "cuStreamAddCallback: as stream, and StreamCaptureError on a capturing stream "
              "(CUDA does not support it in a capture)",
    CAPTURE: "begins or ends a capture: the checkpoint's record of gpuarray's captures",
}

#: The kind and the CUDA driver function of every method of the driver interface.
KINDS: dict[str, tuple[str, str]] = {
    "init": (QUERY, "cuInit"),
    "driver_version": (QUERY, "cuDriverGetVersion"),
    "device_count": (QUERY, "cuDeviceGetCount"),
    "device_name": (QUERY, "cuDeviceGetName"),
    "device_attribute": (QUERY, "cuDeviceGetAttribute"),
    "device_total_memory": (QUERY, "cuDeviceTotalMem"),
    "device_uuid": (QUERY, "cuDeviceGetUuid"),
    "device_can_access_peer": (QUERY, "cuDeviceCanAccessPeer"),
    "primary_ctx_retain": (OBJECT, "cuDevicePrimaryCtxRetain"),
    "primary_ctx_release": (OBJECT, "cuDevicePrimaryCtxRelease"),
    "primary_ctx_reset": (OBJECT, "cuDevicePrimaryCtxReset"),
    "ctx_set_current": (QUERY, "cuCtxSetCurrent"),
    "ctx_get_current": (QUERY, "cuCtxGetCurrent"),
    "ctx_get_device": (QUERY, "cuCtxGetDevice"),
    "ctx_synchronize": (DEVICE_SYNC, "cuCtxSynchronize"),
    "ctx_enable_peer_access": (OBJECT, "cuCtxEnablePeerAccess"),
    "profiler_start": (QUERY, "cuProfilerStart"),
    "profiler_stop": (QUERY, "cuProfilerStop"),
    "mem_alloc": (UNSAFE, "cuMemAlloc"),
    "mem_alloc_relaxed": (RELAXED, "cuMemAlloc"),
    "mem_free": (FREE, "cuMemFree"),
    "mem_alloc_async": (STREAM, "cuMemAllocAsync"),
    "mem_free_async": (STREAM_FREE, "cuMemFreeAsync"),
    "mempool_set_release_threshold": (UNSAFE, "cuMemPoolSetAttribute"),
    "mem_get_info": (QUERY, "cuMemGetInfo"),
    "mem_host_alloc": (UNSAFE, "cuMemHostAlloc"),
    "mem_free_host": (FREE, "cuMemFreeHost"),
    "mem_host_register": (UNSAFE, "cuMemHostRegister"),
    "mem_host_unregister": (FREE, "cuMemHostUnregister"),
    "mem_host_get_device_pointer": (QUERY, "cuMemHostGetDevicePointer"),
    "pointer_info": (QUERY, "cuPointerGetAttributes"),
    "memcpy_htod_async": (HOST_COPY, "cuMemcpyHtoDAsync"),
    "memcpy_dtoh_async": (HOST_COPY, "cuMemcpyDtoHAsync"),
    "memcpy_dtod_async": (STREAM, "cuMemcpyDtoDAsync"),
    "memcpy_2d_async": (HOST_COPY, "cuMemcpy2DAsync"),
    "memset_d8_async": (STREAM, "cuMemsetD8Async"),
    "memset_d16_async": (STREAM, "cuMemsetD16Async"),
    "memset_d32_async": (STREAM, "cuMemsetD32Async"),
    "stream_create": (OBJECT, "cuStreamCreateWithPriority"),
    "stream_destroy": (OBJECT, "cuStreamDestroy"),
    "stream_query": (STREAM_SYNC, "cuStreamQuery"),
    "stream_synchronize": (STREAM_SYNC, "cuStreamSynchronize"),
    "stream_wait_event": (WAIT, "cuStreamWaitEvent"),
    "stream_get_ctx": (QUERY, "cuStreamGetCtx"),
    "stream_begin_capture": (CAPTURE, "cuStreamBeginCapture"),
    "stream_end_capture": (CAPTURE, "cuStreamEndCapture"),
    "stream_is_capturing": (QUERY, "cuStreamIsCapturing"),
    "stream_capture_info": (QUERY, "cuStreamGetCaptureInfo"),
    "exchange_capture_mode": (QUERY, "cuThreadExchangeStreamCaptureMode"),
    # potentially unsafe, as an H200 answered during a global capture (900), 2026-11-28
    "graph_instantiate": (UNSAFE, "cuGraphInstantiateWithFlags"),
    "graph_launch": (GRAPH_LAUNCH, "cuGraphLaunch"),
    "graph_upload": (STREAM, "cuGraphUpload"),
    "graph_exec_destroy": (FREE, "cuGraphExecDestroy"),
    "graph_destroy": (FREE, "cuGraphDestroy"),
    "event_create": (OBJECT, "cuEventCreate"),
    "event_destroy": (OBJECT, "cuEventDestroy"),
    "event_record": (RECORD, "cuEventRecord"),
    "event_query": (EVENT_SYNC, "cuEventQuery"),
    "event_synchronize": (EVENT_SYNC, "cuEventSynchronize"),
    "event_elapsed_time": (EVENT_SYNC, "cuEventElapsedTime"),
    "module_load_data": (UNSAFE, "cuModuleLoadData"),
    "module_unload": (FREE, "cuModuleUnload"),
    "module_get_function": (QUERY, "cuModuleGetFunction"),
    "launch_kernel": (STREAM, "cuLaunchKernel"),
    "ipc_get_mem_handle": (QUERY, "cuIpcGetMemHandle"),
    "ipc_open_mem_handle": (UNSAFE, "cuIpcOpenMemHandle"),
    "ipc_close_mem_handle": (FREE, "cuIpcCloseMemHandle"),
    "mem_alloc_managed": (UNSAFE, "cuMemAllocManaged"),
    "stream_add_callback": (CALLBACK, "cuStreamAddCallback"),
    "launch_host_func": (STREAM, "cuLaunchHostFunc"),
}
