"""Tests of the real driver backend (``gpuarray/_driver/cuda/``).

Three groups:

- without a GPU (run everywhere): import and construction load no driver,
  initialisation failures become ``CudaUnavailableError``, the result check's
  error translation, and argument marshalling through a recording fake of
  ``cuda.bindings.driver`` (real enums, structs and constructors; fake calls);
- without a driver library only: every method's arguments pass the installed
  cuda.bindings' own conversion and reach the (missing) library, which checks
  them against the real signatures of that cuda-bindings version;
- ``@pytest.mark.gpu``: the backend against a real device; skipped, with the
  reason ``init()`` gave, when there is none.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from gpuarray._driver import _base
from gpuarray._driver import cuda as cudamod
from gpuarray._driver.cuda import CudaBackend, _check
from gpuarray.errors import CudaError, CudaOutOfMemoryError, CudaUnavailableError

drv = pytest.importorskip(
    "cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed"
)

REPO = str(Path(__file__).resolve().parents[2])
R = drv.CUresult


@pytest.fixture
def restore_module_state():
    """Undo whatever ``_bind`` stored in the module's globals."""
    saved = dict(vars(cudamod))
    yield
    for k in list(vars(cudamod)):
        if k not in saved:
            delattr(cudamod, k)
    vars(cudamod).update(saved)


