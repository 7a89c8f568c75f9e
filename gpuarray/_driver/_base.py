"""The driver interface: the only door to CUDA.

Everything gpuarray asks of CUDA goes through one :class:`Backend` object.  Two
implementations exist: ``cuda`` (cuda.bindings driver API + NVRTC, in
``gpuarray/_driver/cuda/``) and ``sim`` (the CPU simulator, the distribution
``gpuarray-sim``, found by :mod:`gpuarray._driver`'s entry point).  Upper
layers never import cuda.bindings.

Conventions shared by both implementations
------------------------------------------
- Handles (contexts, streams, events, modules, functions) and pointers are
  plain Python ``int``.  Device pointers are ``CUdeviceptr`` values; host
  pointers are process addresses (``ndarray.ctypes.data``).
- Stream handle ``0`` and ``1`` (``CU_STREAM_LEGACY``) both mean the legacy
  default stream of the *current* context; ``2`` (``CU_STREAM_PER_THREAD``)
  means the calling thread's per-thread default stream of the current context.
- Every failure raises :class:`gpuarray.errors.CudaError` (out-of-memory:
  :class:`gpuarray.errors.CudaOutOfMemoryError`) whose ``call`` is the CUDA
  driver function's name, e.g. ``"cuMemAlloc"``.  Errors of asynchronous work
  may surface at a later call, as on a GPU.  Device faults (illegal or
  misaligned address, launch failure, ...) are sticky: every later call in
  the faulting context fails with the same code until
  :meth:`Backend.primary_ctx_reset`.  Errors of release calls made by
  finalizers are remembered by :mod:`gpuarray._driver._finalize` and raised
  by the next gpuarray call.
- Nothing initialises CUDA at import.  :meth:`Backend.init` is idempotent and
  is called by the device layer on first use.
- Calls that act "on the current context" need one to be current on the
  calling thread (:meth:`Backend.ctx_set_current`); otherwise
  ``CUDA_ERROR_INVALID_CONTEXT``.
- Kernel parameters are a sequence of ctypes objects (``ctypes.c_uint64`` for
  device pointers, ``ctypes.c_int64``/``c_int32``/``c_double``..., or a
  ``ctypes.Structure`` passed by value).  The real backend passes their
  addresses to ``cuLaunchKernel``; the simulator hands the same objects to its
  own implementation of the kernel.
- :attr:`Backend.kernel_images` says what the backend executes of a module
  image, so the kernels layer builds what will run (a cubin, PTX, or an image
  that is only checked) without testing the backend's name.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

# CAI / driver stream handle encodings.
STREAM_LEGACY = 1
STREAM_PER_THREAD = 2

# CUmemorytype values.
MEMORYTYPE_HOST = 1
MEMORYTYPE_DEVICE = 2
MEMORYTYPE_ARRAY = 3
MEMORYTYPE_UNIFIED = 4

#: The answers of :attr:`Backend.kernel_images`.
KERNEL_IMAGES = ("cubin", "ptx", "checked", "none")

#: Stream capture modes (``CUstreamCaptureMode``: 0, 1, 2).
CAPTURE_MODES = ("global", "thread_local", "relaxed")
#: Stream capture statuses (``CUstreamCaptureStatus``: 0, 1, 2).
CAPTURE_STATUSES = ("none", "active", "invalidated")

#: Device attribute names accepted by :meth:`Backend.device_attribute`
#: (mapped to ``CU_DEVICE_ATTRIBUTE_*`` by the real backend).
DEVICE_ATTRIBUTES = (
    "compute_capability_major",
    "compute_capability_minor",
    "multiprocessor_count",
    "max_threads_per_block",
    "max_shared_memory_per_block",
    "warp_size",
    "l2_cache_size",
    "unified_addressing",
    "can_map_host_memory",
    "memory_pools_supported",
    "pci_bus_id",
    "pci_device_id",
    "max_grid_dim_x",
    "max_grid_dim_y",
    "max_grid_dim_z",
    "concurrent_managed_access",
    "integrated",
)


@dataclasses.dataclass(frozen=True)
class PointerInfo:
    """What the driver knows of an address (``cuPointerGetAttributes``).

    Attributes
    ----------
    memory_type : int
        ``MEMORYTYPE_HOST`` (pinned/registered/mapped host memory),
        ``MEMORYTYPE_DEVICE``, or ``0`` when the driver does not know the
        address (ordinary pageable host memory).
    device_ordinal : int
        The device the memory belongs to (``-1`` when unknown).
    base : int
        Start of the allocation containing the address (0 when unknown).
    size : int
        Size of that allocation in bytes (0 when unknown).
    is_managed : bool
        True for managed (unified) memory.
    mapped : bool
        Whether the address is backed by memory now
        (``CU_POINTER_ATTRIBUTE_MAPPED``): False for graph memory whose graph
        has not been launched yet (its address is reserved, nothing is
        mapped there until the allocation node runs).
    """

    memory_type: int
    device_ordinal: int
    base: int
    size: int
    is_managed: bool = False
    mapped: bool = True


class Backend(abc.ABC):
    """Abstract driver backend.  See the module docstring for conventions."""

    #: ``"cuda"`` or ``"sim"``.
    name: str = ""
    @property
    def kernel_images(self) -> str:
        """What the backend executes of the module images gpuarray loads (:data:`KERNEL_IMAGES`).

        ``"cubin"`` (a GPU: the image built for the device), ``"ptx"`` (the
        PTX a GPU build makes), ``"checked"`` (its own implementation of each
        gpuarray kernel symbol: the image is compiled only so that a kernel
        that does not compile fails), ``"none"`` (its own implementation, and
        no image at all: a placeholder is loaded).
        """
        return "cubin"

    def __setattr__(self, name: str, value: Any) -> None:
        # A driver call replaced on the instance (tests, the benchmarks' meters): the
        # capture checkpoint in front of this backend (``_checkpoint.py``) hands it out.
        object.__setattr__(self, name, value)
        if not name.startswith("_"):
            cp = self.__dict__.get("_checkpoint")
            if cp is not None:
                cp.reinstall()

    def __delattr__(self, name: str) -> None:
        object.__delattr__(self, name)
        if not name.startswith("_"):
            cp = self.__dict__.get("_checkpoint")
            if cp is not None:
                cp.reinstall()

    # ---------------------------------------------------------------- init
    @abc.abstractmethod
    def init(self) -> None:
        """Initialise the driver (``cuInit``); idempotent.

        Raises ``CudaUnavailableError`` when there is no driver or no device.
        """

    @abc.abstractmethod
    def driver_version(self) -> int:
        """``cuDriverGetVersion``, e.g. ``12080``."""

    # -------------------------------------------------------------- devices
    @abc.abstractmethod
    def device_count(self) -> int: ...

    @abc.abstractmethod
    def device_name(self, ordinal: int) -> str: ...

    @abc.abstractmethod
    def device_attribute(self, attr: str, ordinal: int) -> int:
        """One of :data:`DEVICE_ATTRIBUTES`; ``ValueError`` for another name."""

    @abc.abstractmethod
    def device_total_memory(self, ordinal: int) -> int: ...

    @abc.abstractmethod
    def device_uuid(self, ordinal: int) -> bytes:
        """16 bytes."""

    @abc.abstractmethod
    def device_can_access_peer(self, ordinal: int, peer: int) -> bool: ...

    # ------------------------------------------------------------- contexts
    @abc.abstractmethod
    def primary_ctx_retain(self, ordinal: int) -> int:
        """Retain the device's primary context and return its handle."""

    @abc.abstractmethod
    def primary_ctx_release(self, ordinal: int) -> None:
        """Release a reference; releasing the last one resets the context (as CUDA documents)."""

    @abc.abstractmethod
    def primary_ctx_reset(self, ordinal: int) -> None:
        """``cuDevicePrimaryCtxReset``: destroy every allocation, stream, event and module
        of the device's primary context, and clear a sticky error (the context stays
        retained)."""

    @abc.abstractmethod
    def ctx_set_current(self, ctx: int) -> None:
        """Make ``ctx`` current on the calling thread (0: none)."""

    @abc.abstractmethod
    def ctx_get_current(self) -> int:
        """The calling thread's current context handle, 0 when none."""

    @abc.abstractmethod
    def ctx_get_device(self) -> int:
        """Ordinal of the current context's device."""

    @abc.abstractmethod
    def ctx_synchronize(self) -> None:
        """Wait for all work of the current context."""

    @abc.abstractmethod
    def ctx_enable_peer_access(self, peer_ctx: int) -> None:
        """Let the current context's kernels access ``peer_ctx``'s memory."""

    @abc.abstractmethod
    def profiler_start(self) -> None:
        """``cuProfilerStart``: enable profile collection for the current context.

        Needs a current context (``CUDA_ERROR_INVALID_CONTEXT`` otherwise);
        no effect when collection is already enabled.
        """

    @abc.abstractmethod
    def profiler_stop(self) -> None:
        """``cuProfilerStop``: disable profile collection for the current context.

        Needs a current context (``CUDA_ERROR_INVALID_CONTEXT`` otherwise);
        no effect when collection is already disabled.
        """

    # --------------------------------------------------------------- memory
    @abc.abstractmethod
    def mem_alloc(self, nbytes: int) -> int:
        """``cuMemAlloc`` on the current context; ``nbytes`` > 0."""

    @abc.abstractmethod
    def mem_alloc_relaxed(self, nbytes: int) -> int:
        """``cuMemAlloc`` in relaxed capture mode: it never invalidates a capture.

        The calling thread's capture mode is set to ``"relaxed"`` around the
        allocation and restored after (``cuThreadExchangeStreamCaptureMode``),
        so no capture in progress on any thread -- another library's global
        capture included -- refuses it.  The default manager allocates every
        array this way, so each backend makes the three calls its own fastest
        way (the checkpoint's relaxed blocks switch for every other call).
        """

    @abc.abstractmethod
    def mem_free(self, ptr: int) -> None:
        """``cuMemFree`` (implicitly waits for the device's pending work)."""

    @abc.abstractmethod
    def mem_alloc_async(self, nbytes: int, stream: int) -> int:
        """``cuMemAllocAsync`` from the device's default memory pool."""

    @abc.abstractmethod
    def mem_free_async(self, ptr: int, stream: int) -> None: ...

    @abc.abstractmethod
    def mempool_set_release_threshold(self, ordinal: int, nbytes: int) -> None:
        """Set the device default pool's ``CU_MEMPOOL_ATTR_RELEASE_THRESHOLD``."""

    @abc.abstractmethod
    def mem_get_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of the current context's device."""

    @abc.abstractmethod
    def mem_host_alloc(self, nbytes: int, mapped: bool = False, portable: bool = False,
                       write_combined: bool = False) -> int:
        """Page-locked host memory (``cuMemHostAlloc``); returns a host address."""

    @abc.abstractmethod
    def mem_free_host(self, ptr: int) -> None: ...

    @abc.abstractmethod
    def mem_host_register(self, ptr: int, nbytes: int, mapped: bool = False,
                          portable: bool = False) -> None:
        """Page-lock existing host memory (``cuMemHostRegister``)."""

    @abc.abstractmethod
    def mem_host_unregister(self, ptr: int) -> None: ...

    @abc.abstractmethod
    def mem_host_get_device_pointer(self, host_ptr: int) -> int:
        """Device address of mapped host memory."""

    @abc.abstractmethod
    def pointer_info(self, ptr: int) -> PointerInfo:
        """Attributes of ``ptr``; unknown (pageable) host memory gives memory_type 0."""

    # ----------------------------------------------------- copies and sets
    @abc.abstractmethod
    def memcpy_htod_async(self, dst: int, src_host: int, nbytes: int, stream: int) -> None: ...

    @abc.abstractmethod
    def memcpy_dtoh_async(self, dst_host: int, src: int, nbytes: int, stream: int) -> None: ...

    @abc.abstractmethod
    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None: ...

    @abc.abstractmethod
    def memcpy_2d_async(self, dst: int, dst_pitch: int, dst_is_device: bool,
                        src: int, src_pitch: int, src_is_device: bool,
                        width_bytes: int, height: int, stream: int) -> None:
        """``cuMemcpy2DAsync``: ``height`` rows of ``width_bytes`` bytes each."""

    @abc.abstractmethod
    def memset_d8_async(self, dst: int, value: int, count: int, stream: int) -> None: ...

    @abc.abstractmethod
    def memset_d16_async(self, dst: int, value: int, count: int, stream: int) -> None: ...

    @abc.abstractmethod
    def memset_d32_async(self, dst: int, value: int, count: int, stream: int) -> None: ...

    # -------------------------------------------------------------- streams
    @abc.abstractmethod
    def stream_create(self, non_blocking: bool = False, priority: int = 0) -> int: ...

    @abc.abstractmethod
    def stream_destroy(self, stream: int) -> None: ...

    @abc.abstractmethod
    def stream_query(self, stream: int) -> bool:
        """True when all work on the stream has completed."""

    @abc.abstractmethod
    def stream_synchronize(self, stream: int) -> None: ...

    @abc.abstractmethod
    def stream_wait_event(self, stream: int, event: int, external: bool = False) -> None:
        """``cuStreamWaitEvent``: later work on ``stream`` waits for ``event``'s last record.

        ``external`` passes ``CU_EVENT_WAIT_EXTERNAL``: in a capturing stream
        the wait becomes an event-wait node that waits, at each launch, for
        the event's record at that time (the legal way to wait on work that
        is not part of the capture).
        """

    @abc.abstractmethod
    def stream_get_ctx(self, stream: int) -> int:
        """The context a stream belongs to."""

    # ------------------------------------------------- capture and graphs
    # Modes and statuses are strings: ``CAPTURE_MODES`` and ``CAPTURE_STATUSES``.
    @abc.abstractmethod
    def stream_begin_capture(self, stream: int, mode: str = "global") -> None:
        """``cuStreamBeginCapture_v2``: record the work queued on ``stream`` into a graph.

        ``mode`` is one of :data:`CAPTURE_MODES`.  Refused on the legacy
        stream and on a stream already capturing (``CUDA_ERROR_INVALID_VALUE``).
        """

    @abc.abstractmethod
    def stream_end_capture(self, stream: int) -> int:
        """``cuStreamEndCapture``: end the capture begun on ``stream``; return the graph handle.

        An invalidated capture ends with ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED``
        (901), one with a fork not joined back with ``..._UNJOINED`` (904),
        both taking the streams out of capture; a non-relaxed capture ended
        on another thread than the one that began it fails with
        ``..._WRONG_THREAD`` (908) and stays active.
        """

    @abc.abstractmethod
    def stream_is_capturing(self, stream: int) -> str:
        """``cuStreamIsCapturing``: one of :data:`CAPTURE_STATUSES`.

        On the legacy stream while a blocking stream of its context captures:
        ``CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`` (906), without invalidating it.
        """

    @abc.abstractmethod
    def stream_capture_info(self, stream: int) -> tuple[str, int]:
        """``cuStreamGetCaptureInfo``: ``(status, capture id)`` (id 0 when not active)."""

    @abc.abstractmethod
    def exchange_capture_mode(self, mode: str) -> str:
        """``cuThreadExchangeStreamCaptureMode``: set the calling thread's mode, return the previous.

        The thread's mode decides which "potentially unsafe" calls
        (``cuMemAlloc``, ``cuMemFree``, ...) it may make while captures are in
        progress: ``"global"`` (the default) none while any global-mode capture
        runs anywhere or a non-relaxed one on this thread, ``"thread_local"``
        none while a non-relaxed capture runs on this thread, ``"relaxed"``
        all of them.
        """

    @abc.abstractmethod
    def graph_instantiate(self, graph: int, auto_free_on_launch: bool = True) -> int:
        """``cuGraphInstantiateWithFlags``: an executable graph (``CUgraphExec``) of ``graph``.

        ``auto_free_on_launch`` passes ``CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH``:
        each launch first frees the graph allocations a previous launch left
        unfreed (otherwise such a launch fails with ``CUDA_ERROR_INVALID_VALUE``).
        """

    @abc.abstractmethod
    def graph_launch(self, graph_exec: int, stream: int) -> None:
        """``cuGraphLaunch``: queue one run of the executable graph on ``stream``."""

    @abc.abstractmethod
    def graph_upload(self, graph_exec: int, stream: int) -> None:
        """``cuGraphUpload``: prepare the executable graph's launch on ``stream`` (stream work)."""

    @abc.abstractmethod
    def graph_exec_destroy(self, graph_exec: int) -> None:
        """``cuGraphExecDestroy`` (a launch in flight still completes)."""

    @abc.abstractmethod
    def graph_destroy(self, graph: int) -> None:
        """``cuGraphDestroy`` (executable graphs made from it stay valid)."""

    # --------------------------------------------------------------- events
    @abc.abstractmethod
    def event_create(self, timing: bool = True, interprocess: bool = False) -> int: ...

    @abc.abstractmethod
    def event_destroy(self, event: int) -> None: ...

    @abc.abstractmethod
    def event_record(self, event: int, stream: int) -> None: ...

    @abc.abstractmethod
    def event_query(self, event: int) -> bool: ...

    @abc.abstractmethod
    def event_synchronize(self, event: int) -> None: ...

    @abc.abstractmethod
    def event_elapsed_time(self, start: int, end: int) -> float:
        """Milliseconds between two completed timing events."""

    # -------------------------------------------------- modules and launches
    @abc.abstractmethod
    def module_load_data(self, image: bytes) -> int:
        """Load a CUBIN or NUL-terminated PTX image into the current context."""

    @abc.abstractmethod
    def module_unload(self, module: int) -> None: ...

    @abc.abstractmethod
    def module_get_function(self, module: int, name: str) -> int: ...

    @abc.abstractmethod
    def launch_kernel(self, func: int, grid: tuple[int, int, int], block: tuple[int, int, int],
                      shared_mem: int, stream: int, params: Sequence[Any]) -> None: ...

    # ------------------------------------------------------------------ IPC
    @abc.abstractmethod
    def ipc_get_mem_handle(self, ptr: int) -> bytes:
        """64 opaque bytes naming the allocation that starts at ``ptr``."""

    @abc.abstractmethod
    def ipc_open_mem_handle(self, handle: bytes) -> int:
        """Map another process's allocation into the current context."""

    @abc.abstractmethod
    def ipc_close_mem_handle(self, ptr: int) -> None: ...

    # ------------------------------------------ managed memory, host callbacks
    @abc.abstractmethod
    def mem_alloc_managed(self, nbytes: int, attach_global: bool = True) -> int:
        """``cuMemAllocManaged`` on the current context; ``nbytes`` > 0.

        The address is valid on the host and on every device (unified
        memory); :meth:`pointer_info` reports it ``is_managed``.  Free it with
        :meth:`mem_free`.  ``attach_global=False`` attaches it to the host
        (``CU_MEM_ATTACH_HOST``) instead of every stream
        (``CU_MEM_ATTACH_GLOBAL``).
        """

    @abc.abstractmethod
    def stream_add_callback(self, stream: int, fn: Callable[[int], None]) -> None:
        """Call ``fn(status)`` on a driver thread once the stream's earlier work is done.

        ``cuStreamAddCallback``: ``status`` is 0, or the CUDA error code of
        the context when earlier work failed.  The callback blocks later
        work on the stream until it returns; it must not call CUDA.  An
        exception it raises is reported as unraisable, never lost silently.
        Not on a capturing stream: CUDA refuses it there
        (``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED``, the capture invalidated).
        """

    @abc.abstractmethod
    def launch_host_func(self, stream: int, fn: Callable[[], None]) -> None:
        """Call ``fn()`` on a driver thread once the stream's earlier work is done.

        ``cuLaunchHostFunc``: as :meth:`stream_add_callback`, but ``fn`` is
        not called at all when earlier work failed, and it may be captured:
        on a capturing stream it becomes a host node, which every launch of
        the graph calls.  The caller keeps ``fn`` alive as long as the driver
        may call it (a host node: as long as its graph); the driver holds it
        weakly.
        """
