"""Exceptions raised by gpuarray.

Every driver failure becomes a :class:`CudaError` that carries the numeric
result code, its symbolic name and the driver call that failed, so callers can
test the type (or ``code``) rather than parse text.  All exceptions here are
picklable, so they cross process boundaries (IPC tests, multiprocessing).
"""

from __future__ import annotations

__all__ = [
    "CudaError",
    "CudaForkError",
    "CudaOutOfMemoryError",
    "CudaUnavailableError",
    "SimulatorNotInstalledError",
    "NvrtcError",
    "NvrtcVersionError",
    "StreamOrderError",
    "StreamCaptureError",
    "CUDA_ERROR_NAMES",
    "error_code",
]

#: Result codes of the CUDA driver API that gpuarray names itself (the real
#: backend takes names from cuda.bindings; the simulator uses this table).
CUDA_ERROR_NAMES: dict[int, str] = {
    0: "CUDA_SUCCESS",
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    4: "CUDA_ERROR_DEINITIALIZED",
    5: "CUDA_ERROR_PROFILER_DISABLED",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    200: "CUDA_ERROR_INVALID_IMAGE",
    201: "CUDA_ERROR_INVALID_CONTEXT",
    208: "CUDA_ERROR_ALREADY_MAPPED",
    209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
    218: "CUDA_ERROR_INVALID_PTX",
    222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    301: "CUDA_ERROR_FILE_NOT_FOUND",
    303: "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
    217: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
    400: "CUDA_ERROR_INVALID_HANDLE",
    500: "CUDA_ERROR_NOT_FOUND",
    600: "CUDA_ERROR_NOT_READY",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    704: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
    705: "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
    709: "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    710: "CUDA_ERROR_ASSERT",
    712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
    713: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
    714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
    715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    716: "CUDA_ERROR_MISALIGNED_ADDRESS",
    717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    718: "CUDA_ERROR_INVALID_PC",
    719: "CUDA_ERROR_LAUNCH_FAILED",
    800: "CUDA_ERROR_NOT_PERMITTED",
    801: "CUDA_ERROR_NOT_SUPPORTED",
    900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
    901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
    902: "CUDA_ERROR_STREAM_CAPTURE_MERGE",
    903: "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
    904: "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
    905: "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
    906: "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
    907: "CUDA_ERROR_CAPTURED_EVENT",
    908: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
    999: "CUDA_ERROR_UNKNOWN",
}

_DESCRIPTIONS: dict[str, str] = {
    "CUDA_ERROR_INVALID_VALUE": "invalid argument",
    "CUDA_ERROR_OUT_OF_MEMORY": "out of memory",
    "CUDA_ERROR_NOT_INITIALIZED": "initialization error",
    "CUDA_ERROR_NO_DEVICE": "no CUDA-capable device is detected",
    "CUDA_ERROR_INVALID_DEVICE": "invalid device ordinal",
    "CUDA_ERROR_INVALID_IMAGE": "device kernel image is invalid",
    "CUDA_ERROR_INVALID_CONTEXT": "invalid device context",
    "CUDA_ERROR_ALREADY_MAPPED": "resource already mapped",
    "CUDA_ERROR_INVALID_HANDLE": "invalid resource handle",
    "CUDA_ERROR_NOT_FOUND": "named symbol not found",
    "CUDA_ERROR_DEINITIALIZED": "driver shutting down",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "no kernel image is available for execution on the device",
    "CUDA_ERROR_INVALID_PTX": "a PTX JIT compilation failed",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "the provided PTX was compiled with an unsupported toolchain",
    "CUDA_ERROR_FILE_NOT_FOUND": "file not found",
    "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED": "peer access is already enabled",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "too many resources requested for launch",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED": "context is destroyed",
    "CUDA_ERROR_UNKNOWN": "unknown error",
    "CUDA_ERROR_NOT_READY": "device not ready",
    "CUDA_ERROR_ILLEGAL_ADDRESS": "an illegal memory access was encountered",
    "CUDA_ERROR_LAUNCH_FAILED": "unspecified launch failure",
    "CUDA_ERROR_MISALIGNED_ADDRESS": "misaligned address",
    "CUDA_ERROR_ASSERT": "device-side assert triggered",
    "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED": "peer access has not been enabled",
    "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED": "part or all of the requested memory range is already mapped",
    "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED": "pointer does not correspond to a registered memory region",
    "CUDA_ERROR_NOT_PERMITTED": "operation not permitted",
    "CUDA_ERROR_NOT_SUPPORTED": "operation not supported",
    "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED": "operation not permitted when stream is capturing",
    "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED": "operation failed due to a previous error during capture",
    "CUDA_ERROR_STREAM_CAPTURE_MERGE": "operation would result in a merge of separate capture sequences",
    "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED": "capture was not ended in the same stream as it began",
    "CUDA_ERROR_STREAM_CAPTURE_UNJOINED": "capturing stream has unjoined work",
    "CUDA_ERROR_STREAM_CAPTURE_ISOLATION": "dependency created on uncaptured work in another stream",
    "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT": "operation would make the legacy stream depend on a capturing blocking stream",
    "CUDA_ERROR_CAPTURED_EVENT": "operation not permitted on an event last recorded in a capturing stream",
    "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD": "attempt to terminate a thread-local capture sequence from another thread",
}