# ============================================================ no GPU needed
def test_import_and_construction_load_no_driver():
    code = (
        "import sys\n"
        "from gpuarray._driver.cuda import CudaBackend\n"
        "b = CudaBackend()\n"
        "assert b.name == 'cuda'\n"
        "bad = [m for m in sys.modules if m.startswith('cuda.bindings')]\n"
        "assert not bad, bad\n"
        "if sys.platform.startswith('linux'):\n"
        "    maps = open('/proc/self/maps').read()\n"
        "    assert 'libcuda.so' not in maps, 'libcuda loaded'\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_constructing_does_not_call_cuinit(monkeypatch, restore_module_state):
    calls = []

    def cuInit(flags):
        calls.append(flags)
        return (R.CUDA_ERROR_NO_DEVICE,)

    monkeypatch.setattr(drv, "cuInit", cuInit)
    b = CudaBackend()
    assert calls == []
    with pytest.raises(CudaUnavailableError):
        b.init()
    with pytest.raises(CudaUnavailableError):
        b.device_count()  # lazily initialises: failure remembered, not retried
    assert calls == [0]


def test_init_here_without_gpu_raises_unavailable():
    b = CudaBackend()
    try:
        b.init()
    except CudaUnavailableError as exc:
        msg = str(exc)
        assert "GPUARRAY_BACKEND=sim" in msg
        assert exc.__cause__ is not None
        # The cause is named: the missing library, or the driver's result code.
        assert "libcuda" in msg or "CUDA_ERROR_" in msg, msg
        assert pickle.loads(pickle.dumps(exc)).reason == exc.reason
    else:
        from gpuarray_sim import standin as _standin

        pytest.skip("the stand-in driver (GPUARRAY_STANDIN) and a simulated device are in place"
                    if _standin.active() else "a CUDA driver and device are available on this machine")


@pytest.mark.parametrize(
    "code, words",
    [
        (100, "no CUDA-capable device"),
        (3, "could not be initialised"),
        (34, "stub library"),
        (803, "do not match"),
    ],
)
def test_init_result_codes_become_unavailable(monkeypatch, restore_module_state, code, words):
    monkeypatch.setattr(drv, "cuInit", lambda flags: (R(code),))
    monkeypatch.setattr(drv, "cuDriverGetVersion", lambda: (R.CUDA_SUCCESS, 12080))
    with pytest.raises(CudaUnavailableError) as info:
        CudaBackend().init()
    msg = str(info.value)
    assert words in msg and R(code).name in msg and "GPUARRAY_BACKEND=sim" in msg
    assert "the driver supports CUDA 12.8" in msg
    assert isinstance(info.value.__cause__, CudaError)
    assert info.value.__cause__.code == code


@pytest.mark.parametrize(
    "exc",
    [
        OSError("libcuda.so.1: cannot open shared object file"),
        RuntimeError("Failed to dlopen libcuda.so.1"),
    ],
)
def test_init_library_load_failure_becomes_unavailable(monkeypatch, restore_module_state, exc):
    def cuInit(flags):
        raise exc

    monkeypatch.setattr(drv, "cuInit", cuInit)
    with pytest.raises(CudaUnavailableError) as info:
        CudaBackend().init()
    assert info.value.__cause__ is exc
    assert "libcuda" in str(info.value) and str(exc) in str(info.value)


def test_init_missing_bindings_becomes_unavailable(monkeypatch):
    def load():
        raise ImportError("No module named 'cuda'")

    monkeypatch.setattr(cudamod, "_load_driver", load)
    with pytest.raises(CudaUnavailableError, match="cuda-bindings is not installed"):
        CudaBackend().init()


def test_init_other_failure_is_cuda_error(monkeypatch, restore_module_state):
    monkeypatch.setattr(drv, "cuInit", lambda flags: (R.CUDA_ERROR_INVALID_VALUE,))
    with pytest.raises(CudaError) as info:
        CudaBackend().init()
    assert not isinstance(info.value, CudaUnavailableError)
    assert info.value.call == "cuInit" and info.value.name == "CUDA_ERROR_INVALID_VALUE"


def test_init_is_idempotent_and_thread_safe(monkeypatch, restore_module_state):
    calls = []

    def cuInit(flags):
        calls.append(flags)
        time.sleep(0.05)
        return (R.CUDA_SUCCESS,)

    monkeypatch.setattr(drv, "cuInit", cuInit)
    b = CudaBackend()
    threads = [threading.Thread(target=b.init) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    b.init()
    assert calls == [0]


# ------------------------------------------------------------- result check
@pytest.mark.parametrize("code", [R.CUDA_ERROR_INVALID_VALUE, 1])
def test_check_raises_cuda_error_with_code_name_call(code):
    with pytest.raises(CudaError) as info:
        _check((code,), "cuMemcpyHtoDAsync", "while copying 8 bytes")
    e = info.value
    assert type(e) is CudaError
    assert (e.code, e.name, e.call, e.detail) == (
        1,
        "CUDA_ERROR_INVALID_VALUE",
        "cuMemcpyHtoDAsync",
        "while copying 8 bytes",
    )
    assert str(e).startswith("cuMemcpyHtoDAsync failed: CUDA_ERROR_INVALID_VALUE")
    again = pickle.loads(pickle.dumps(e))
    assert (again.code, again.name, again.call) == (e.code, e.name, e.call)


def test_check_names_codes_from_the_enum():
    # A code gpuarray's own table does not know: the name comes from CUresult.
    code = int(R.CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
    with pytest.raises(CudaError) as info:
        _check((R(code), None), "cuModuleLoadData")
    assert info.value.name == "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
    with pytest.raises(CudaError) as info:
        _check((123456,), "cuFoo")
    assert info.value.code == 123456 and info.value.name == "CUDA_ERROR_123456"


def test_check_out_of_memory_is_its_own_type():
    with pytest.raises(CudaOutOfMemoryError) as info:
        _check((R.CUDA_ERROR_OUT_OF_MEMORY, None), "cuMemAlloc", lambda: "while allocating 2.0 GiB")
    e = info.value
    assert isinstance(e, MemoryError) and isinstance(e, CudaError)
    assert e.code == 2 and e.call == "cuMemAlloc"
    assert (
        str(e)
        == "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory) while allocating 2.0 GiB"
    )


def test_check_returns_outputs_and_defers_detail():
    def detail():
        raise AssertionError("detail evaluated on success")

    assert _check((R.CUDA_SUCCESS,), "cuCtxSynchronize", detail) is None
    assert _check((R.CUDA_SUCCESS, 7), "cuDeviceGetCount", detail) == 7
    assert _check((0, 3, 4), "cuMemGetInfo", detail) == (3, 4)


def test_device_attribute_bad_name_without_driver():
    b = CudaBackend()
    with pytest.raises(ValueError, match="'warp_sizes'"):
        b.device_attribute("warp_sizes", 0)
    assert not b._ready  # refused before touching the driver


def test_every_device_attribute_name_maps_to_the_enum(restore_module_state):
    cudamod._bind(drv)
    assert set(cudamod._state._DEV_ATTRS) == set(_base.DEVICE_ATTRIBUTES)
    for name, member in cudamod._state._DEV_ATTRS.items():
        assert isinstance(member, drv.CUdevice_attribute), name
        assert member.name == "CU_DEVICE_ATTRIBUTE_" + name.upper()


# ------------------------------------------ marshalling through a fake driver
class FakeDriver:
    """cuda.bindings.driver with recorded ``cu*`` calls and canned results.

    Types, enums, structs and constants are the real ones; a call named in
    ``results`` returns ``results[name]`` (or calls it with the arguments),
    after being recorded in ``calls``.
    """

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []
        self.results: dict[str, object] = {"cuInit": (R.CUDA_SUCCESS,)}

    def __getattr__(self, name):
        if name in self.results:

            def call(*args):
                self.calls.append((name, args))
                r = self.results[name]
                return r(*args) if callable(r) else r

            return call
        real = getattr(drv, name)  # AttributeError where this version lacks it
        if name.startswith("cu") and name[2:3].isupper():

            def unexpected(*args):
                raise AssertionError(f"unexpected driver call {name}{args}")

            return unexpected
        return real

    def last(self, name):
        return [a for n, a in self.calls if n == name][-1]


@pytest.fixture
def fake(monkeypatch, restore_module_state):
    f = FakeDriver()
    monkeypatch.setattr(cudamod, "_load_driver", lambda: f)
    b = CudaBackend()
    b.init()
    return f, b


OK = R.CUDA_SUCCESS


def test_streams_0_and_1_are_legacy_2_per_thread(fake):
    f, b = fake
    f.results["cuMemcpyHtoDAsync"] = (OK,)
    for s, expect in [(0, 1), (1, 1), (2, 2), (0xDEAD0, 0xDEAD0)]:
        b.memcpy_htod_async(0x1000, 0x2000, 8, s)
        assert f.last("cuMemcpyHtoDAsync") == (0x1000, 0x2000, 8, expect)
    assert drv.CU_STREAM_LEGACY == 1 and drv.CU_STREAM_PER_THREAD == 2


def test_handles_come_back_as_ints(fake):
    f, b = fake
    f.results.update(
        cuStreamCreateWithPriority=(OK, drv.CUstream(0x55)),
        cuEventCreate=(OK, drv.CUevent(0x66)),
        cuMemAlloc=(OK, drv.CUdeviceptr(0x7000)),
        cuModuleLoadData=(OK, drv.CUmodule(0x88)),
        cuModuleGetFunction=(OK, drv.CUfunction(0x99)),
        cuCtxGetCurrent=(OK, drv.CUcontext(0)),
        cuStreamGetCtx=(OK, drv.CUcontext(0x11)),
    )
    for v in (
        b.stream_create(non_blocking=True, priority=-1),
        b.event_create(timing=False),
        b.mem_alloc(16),
        b.module_load_data(b"\x7fELFxxxx"),
        b.module_get_function(0x88, "k"),
        b.ctx_get_current(),
        b.stream_get_ctx(0),
    ):
        assert type(v) is int
    assert f.last("cuStreamCreateWithPriority") == (
        int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING),
        -1,
    )
    assert f.last("cuEventCreate") == (int(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING),)
    assert f.last("cuModuleGetFunction") == (0x88, b"k")
    assert f.last("cuStreamGetCtx") == (1,)
    assert b.ctx_get_current() == 0


def test_mem_alloc_out_of_memory_names_the_size(fake):
    f, b = fake
    f.results["cuMemAlloc"] = (R.CUDA_ERROR_OUT_OF_MEMORY, None)
    with pytest.raises(CudaOutOfMemoryError, match=r"while allocating 2\.0 GiB"):
        b.mem_alloc(2 << 30)


def test_memcpy_2d_fills_the_struct(fake):
    f, b = fake
    seen = {}

    def memcpy2d(p, stream):
        seen.update(
            srcType=int(p.srcMemoryType),
            src=int(p.srcHost),
            srcPitch=p.srcPitch,
            dstType=int(p.dstMemoryType),
            dst=int(p.dstDevice),
            dstPitch=p.dstPitch,
            width=p.WidthInBytes,
            height=p.Height,
            x=(p.srcXInBytes, p.srcY, p.dstXInBytes, p.dstY),
            stream=stream,
        )
        return (OK,)

    f.results["cuMemcpy2DAsync"] = memcpy2d
    b.memcpy_2d_async(0xD000, 256, True, 0x5000, 40, False, 32, 7, 0)
    assert seen == dict(
        srcType=_base.MEMORYTYPE_HOST,
        src=0x5000,
        srcPitch=40,
        dstType=_base.MEMORYTYPE_DEVICE,
        dst=0xD000,
        dstPitch=256,
        width=32,
        height=7,
        x=(0, 0, 0, 0),
        stream=1,
    )
    b.memcpy_2d_async(0x5000, 40, False, 0xD000, 256, True, 32, 7, 2)
    assert (seen["srcType"], seen["dstType"], seen["stream"]) == (
        _base.MEMORYTYPE_DEVICE,
        _base.MEMORYTYPE_HOST,
        2,
    )


def test_memset_values_are_masked(fake):
    f, b = fake
    for n in ("cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async"):
        f.results[n] = (OK,)
    b.memset_d8_async(0x10, -1, 4, 0)
    b.memset_d16_async(0x10, -2, 4, 0)
    b.memset_d32_async(0x10, -3, 4, 0)
    assert f.last("cuMemsetD8Async") == (0x10, 0xFF, 4, 1)
    assert f.last("cuMemsetD16Async")[1] == 0xFFFE
    assert f.last("cuMemsetD32Async")[1] == 0xFFFFFFFD


class Affine(ctypes.Structure):
    _fields_ = [("a", ctypes.c_float), ("b", ctypes.c_float)]


def test_launch_kernel_passes_an_array_of_parameter_addresses(fake):
    f, b = fake
    params = [ctypes.c_uint64(0xABC000), ctypes.c_int32(-5), Affine(2.0, 3.0), ctypes.c_double(1.5)]
    seen = {}

    def launch(func, gx, gy, gz, bx, by, bz, shm, stream, kp, extra):
        if not kp:
            return (OK,)
        ptrs = (ctypes.c_void_p * 4).from_address(kp)
        seen.update(
            dims=(gx, gy, gz, bx, by, bz),
            shm=shm,
            stream=stream,
            extra=extra,
            values=(
                ctypes.c_uint64.from_address(ptrs[0]).value,
                ctypes.c_int32.from_address(ptrs[1]).value,
                (Affine.from_address(ptrs[2]).a, Affine.from_address(ptrs[2]).b),
                ctypes.c_double.from_address(ptrs[3]).value,
            ),
        )
        return (OK,)

    f.results["cuLaunchKernel"] = launch
    b.launch_kernel(0x42, (3, 2, 1), (128, 1, 1), 64, 2, params)
    assert seen == dict(
        dims=(3, 2, 1, 128, 1, 1), shm=64, stream=2, extra=0, values=(0xABC000, -5, (2.0, 3.0), 1.5)
    )
    b.launch_kernel(0x42, (1, 1, 1), (1, 1, 1), 0, 0, [])
    assert f.last("cuLaunchKernel")[9] == 0  # no parameters: NULL kernelParams


def test_launch_kernel_rejects_non_ctypes_parameter(fake):
    f, b = fake
    f.results["cuLaunchKernel"] = (OK,)
    with pytest.raises(TypeError, match="parameter 1 .* not int"):
        b.launch_kernel(0x42, (1, 1, 1), (1, 1, 1), 0, 0, [ctypes.c_int(1), 7])


def test_launch_failure_describes_the_launch(fake):
    f, b = fake
    f.results["cuLaunchKernel"] = (R.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,)
    with pytest.raises(CudaError, match=r"grid \(1, 1, 1\) block \(1024, 1, 1\)") as info:
        b.launch_kernel(0x42, (1, 1, 1), (1024, 1, 1), 0, 0, [ctypes.c_int(1)])
    assert info.value.name == "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"


def test_ipc_handle_bytes_round_trip(fake):
    f, b = fake
    raw = bytes(range(1, 65))
    h = drv.CUipcMemHandle()
    ctypes.memmove(h.getPtr(), raw, 64)
    f.results["cuIpcGetMemHandle"] = (OK, h)
    opened = {}

    def open_(handle, flags):
        opened.update(raw=ctypes.string_at(handle.getPtr(), 64), flags=flags)
        return (OK, drv.CUdeviceptr(0xF000))

    f.results["cuIpcOpenMemHandle"] = open_
    got = b.ipc_get_mem_handle(0x1234)
    assert got == raw and type(got) is bytes
    assert b.ipc_open_mem_handle(got) == 0xF000
    assert opened == dict(raw=raw, flags=int(drv.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
    with pytest.raises(ValueError, match="64 bytes, got 3"):
        b.ipc_open_mem_handle(b"abc")


def test_pointer_info(fake):
    f, b = fake
    f.results["cuPointerGetAttributes"] = (OK, [2, 0, drv.CUdeviceptr(0x7000), 4096, False, True])
    assert b.pointer_info(0x7010) == _base.PointerInfo(2, 0, 0x7000, 4096, False, True)
    n, attrs, ptr = f.last("cuPointerGetAttributes")
    assert n == 6 and ptr == 0x7010
    assert [a.name for a in attrs] == [
        "CU_POINTER_ATTRIBUTE_" + s
        for s in ("MEMORY_TYPE", "DEVICE_ORDINAL", "RANGE_START_ADDR", "RANGE_SIZE", "IS_MANAGED",
                  "MAPPED")
    ]
    f.results["cuPointerGetAttributes"] = (OK, [2, 0, drv.CUdeviceptr(0x7000), 4096, False, False])
    assert b.pointer_info(0x7010).mapped is False  # graph memory before its graph's first launch
    f.results["cuPointerGetAttributes"] = (OK, [0, -2, drv.CUdeviceptr(0), 0, False, False])
    assert b.pointer_info(0x1234) == _base.PointerInfo(0, -1, 0, 0)
    f.results["cuPointerGetAttributes"] = (R.CUDA_ERROR_INVALID_VALUE, None)
    assert b.pointer_info(0x1234) == _base.PointerInfo(0, -1, 0, 0)
    f.results["cuPointerGetAttributes"] = (R.CUDA_ERROR_INVALID_CONTEXT, None)
    with pytest.raises(CudaError, match="cuPointerGetAttributes"):
        b.pointer_info(0x1234)


def test_host_memory_flags(fake):
    f, b = fake
    f.results.update(
        cuMemHostAlloc=(OK, 0x9000),
        cuMemHostRegister=(OK,),
        cuMemHostGetDevicePointer=(OK, drv.CUdeviceptr(0x9000)),
    )
    assert b.mem_host_alloc(10) == 0x9000
    assert f.last("cuMemHostAlloc") == (10, 0)
    b.mem_host_alloc(10, mapped=True, portable=True, write_combined=True)
    assert f.last("cuMemHostAlloc")[1] == (
        drv.CU_MEMHOSTALLOC_DEVICEMAP
        | drv.CU_MEMHOSTALLOC_PORTABLE
        | drv.CU_MEMHOSTALLOC_WRITECOMBINED
    )
    b.mem_host_register(0x5000, 64, mapped=True)
    assert f.last("cuMemHostRegister") == (0x5000, 64, drv.CU_MEMHOSTREGISTER_DEVICEMAP)
    assert b.mem_host_get_device_pointer(0x9000) == 0x9000
    assert f.last("cuMemHostGetDevicePointer") == (0x9000, 0)


def test_module_load_data_terminates_ptx_only(fake):
    f, b = fake
    f.results["cuModuleLoadData"] = (OK, drv.CUmodule(1))
    b.module_load_data(b".version 8.0\n.target sm_90\n")
    assert f.last("cuModuleLoadData")[0].endswith(b"sm_90\n\0")
    b.module_load_data(b".version 8.0\0")
    assert f.last("cuModuleLoadData")[0] == b".version 8.0\0"
    cubin = b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + b"x"
    b.module_load_data(cubin)
    assert f.last("cuModuleLoadData")[0] == cubin


def test_not_ready_and_peer_already_enabled_are_not_errors(fake):
    f, b = fake
    f.results.update(
        cuStreamQuery=(R.CUDA_ERROR_NOT_READY,),
        cuEventQuery=(R.CUDA_ERROR_NOT_READY,),
        cuCtxEnablePeerAccess=(R.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,),
    )
    assert b.stream_query(0) is False and b.event_query(5) is False
    b.ctx_enable_peer_access(0x77)
    f.results.update(
        cuStreamQuery=(OK,),
        cuEventQuery=(R.CUDA_ERROR_INVALID_HANDLE,),
        cuCtxEnablePeerAccess=(R.CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,),
    )
    assert b.stream_query(0) is True
    with pytest.raises(CudaError, match="cuEventQuery"):
        b.event_query(5)
    with pytest.raises(CudaError, match="cuCtxEnablePeerAccess"):
        b.ctx_enable_peer_access(0x77)


def test_profiler_start_stop_call_the_driver_and_report_its_error(fake):
    f, b = fake
    f.results.update(cuProfilerStart=(OK,), cuProfilerStop=(OK,))
    b.profiler_start()
    b.profiler_stop()
    assert [n for n, _ in f.calls if n.startswith("cuProfiler")] == [
        "cuProfilerStart", "cuProfilerStop"]
    f.results.update(cuProfilerStart=(R.CUDA_ERROR_INVALID_CONTEXT,),
                     cuProfilerStop=(R.CUDA_ERROR_INVALID_CONTEXT,))
    for call, name in ((b.profiler_start, "cuProfilerStart"), (b.profiler_stop, "cuProfilerStop")):
        with pytest.raises(CudaError, match=name) as info:
            call()
        assert info.value.code == 201


def test_device_queries(fake):
    f, b = fake
    f.results.update(
        cuDeviceGet=lambda i: (OK, drv.CUdevice(i)),
        cuDeviceGetName=(OK, b"NVIDIA Fake GPU" + b"\0" * 241),
        cuDeviceGetAttribute=(OK, 9),
        cuDeviceTotalMem=(OK, 1 << 34),
        cuDeviceCanAccessPeer=(OK, 1),
        cuDeviceGetDefaultMemPool=(OK, drv.CUmemoryPool(0x31)),
        cuMemPoolSetAttribute=(OK,),
        cuDriverGetVersion=(OK, 13000),
        cuDeviceGetCount=(OK, 2),
    )
    u = drv.CUuuid()
    ctypes.memmove(u.getPtr(), bytes(range(16)), 16)
    uuid_call = "cuDeviceGetUuid_v2" if hasattr(drv, "cuDeviceGetUuid_v2") else "cuDeviceGetUuid"
    f.results[uuid_call] = (OK, u)
    cudamod._bind(f)  # rebind so the uuid call resolves through the fake
    assert b.device_name(1) == "NVIDIA Fake GPU"
    assert b.device_attribute("compute_capability_major", 1) == 9
    attr, dev = f.last("cuDeviceGetAttribute")
    assert (
        attr == drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        and int(dev) == 1
    )
    assert b.device_total_memory(1) == 1 << 34
    assert b.device_uuid(1) == bytes(range(16))
    assert b.device_can_access_peer(0, 1) is True
    assert b.driver_version() == 13000 and b.device_count() == 2
    b.mempool_set_release_threshold(1, 1 << 40)
    pool, attr, value = f.last("cuMemPoolSetAttribute")
    assert (
        attr == drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD and int(value) == 1 << 40
    )
    assert [a for n, a in f.calls if n == "cuDeviceGet"] == [(1,), (0,)]  # cached per ordinal


# -------------------------- arguments against the installed bindings' signatures
def _driver_library_missing() -> bool:
    try:
        drv.cuDriverGetVersion()
    except (RuntimeError, OSError):
        return True
    return False


def _reached_library(exc: BaseException) -> bool:
    """True for the bindings' "libcuda is missing" errors (12.8, 12.9+, 13.x)."""
    if isinstance(exc, CudaError) or not isinstance(exc, (RuntimeError, OSError)):
        return False
    msg = str(exc)
    return "dlopen" in msg or "not found" in msg or "driver library" in msg


@pytest.mark.skipif(
    not _driver_library_missing(),
    reason="a CUDA driver library (or the stand-in) is present: calls would really run",
)
def test_arguments_pass_the_bindings_conversion(restore_module_state):
    """Each call's arguments are converted by cuda.bindings before it loads
    libcuda, so with no driver a call that gets as far as the load error has
    arguments the installed cuda-bindings version accepts."""
    cudamod._bind(drv)
    b = CudaBackend()
    b._ready = True  # cuInit cannot succeed here; skip it
    b._devices.update({0: drv.CUdevice(0), 1: drv.CUdevice(1)})
    handle = bytes(64)

    def host_fn() -> None:  # held weakly by launch_host_func: kept here
        pass

    calls = {
        "driver_version": lambda: b.driver_version(),
        "device_count": lambda: b.device_count(),
        "device_name": lambda: b.device_name(0),
        "device_attribute": lambda: b.device_attribute("pci_bus_id", 0),
        "device_total_memory": lambda: b.device_total_memory(0),
        "device_uuid": lambda: b.device_uuid(0),
        "device_can_access_peer": lambda: b.device_can_access_peer(0, 1),
        "primary_ctx_retain": lambda: b.primary_ctx_retain(0),
        "primary_ctx_release": lambda: b.primary_ctx_release(0),
        "primary_ctx_reset": lambda: b.primary_ctx_reset(0),
        "ctx_set_current": lambda: b.ctx_set_current(0x1234),
        "ctx_set_current(0)": lambda: b.ctx_set_current(0),
        "ctx_get_current": lambda: b.ctx_get_current(),
        "ctx_get_device": lambda: b.ctx_get_device(),
        "ctx_synchronize": lambda: b.ctx_synchronize(),
        "ctx_enable_peer_access": lambda: b.ctx_enable_peer_access(0x1234),
        "profiler_start": lambda: b.profiler_start(),
        "profiler_stop": lambda: b.profiler_stop(),
        "mem_alloc": lambda: b.mem_alloc(1 << 40),
        "mem_alloc_relaxed": lambda: b.mem_alloc_relaxed(1 << 40),
        "mem_free": lambda: b.mem_free(0x7F0000000000),
        "mem_alloc_async": lambda: b.mem_alloc_async(1 << 20, 0),
        "mem_free_async": lambda: b.mem_free_async(0x7F0000000000, 2),
        "mempool_set_release_threshold": lambda: b.mempool_set_release_threshold(0, 2**64 - 1),
        "mem_get_info": lambda: b.mem_get_info(),
        "mem_host_alloc": lambda: b.mem_host_alloc(
            4096, mapped=True, portable=True, write_combined=True
        ),
        "mem_free_host": lambda: b.mem_free_host(0x7F0000000000),
        "mem_host_register": lambda: b.mem_host_register(0x7F0000000000, 4096, True, True),
        "mem_host_unregister": lambda: b.mem_host_unregister(0x7F0000000000),
        "mem_host_get_device_pointer": lambda: b.mem_host_get_device_pointer(0x7F0000000000),
        "pointer_info": lambda: b.pointer_info(0x7F0000000000),
        "memcpy_htod_async": lambda: b.memcpy_htod_async(
            2**64 - 1, 0x7F0000000000, 1 << 33, 0x5555
        ),
        "memcpy_dtoh_async": lambda: b.memcpy_dtoh_async(0x7F0000000000, 2**63, 16, 2),
        "memcpy_dtod_async": lambda: b.memcpy_dtod_async(2**63, 2**63 + 64, 16, 0),
        "memcpy_2d_async": lambda: b.memcpy_2d_async(
            2**63, 512, True, 0x7F0000000000, 40, False, 32, 4, 0
        ),
        "memcpy_2d_async d2h": lambda: b.memcpy_2d_async(
            0x7F0000000000, 40, False, 2**63, 512, True, 32, 4, 1
        ),
        "memset_d8_async": lambda: b.memset_d8_async(2**63, -1, 16, 0),
        "memset_d16_async": lambda: b.memset_d16_async(2**63, 0xFFFF, 16, 1),
        "memset_d32_async": lambda: b.memset_d32_async(2**63, 0xFFFFFFFF, 16, 2),
        "stream_create": lambda: b.stream_create(non_blocking=True, priority=-1),
        "stream_destroy": lambda: b.stream_destroy(0x5555),
        "stream_query": lambda: b.stream_query(0),
        "stream_synchronize": lambda: b.stream_synchronize(2),
        "stream_wait_event": lambda: b.stream_wait_event(0x5555, 0x6666),
        "stream_get_ctx": lambda: b.stream_get_ctx(0x5555),
        "event_create": lambda: b.event_create(timing=False, interprocess=True),
        "event_destroy": lambda: b.event_destroy(0x6666),
        "event_record": lambda: b.event_record(0x6666, 0),
        "event_query": lambda: b.event_query(0x6666),
        "event_synchronize": lambda: b.event_synchronize(0x6666),
        "event_elapsed_time": lambda: b.event_elapsed_time(0x6666, 0x6667),
        "module_load_data": lambda: b.module_load_data(b".version 8.0"),
        "module_unload": lambda: b.module_unload(0x7777),
        "module_get_function": lambda: b.module_get_function(0x7777, "kernel"),
        "launch_kernel": lambda: b.launch_kernel(
            0x8888,
            (2**31 - 1, 65535, 65535),
            (1024, 1, 1),
            48 << 10,
            0x5555,
            [ctypes.c_uint64(2**64 - 1), ctypes.c_int64(-1), Affine(1.0, 2.0)],
        ),
        "ipc_get_mem_handle": lambda: b.ipc_get_mem_handle(2**63),
        "ipc_open_mem_handle": lambda: b.ipc_open_mem_handle(handle),
        "ipc_close_mem_handle": lambda: b.ipc_close_mem_handle(2**63),
        "mem_alloc_managed": lambda: b.mem_alloc_managed(1 << 20, attach_global=False),
        "stream_add_callback": lambda: b.stream_add_callback(0x5555, lambda status: None),
        "launch_host_func": lambda: b.launch_host_func(0x5555, host_fn),
        "stream_wait_event(external)": lambda: b.stream_wait_event(0x5555, 0x6666, True),
        "stream_begin_capture": lambda: b.stream_begin_capture(0x5555, "thread_local"),
        "stream_end_capture": lambda: b.stream_end_capture(0x5555),
        "stream_is_capturing": lambda: b.stream_is_capturing(0x5555),
        "stream_capture_info": lambda: b.stream_capture_info(0x5555),
        "exchange_capture_mode": lambda: b.exchange_capture_mode("relaxed"),
        "graph_instantiate": lambda: b.graph_instantiate(0x9999, auto_free_on_launch=True),
        "graph_launch": lambda: b.graph_launch(0x9998, 0x5555),
        "graph_upload": lambda: b.graph_upload(0x9998, 0),
        "graph_exec_destroy": lambda: b.graph_exec_destroy(0x9998),
        "graph_destroy": lambda: b.graph_destroy(0x9999),
    }
    abstract = {n for n in _base.Backend.__abstractmethods__} - {"init"}
    assert abstract <= {k.split(" ")[0].split("(")[0] for k in calls}, abstract
    wrong = {}
    for name, call in calls.items():
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - classified just below
            if not _reached_library(exc):
                wrong[name] = f"{type(exc).__name__}: {exc}"
        else:
            wrong[name] = "returned without a driver"
    assert not wrong, wrong


# ================================================================ real GPU
def _compile(source: str, name: str, cc: tuple[int, int], ptx: bool = False) -> bytes:
    """CUBIN (or PTX) of ``source`` for compute capability ``cc`` with NVRTC."""
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    arch = f"{cc[0]}{cc[1]}"
    try:
        err, archs = nvrtc.nvrtcGetSupportedArchs()
    except (RuntimeError, OSError) as exc:  # libnvrtc not found
        pytest.skip(f"NVRTC is not available: {exc}")
    if not ptx and int(arch) not in archs:
        pytest.skip(f"this NVRTC cannot generate CUBIN for sm_{arch} (supports {archs})")
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    assert not err, err
    try:
        opt = f"--gpu-architecture={'compute' if ptx else 'sm'}_{arch}".encode()
        (err,) = nvrtc.nvrtcCompileProgram(prog, 1, [opt])
        if err:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise AssertionError(f"{err}: {log.decode(errors='replace')}")
        get_size, get = (
            (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
            if ptx
            else (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)
        )
        _, size = get_size(prog)
        buf = b" " * size
        (err,) = get(prog, buf)
        assert not err, err
        return buf.rstrip(b"\0") if ptx else buf  # PTX unterminated: the backend adds the NUL
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


AFFINE_SRC = r"""
struct Affine { float a; float b; };
extern "C" __global__ void affine(float* out, const float* x, Affine f, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = f.a * x[i] + f.b;
}
"""


@pytest.fixture(scope="module")
def gpu():
    """A backend with device 0's primary context current; skips without a GPU."""
    b = CudaBackend()
    try:
        b.init()
        if b.device_count() < 1:
            pytest.skip("no CUDA device: cuDeviceGetCount returned 0")
    except CudaUnavailableError as exc:
        pytest.skip(f"no CUDA device: {exc.reason}")
    ctx = b.primary_ctx_retain(0)
    b.ctx_set_current(ctx)
    yield b, ctx
    b.ctx_synchronize()
    b.ctx_set_current(0)
    b.primary_ctx_release(0)


@pytest.fixture
def g(gpu):
    b, ctx = gpu
    b.ctx_set_current(ctx)  # cheap; keeps tests independent of one another
    return b


def _host_view(ptr: int, nbytes: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))


@pytest.mark.gpu
def test_gpu_device_queries(gpu):
    b, ctx = gpu
    assert b.driver_version() >= 12000
    assert b.device_count() >= 1
    assert b.device_name(0)
    for attr in _base.DEVICE_ATTRIBUTES:
        assert isinstance(b.device_attribute(attr, 0), int), attr
    assert b.device_attribute("compute_capability_major", 0) >= 5
    assert b.device_attribute("warp_size", 0) == 32
    uuid = b.device_uuid(0)
    assert isinstance(uuid, bytes) and len(uuid) == 16 and any(uuid)
    assert b.device_total_memory(0) > 0
    free, total = b.mem_get_info()
    assert 0 < free <= total
    assert b.ctx_get_current() == ctx and b.ctx_get_device() == 0
    with pytest.raises(CudaError) as info:
        b.device_name(b.device_count())
    assert info.value.name == "CUDA_ERROR_INVALID_DEVICE"


@pytest.mark.gpu
def test_gpu_alloc_free_and_out_of_memory(g):
    p = g.mem_alloc(1 << 20)
    assert p != 0
    g.mem_free(p)
    with pytest.raises(CudaOutOfMemoryError) as info:
        g.mem_alloc(1 << 50)
    assert info.value.call == "cuMemAlloc" and "while allocating" in str(info.value)


@pytest.mark.gpu
@pytest.mark.parametrize("stream_kind", ["legacy0", "legacy1", "per_thread", "created"])
def test_gpu_round_trip_through_pinned_memory(g, stream_kind):
    n = 1 << 16
    s = {"legacy0": 0, "legacy1": 1, "per_thread": 2}.get(stream_kind) or g.stream_create()
    src = g.mem_host_alloc(n)
    dst = g.mem_host_alloc(n)
    dev = g.mem_alloc(n)
    dev2 = g.mem_alloc(n)
    try:
        data = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
        _host_view(src, n)[:] = data
        _host_view(dst, n)[:] = 0
        g.memcpy_htod_async(dev, src, n, s)
        g.memcpy_dtod_async(dev2, dev, n, s)
        g.memcpy_dtoh_async(dst, dev2, n, s)
        g.stream_synchronize(s)
        assert g.stream_query(s) is True
        np.testing.assert_array_equal(_host_view(dst, n), data)
    finally:
        g.mem_free(dev2)
        g.mem_free(dev)
        g.mem_free_host(dst)
        g.mem_free_host(src)
        if stream_kind == "created":
            g.stream_destroy(s)


@pytest.mark.gpu
def test_gpu_memset_widths(g):
    n = 256
    dev = g.mem_alloc(n)
    out = np.empty(n, np.uint8)
    try:
        g.memset_d8_async(dev, 0xAB, n, 0)
        g.memcpy_dtoh_async(out.ctypes.data, dev, n, 0)
        g.stream_synchronize(0)
        assert (out == 0xAB).all()
        g.memset_d16_async(dev, 0x1234, n // 2, 0)
        g.memcpy_dtoh_async(out.ctypes.data, dev, n, 0)
        g.stream_synchronize(0)
        assert (out.view(np.uint16) == 0x1234).all()
        g.memset_d32_async(dev, -1, n // 4, 0)
        g.memset_d32_async(dev, 0x3F800000, 4, 0)  # 1.0f in the first 4 floats
        g.memcpy_dtoh_async(out.ctypes.data, dev, n, 0)
        g.stream_synchronize(0)
        u32 = out.view(np.uint32)
        assert (u32[:4] == 0x3F800000).all() and (u32[4:] == 0xFFFFFFFF).all()
    finally:
        g.mem_free(dev)


@pytest.mark.gpu
def test_gpu_memcpy_2d(g):
    rows, width = 5, 24
    host = np.arange(rows * 40, dtype=np.uint8).reshape(rows, 40)  # pitch 40, pageable
    dpitch = 64
    dev = g.mem_alloc(rows * dpitch)
    pinned = g.mem_host_alloc(rows * 32)
    try:
        g.memset_d8_async(dev, 0, rows * dpitch, 0)
        g.memcpy_2d_async(dev, dpitch, True, host.ctypes.data, 40, False, width, rows, 0)
        out = _host_view(pinned, rows * 32)
        out[:] = 0xEE
        g.memcpy_2d_async(pinned, 32, False, dev, dpitch, True, width, rows, 0)
        g.stream_synchronize(0)
        got = out.reshape(rows, 32)
        np.testing.assert_array_equal(got[:, :width], host[:, :width])
        assert (got[:, width:] == 0xEE).all()
        # device-to-device 2-D with an offset source
        dev2 = g.mem_alloc(rows * 16)
        try:
            g.memcpy_2d_async(dev2, 16, True, dev + 8, dpitch, True, 16, rows, 0)
            flat = np.empty(rows * 16, np.uint8)
            g.memcpy_dtoh_async(flat.ctypes.data, dev2, rows * 16, 0)
            g.stream_synchronize(0)
            np.testing.assert_array_equal(flat.reshape(rows, 16), host[:, 8:24])
        finally:
            g.mem_free(dev2)
    finally:
        g.mem_free_host(pinned)
        g.mem_free(dev)


@pytest.mark.gpu
def test_gpu_streams_events_ordering_and_timing(g, gpu):
    _, ctx = gpu
    n = 64 << 20
    s1 = g.stream_create(non_blocking=True)
    s2 = g.stream_create(non_blocking=True, priority=-1)
    start, done = g.event_create(timing=True), g.event_create(timing=True)
    plain = g.event_create(timing=False)
    dev = g.mem_alloc(n)
    host = g.mem_host_alloc(4096)
    try:
        assert g.stream_get_ctx(s1) == ctx
        g.event_record(start, s1)
        for v in range(1, 9):  # enough work that s2 would overtake it without the wait
            g.memset_d32_async(dev, v, n // 4, s1)
        g.event_record(done, s1)
        g.event_record(plain, s1)
        g.stream_wait_event(s2, done)
        g.memcpy_dtoh_async(host, dev + n - 4096, 4096, s2)
        g.stream_synchronize(s2)
        assert (_host_view(host, 4096).view(np.uint32) == 8).all()
        g.event_synchronize(done)
        assert g.event_query(done) is True and g.event_query(plain) in (True, False)
        ms = g.event_elapsed_time(start, done)
        assert isinstance(ms, float) and ms > 0
        with pytest.raises(CudaError) as info:
            g.event_elapsed_time(start, plain)  # timing disabled on `plain`
        assert info.value.call == "cuEventElapsedTime"
    finally:
        g.ctx_synchronize()
        g.mem_free_host(host)
        g.mem_free(dev)
        for e in (start, done, plain):
            g.event_destroy(e)
        g.stream_destroy(s2)
        g.stream_destroy(s1)


@pytest.mark.gpu
def test_gpu_pointer_info(g):
    dev = g.mem_alloc(4096)
    pinned = g.mem_host_alloc(4096)
    mapped = g.mem_host_alloc(4096, mapped=True)
    pageable = np.zeros(4096, np.uint8)
    registered = np.zeros(1 << 20, np.uint8)  # large enough to be page-aligned (mmap)
    try:
        info = g.pointer_info(dev + 100)
        assert (info.memory_type, info.device_ordinal, info.base) == (
            _base.MEMORYTYPE_DEVICE,
            0,
            dev,
        )
        assert info.size >= 4096 and info.is_managed is False
        assert g.pointer_info(pinned).memory_type == _base.MEMORYTYPE_HOST
        assert g.pointer_info(pageable.ctypes.data) == _base.PointerInfo(0, -1, 0, 0)
        dptr = g.mem_host_get_device_pointer(mapped)
        assert dptr != 0
        g.mem_host_register(registered.ctypes.data, registered.nbytes)
        try:
            assert g.pointer_info(registered.ctypes.data).memory_type == _base.MEMORYTYPE_HOST
        finally:
            g.mem_host_unregister(registered.ctypes.data)
        with pytest.raises(CudaError) as exc:
            g.mem_host_unregister(registered.ctypes.data)
        assert exc.value.name == "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"
    finally:
        g.mem_free_host(mapped)
        g.mem_free_host(pinned)
        g.mem_free(dev)


class _AffineReference:
    """The simulator's reference of ``affine``: what the stand-in driver runs for it."""

    param_types = (ctypes.c_uint64, ctypes.c_uint64, Affine, ctypes.c_uint64)

    def accesses(self, params):
        n = params[3].value
        return [(params[0].value, 4 * n, True), (params[1].value, 4 * n, False)]

    def run(self, mem, grid, block, shared, params):
        out, x, f, n = params[0].value, params[1].value, params[2], params[3].value
        n = min(n, grid[0] * block[0])
        xs = np.frombuffer(mem.read(x, 4 * n).tobytes(), np.float32)
        mem.write(out, (np.float32(f.a) * xs + np.float32(f.b)).astype(np.float32))


@pytest.fixture
def affine_under_standin():
    """Over the stand-in driver the simulator runs ``affine``'s reference (a GPU runs the CUBIN)."""
    from gpuarray_sim import kernels as sim_kernels
    from gpuarray_sim import standin as _standin

    if _standin.active():
        sim_kernels.register("affine", _AffineReference())
    yield
    sim_kernels._registry.pop("affine", None)


@pytest.mark.gpu
@pytest.mark.parametrize("image", ["cubin", "ptx"])
def test_gpu_module_load_and_launch(g, image, affine_under_standin):
    cc = (
        g.device_attribute("compute_capability_major", 0),
        g.device_attribute("compute_capability_minor", 0),
    )
    code = _compile(AFFINE_SRC, "affine", cc, ptx=(image == "ptx"))
    try:
        mod = g.module_load_data(code)
    except CudaError as exc:
        if image == "ptx" and exc.name == "CUDA_ERROR_UNSUPPORTED_PTX_VERSION":
            pytest.skip(f"NVRTC is newer than the driver: {exc}")
        raise
    n = 1000
    x = np.arange(n, dtype=np.float32)
    dx, dout = g.mem_alloc(x.nbytes), g.mem_alloc(x.nbytes)
    out = np.empty_like(x)
    try:
        func = g.module_get_function(mod, "affine")
        with pytest.raises(CudaError) as info:
            g.module_get_function(mod, "missing")
        assert info.value.name == "CUDA_ERROR_NOT_FOUND"
        g.memcpy_htod_async(dx, x.ctypes.data, x.nbytes, 0)
        params = [ctypes.c_uint64(dout), ctypes.c_uint64(dx), Affine(2.0, -1.0), ctypes.c_uint64(n)]
        g.launch_kernel(func, ((n + 127) // 128, 1, 1), (128, 1, 1), 0, 0, params)
        g.memcpy_dtoh_async(out.ctypes.data, dout, out.nbytes, 0)
        g.stream_synchronize(0)
        np.testing.assert_array_equal(out, 2.0 * x - 1.0)
        with pytest.raises(CudaError) as info:
            g.launch_kernel(func, (1, 1, 1), (4096, 1, 1), 0, 0, params)
        assert info.value.call == "cuLaunchKernel"
    finally:
        g.mem_free(dout)
        g.mem_free(dx)
        g.module_unload(mod)


@pytest.mark.gpu
def test_gpu_stream_ordered_allocation(g):
    if not g.device_attribute("memory_pools_supported", 0):
        pytest.skip("device 0 has no memory pools")
    g.mempool_set_release_threshold(0, 1 << 30)
    s = g.stream_create()
    try:
        p = g.mem_alloc_async(1 << 20, s)
        g.memset_d8_async(p, 7, 1 << 20, s)
        g.mem_free_async(p, s)
        g.stream_synchronize(s)
    finally:
        g.mempool_set_release_threshold(0, 0)
        g.stream_destroy(s)


@pytest.mark.gpu
def test_gpu_peer_access(g):
    if g.device_count() < 2 or not g.device_can_access_peer(0, 1):
        pytest.skip("needs two devices with peer access")
    peer = g.primary_ctx_retain(1)
    try:
        g.ctx_enable_peer_access(peer)
        g.ctx_enable_peer_access(peer)  # already enabled: not an error
    finally:
        g.primary_ctx_release(1)


_IPC_CHILD = r"""
import sys, numpy as np
from gpuarray._driver.cuda import CudaBackend
b = CudaBackend(); b.init()
b.ctx_set_current(b.primary_ctx_retain(0))
p = b.ipc_open_mem_handle(bytes.fromhex(sys.argv[1]))
out = np.empty(16, np.uint8)
b.memcpy_dtoh_async(out.ctypes.data, p, 16, 0); b.stream_synchronize(0)
b.ipc_close_mem_handle(p)
print(out.tobytes().hex())
"""


@pytest.mark.gpu
def test_gpu_ipc_handles(g):
    dev = g.mem_alloc(1 << 20)
    try:
        g.memset_d8_async(dev, 0x5A, 1 << 20, 0)
        g.stream_synchronize(0)
        try:
            handle = g.ipc_get_mem_handle(dev)
        except CudaError as exc:
            pytest.skip(f"IPC not supported here: {exc}")
        assert isinstance(handle, bytes) and len(handle) == 64 and any(handle)
        # Opening one's own handle: CUDA refuses it (historically
        # CUDA_ERROR_INVALID_CONTEXT); accept either outcome, checked.
        try:
            same = g.ipc_open_mem_handle(handle)
        except CudaError as exc:
            assert exc.call == "cuIpcOpenMemHandle"
        else:
            g.ipc_close_mem_handle(same)
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        out = subprocess.run(
            [sys.executable, "-c", _IPC_CHILD, handle.hex()],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert bytes.fromhex(out.stdout.strip()) == b"\x5a" * 16
    finally:
        g.mem_free(dev)