class CudaError(RuntimeError):
    """A CUDA driver call failed.

    Parameters
    ----------
    code : int
        The driver's result code (``CUresult``).
    call : str
        The name of the failing driver call, e.g. ``"cuMemAlloc"``.
    detail : str, optional
        What gpuarray was doing, e.g. ``"while allocating 2.0 GiB on device 0"``.
    name : str, optional
        Symbolic name of ``code``; looked up when omitted.

    Attributes
    ----------
    code : int
    name : str
    call : str
    detail : str

    Examples
    --------
    >>> err = CudaError(2, "cuMemAlloc", "while allocating 16 bytes")
    >>> str(err)
    'cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory) while allocating 16 bytes'
    """

    def __init__(self, code: int, call: str, detail: str = "", name: str | None = None) -> None:
        self.code = int(code)
        self.name = name or CUDA_ERROR_NAMES.get(self.code, f"CUDA_ERROR_{self.code}")
        self.call = call
        self.detail = detail
        desc = _DESCRIPTIONS.get(self.name)
        msg = f"{call} failed: {self.name}"
        if desc:
            msg += f" ({desc})"
        if detail:
            msg += f" {detail}"
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self.code, self.call, self.detail, self.name))


class CudaOutOfMemoryError(CudaError, MemoryError):
    """A device allocation failed for lack of memory.

    Subclass of both :class:`CudaError` and :class:`MemoryError`, so retry
    logic can test the type.

    Parameters
    ----------
    code : int
        The driver's result code (2, ``CUDA_ERROR_OUT_OF_MEMORY``).
    call : str
        The failing driver call.
    detail : str, optional
        What was being allocated, e.g. ``"while allocating 2.0 GiB on device 0"``.
    name : str, optional
        Symbolic name of ``code``.

    Examples
    --------
    >>> isinstance(CudaOutOfMemoryError(2, "cuMemAlloc"), MemoryError)
    True
    """


class CudaForkError(CudaError):
    """CUDA was used in a process forked after its parent had initialised CUDA.

    A CUDA driver cannot serve a child that ``os.fork()`` (or
    ``multiprocessing``'s ``fork`` start method, the default on Linux before
    Python 3.14) made after the parent initialised CUDA: every driver call
    there fails with ``CUDA_ERROR_NOT_INITIALIZED``.  gpuarray raises this
    subclass of :class:`CudaError` (``code`` 3) instead, on every backend.
    Start workers with the ``spawn`` or ``forkserver`` start method
    (``multiprocessing.get_context("spawn")``, or
    ``ProcessPoolExecutor(mp_context=...)``) and share device arrays with
    them through IPC handles (:meth:`DeviceNDArray.get_ipc_handle`) or by
    pickling them.  A child of a parent that never used CUDA is not affected.

    Parameters
    ----------
    call : str
        The driver call that failed in the child, e.g. ``"cuMemAlloc"``.
    parent_pid : int
        The pid of the parent that had initialised CUDA.
    detail : str, optional
        What gpuarray was doing.

    Attributes
    ----------
    parent_pid : int

    Examples
    --------
    >>> err = CudaForkError("cuMemAlloc", 1234)
    >>> err.code, "spawn" in str(err)
    (3, True)
    """

    def __init__(self, call: str, parent_pid: int, detail: str = "") -> None:
        self.parent_pid = int(parent_pid)
        why = (f"(this process was forked from process {self.parent_pid} after that process had "
               "initialised CUDA, and CUDA cannot be used in such a child: start worker processes "
               "with the 'spawn' or 'forkserver' start method, e.g. "
               "multiprocessing.get_context('spawn'), and pass device arrays to them as IPC "
               "handles (DeviceNDArray.get_ipc_handle()) or by pickling them)")
        super().__init__(3, call, f"{detail} {why}".strip(), name="CUDA_ERROR_NOT_INITIALIZED")
        self.detail = detail

    def __reduce__(self):
        return (type(self), (self.call, self.parent_pid, self.detail))


class CudaUnavailableError(RuntimeError):
    """The CUDA driver or a device is not available.

    Raised at the first CUDA use with ``GPUARRAY_BACKEND=cuda`` (the default)
    on a machine without a driver or device.  The message says how to run on
    the simulator instead (``GPUARRAY_BACKEND=sim``).

    Parameters
    ----------
    reason : str
        Why CUDA could not be used.

    Examples
    --------
    >>> "GPUARRAY_BACKEND=sim" in str(CudaUnavailableError("no driver"))
    True
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"CUDA is not available: {reason}. To run without a GPU, set the "
            "environment variable GPUARRAY_BACKEND=sim (the CPU simulator)."
        )

    def __reduce__(self):
        return (type(self), (self.reason,))


class SimulatorNotInstalledError(CudaUnavailableError):
    """``GPUARRAY_BACKEND=sim`` selects the simulator, and ``gpuarray-sim`` is not installed.

    The CPU simulator is a distribution of its own; the message names the
    extra that installs it, ``pip install "gpuarray[sim]"``.

    Parameters
    ----------
    reason : str, optional
        What is missing (default: the distribution is not installed).

    Examples
    --------
    >>> 'pip install "gpuarray[sim]"' in str(SimulatorNotInstalledError())
    True
    """

    def __init__(self, reason: str = "gpuarray-sim is not installed") -> None:
        self.reason = reason
        RuntimeError.__init__(
            self, f"GPUARRAY_BACKEND=sim selects the CPU simulator, but {reason}: "
            'pip install "gpuarray[sim]" (the distribution gpuarray-sim, same version)')


class NvrtcError(RuntimeError):
    """NVRTC failed to compile a kernel.

    Parameters
    ----------
    message : str
        The NVRTC result and what was being compiled.
    log : str
        The compiler log.
    options : sequence of str
        The options passed to NVRTC.
    source : str
        The source that failed; the exception message shows it numbered.

    Examples
    --------
    >>> e = NvrtcError("NVRTC_ERROR_COMPILATION", "error: x", ["-arch=sm_90"], "int x")
    >>> "   1 | int x" in str(e)
    True
    """

    def __init__(self, message: str, log: str = "", options=(), source: str = "") -> None:
        self.message = message
        self.log = log
        self.options = list(options)
        self.source = source
        numbered = "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), 1))
        super().__init__(
            f"{message}\noptions: {' '.join(self.options)}\nlog:\n{log}\nsource:\n{numbered}"
        )

    def __reduce__(self):
        return (type(self), (self.message, self.log, self.options, self.source))


#: The pip extra that brings the NVRTC of each CUDA major version.
_NVRTC_EXTRAS = {12: "cu12", 13: "cu13"}


class NvrtcVersionError(NvrtcError):
    """The NVRTC in use is newer than the CUDA driver.

    Code that NVRTC compiles is only guaranteed to load on a driver of at
    least its own CUDA major version, so gpuarray refuses to use an NVRTC
    whose major version is above the driver's (``driver_version // 1000``).
    The message names the package extra that brings a matching NVRTC.

    Parameters
    ----------
    nvrtc_version : tuple of int
        ``(major, minor)`` of NVRTC.
    driver_version : int
        The driver's CUDA version as ``cuDriverGetVersion`` reports it
        (``1000 * major + 10 * minor``, e.g. 12080 for 12.8).

    Attributes
    ----------
    nvrtc_version : tuple of int
    driver_version : int
    extra : str or None
        The extra to install (``"cu12"``), None when no extra matches the driver.

    Examples
    --------
    >>> e = NvrtcVersionError((13, 0), 12080)
    >>> 'pip install "gpuarray[cu12]"' in str(e)
    True
    """

    def __init__(self, nvrtc_version, driver_version: int) -> None:
        self.nvrtc_version = (int(nvrtc_version[0]), int(nvrtc_version[1]))
        self.driver_version = int(driver_version)
        major, minor = divmod(self.driver_version, 1000)
        self.extra = _NVRTC_EXTRAS.get(major)
        if self.extra is not None:
            fix = (f'Install the NVRTC of CUDA {major}: pip install "gpuarray[{self.extra}]" '
                   "(or update the driver)")
        else:
            fix = ("gpuarray supports CUDA 12 and 13 drivers: update the driver, then "
                   'install the matching extra, e.g. pip install "gpuarray[cu12]"')
        message = (f"NVRTC {self.nvrtc_version[0]}.{self.nvrtc_version[1]} is newer than the "
                   f"CUDA driver (driver version {self.driver_version}, CUDA {major}."
                   f"{minor // 10}): code it compiles is not guaranteed to load there. {fix}.")
        self.message = message
        self.log = ""
        self.options = []
        self.source = ""
        RuntimeError.__init__(self, message)

    def __reduce__(self):
        return (type(self), (self.nvrtc_version, self.driver_version))


class StreamOrderError(RuntimeError):
    """Two streams touched overlapping memory without ordering.

    Raised by the simulator's race detector when two operations on different
    streams access overlapping bytes, at least one of them writing, with no
    happens-before relation (event wait, legacy-stream implicit
    synchronisation or host synchronisation) between them.

    Parameters
    ----------
    message : str
        Names both operations, their streams and the byte range.

    Examples
    --------
    >>> issubclass(StreamOrderError, RuntimeError)
    True
    """

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.message,))


class StreamCaptureError(RuntimeError):
    """An operation that a stream capture forbids, refused before the driver saw it.

    While a stream captures a CUDA graph (:meth:`gpuarray.Stream.begin_capture`),
    CUDA refuses host synchronisation, pageable transfers and the legacy
    stream next to a capturing blocking stream, and a refused call
    *invalidates* the capture.  gpuarray checks first and raises this error
    instead, so the capture stays valid: it can still end and its graph
    launch.  The message names the operation, the capturing stream and what
    to do instead.

    Parameters
    ----------
    message : str
        Names the operation, the stream and the alternative.

    Examples
    --------
    >>> issubclass(StreamCaptureError, RuntimeError)
    True
    """

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.message,))


# Every other result code of cuda.h's CUresult (CUDA 13.0), so that the
# simulator and the stand-in driver name any code a driver may return
# (cuGetErrorName/cuGetErrorString answer for each; issue 38).  The
# descriptions are short paraphrases of cuda.h's documentation of each code.
CUDA_ERROR_NAMES.update({
    6: "CUDA_ERROR_PROFILER_NOT_INITIALIZED",
    7: "CUDA_ERROR_PROFILER_ALREADY_STARTED",
    8: "CUDA_ERROR_PROFILER_ALREADY_STOPPED",
    34: "CUDA_ERROR_STUB_LIBRARY",
    36: "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
    102: "CUDA_ERROR_DEVICE_NOT_LICENSED",
    202: "CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
    205: "CUDA_ERROR_MAP_FAILED",
    206: "CUDA_ERROR_UNMAP_FAILED",
    207: "CUDA_ERROR_ARRAY_IS_MAPPED",
    210: "CUDA_ERROR_ALREADY_ACQUIRED",
    211: "CUDA_ERROR_NOT_MAPPED",
    212: "CUDA_ERROR_NOT_MAPPED_AS_ARRAY",
    213: "CUDA_ERROR_NOT_MAPPED_AS_POINTER",
    214: "CUDA_ERROR_ECC_UNCORRECTABLE",
    215: "CUDA_ERROR_UNSUPPORTED_LIMIT",
    216: "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
    219: "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT",
    220: "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
    222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    223: "CUDA_ERROR_JIT_COMPILATION_DISABLED",
    224: "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
    225: "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC",
    226: "CUDA_ERROR_CONTAINED",
    300: "CUDA_ERROR_INVALID_SOURCE",
    302: "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    401: "CUDA_ERROR_ILLEGAL_STATE",
    402: "CUDA_ERROR_LOSSY_QUERY",
    702: "CUDA_ERROR_LAUNCH_TIMEOUT",
    703: "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING",
    708: "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
    711: "CUDA_ERROR_TOO_MANY_PEERS",
    720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
    721: "CUDA_ERROR_TENSOR_MEMORY_LEAK",
    802: "CUDA_ERROR_SYSTEM_NOT_READY",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    805: "CUDA_ERROR_MPS_CONNECTION_FAILED",
    806: "CUDA_ERROR_MPS_RPC_FAILURE",
    807: "CUDA_ERROR_MPS_SERVER_NOT_READY",
    808: "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED",
    809: "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED",
    810: "CUDA_ERROR_MPS_CLIENT_TERMINATED",
    811: "CUDA_ERROR_CDP_NOT_SUPPORTED",
    812: "CUDA_ERROR_CDP_VERSION_MISMATCH",
    909: "CUDA_ERROR_TIMEOUT",
    910: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
    911: "CUDA_ERROR_EXTERNAL_DEVICE",
    912: "CUDA_ERROR_INVALID_CLUSTER_SIZE",
    913: "CUDA_ERROR_FUNCTION_NOT_LOADED",
    914: "CUDA_ERROR_INVALID_RESOURCE_TYPE",
    915: "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
    916: "CUDA_ERROR_KEY_ROTATION",
})
_DESCRIPTIONS.update({
    "CUDA_SUCCESS": "no error",
    "CUDA_ERROR_PROFILER_DISABLED": "profiler disabled while using an external profiling tool",
    "CUDA_ERROR_PROFILER_NOT_INITIALIZED": "profiler not initialized: call cuProfilerInitialize() (deprecated)",
    "CUDA_ERROR_PROFILER_ALREADY_STARTED": "profiler already started (deprecated)",
    "CUDA_ERROR_PROFILER_ALREADY_STOPPED": "profiler already stopped (deprecated)",
    "CUDA_ERROR_STUB_LIBRARY": "CUDA driver is a stub library",
    "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER": "the call requires a newer CUDA driver",
    "CUDA_ERROR_DEVICE_UNAVAILABLE": "CUDA-capable device(s) is/are busy or unavailable",
    "CUDA_ERROR_DEVICE_NOT_LICENSED": "the Grid license is not applied",
    "CUDA_ERROR_CONTEXT_ALREADY_CURRENT": "context already current (deprecated)",
    "CUDA_ERROR_MAP_FAILED": "mapping of buffer object failed",
    "CUDA_ERROR_UNMAP_FAILED": "unmapping of buffer object failed",
    "CUDA_ERROR_ARRAY_IS_MAPPED": "array is mapped",
    "CUDA_ERROR_ALREADY_ACQUIRED": "resource already acquired",
    "CUDA_ERROR_NOT_MAPPED": "resource not mapped",
    "CUDA_ERROR_NOT_MAPPED_AS_ARRAY": "resource not mapped as array",
    "CUDA_ERROR_NOT_MAPPED_AS_POINTER": "resource not mapped as pointer",
    "CUDA_ERROR_ECC_UNCORRECTABLE": "uncorrectable ECC error encountered",
    "CUDA_ERROR_UNSUPPORTED_LIMIT": "limit is not supported on this architecture",
    "CUDA_ERROR_CONTEXT_ALREADY_IN_USE": "exclusive-thread device already in use by a different thread",
    "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED": "peer access is not supported between these two devices",
    "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT": "invalid OpenGL or DirectX context",
    "CUDA_ERROR_NVLINK_UNCORRECTABLE": "uncorrectable NVLink error detected during the execution",
    "CUDA_ERROR_JIT_COMPILER_NOT_FOUND": "PTX JIT compiler library not found",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "the provided PTX was compiled with an unsupported toolchain",
    "CUDA_ERROR_JIT_COMPILATION_DISABLED": "PTX JIT compilation was disabled",
    "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY": "the provided execution affinity is not supported",
    "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC": "the PTX contains an unsupported call to cudaDeviceSynchronize",
    "CUDA_ERROR_CONTAINED": "an exception on the device was contained by the GPU's error containment",
    "CUDA_ERROR_INVALID_SOURCE": "device kernel source is invalid",
    "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND": "shared object symbol not found",
    "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED": "shared object initialization failed",
    "CUDA_ERROR_OPERATING_SYSTEM": "OS call failed or operation not supported on this OS",
    "CUDA_ERROR_ILLEGAL_STATE": "a resource the call needs is not in a valid state",
    "CUDA_ERROR_LOSSY_QUERY": "the query would discard semantically important information",
    "CUDA_ERROR_LAUNCH_TIMEOUT": "the launch timed out and was terminated",
    "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING": "launch uses an incompatible texturing mode",
    "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE": "the primary context of the device is already active",
    "CUDA_ERROR_TOO_MANY_PEERS": "peer mapping resources exhausted",
    "CUDA_ERROR_HARDWARE_STACK_ERROR": "hardware stack error",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION": "an illegal instruction was encountered",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE": "operation on a memory location in a wrong address space",
    "CUDA_ERROR_INVALID_PC": "invalid program counter",
    "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE": "too many blocks in cooperative launch",
    "CUDA_ERROR_TENSOR_MEMORY_LEAK": "a kernel exited without freeing its tensor memory",
    "CUDA_ERROR_SYSTEM_NOT_READY": "system not yet initialized",
    "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH": "system has unsupported display driver / cuda driver combination",
    "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE": "forward compatibility was attempted on non supported HW",
    "CUDA_ERROR_MPS_CONNECTION_FAILED": "MPS client failed to connect to the MPS control daemon or the MPS server",
    "CUDA_ERROR_MPS_RPC_FAILURE": "the remote procedural call between the MPS server and the MPS client failed",
    "CUDA_ERROR_MPS_SERVER_NOT_READY": "MPS server is not ready to accept new MPS client requests",
    "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED": "the hardware resources required to create MPS client have been exhausted",
    "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED": "the hardware resources required to support device connections have been exhausted",
    "CUDA_ERROR_MPS_CLIENT_TERMINATED": "the MPS client has been terminated by the server",
    "CUDA_ERROR_CDP_NOT_SUPPORTED": "the module uses CUDA Dynamic Parallelism, which this configuration does not support",
    "CUDA_ERROR_CDP_VERSION_MISMATCH": "the module mixes versions of CUDA Dynamic Parallelism",
    "CUDA_ERROR_TIMEOUT": "the wait operation has timed out",
    "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE": "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update",
    "CUDA_ERROR_EXTERNAL_DEVICE": "an async error has occurred in a device outside of CUDA",
    "CUDA_ERROR_INVALID_CLUSTER_SIZE": "a kernel launch error has occurred due to cluster misconfiguration",
    "CUDA_ERROR_FUNCTION_NOT_LOADED": "the function handle is not loaded",
    "CUDA_ERROR_INVALID_RESOURCE_TYPE": "one or more resources passed in are not valid resource types for the operation",
    "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION": "one or more resources are insufficient or non-applicable for the operation",
    "CUDA_ERROR_KEY_ROTATION": "an error happened during the key rotation sequence",
})
# The codes CUDA 13.5 added (the cuda-bindings 13.5 enum), which a driver
# reporting that version names too.
CUDA_ERROR_NAMES.update({
    47: "CUDA_ERROR_MULTICAST_RESOURCE_FULL",
    227: "CUDA_ERROR_INSUFFICIENT_LOADER_VERSION",
    917: "CUDA_ERROR_STREAM_DETACHED",
    918: "CUDA_ERROR_GRAPH_RECAPTURE_FAILURE",
    919: "CUDA_ERROR_FABRIC_NOT_READY",
})
_DESCRIPTIONS.update({
    "CUDA_ERROR_MULTICAST_RESOURCE_FULL": "no hardware resource left to bind memory to a multicast object",
    "CUDA_ERROR_INSUFFICIENT_LOADER_VERSION": "the loader version is insufficient for the fatbin",
    "CUDA_ERROR_STREAM_DETACHED": "the stream is detached (its green context was destroyed)",
    "CUDA_ERROR_GRAPH_RECAPTURE_FAILURE": "a graph recapture failed and was terminated",
    "CUDA_ERROR_FABRIC_NOT_READY": "the GPU fabric is not ready yet",
})


def error_code(name: str) -> int:
    """The code of ``CUDA_ERROR_<name>`` in :data:`CUDA_ERROR_NAMES`: code names a code by name.

    Parameters
    ----------
    name : str
        The name without its ``CUDA_ERROR_`` prefix.

    Returns
    -------
    int

    Raises
    ------
    KeyError
        If the table has no such name.

    Examples
    --------
    >>> error_code("INVALID_PTX")
    218
    """
    return _CODES[name]


_CODES = {n.removeprefix("CUDA_ERROR_"): code for code, n in CUDA_ERROR_NAMES.items()}
