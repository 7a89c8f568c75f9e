"""Driver fidelity II: host API rules of cuda.h the simulator bent (issue 38).

Each rule is checked through the real cuda-bindings in a child process over
the stand-in ``libcuda.so.1`` (a fresh process: nothing initialised, and
the simulated machine each child asks for), and on the simulator itself
where gpuarray reaches it.  Every expected code is one cuda.h documents for
the call (``/usr/local/cuda*/include/cuda.h``):

* initialisation -- before ``cuInit`` every call answers
  ``CUDA_ERROR_NOT_INITIALIZED`` except those a driver answers without one
  (the version and the error strings);
* contexts -- ``cuDevicePrimaryCtxGetState``; a released or destroyed
  context still current is ``CUDA_ERROR_CONTEXT_IS_DESTROYED``; scheduling
  flags; peer access by ``cuDeviceCanAccessPeer``; the context a pointer
  belongs to;
* error names -- ``cuGetErrorName``/``cuGetErrorString`` for every code of
  cuda.h's ``CUresult``;
* host memory -- overlapping, unmapped and managed registrations refused,
  ``cuMemHostGetFlags``, page-locked memory the host cannot give,
  ``cuMemcpy2D`` pitches;
* calls real programs make: ``cuMemAllocPitch``, ``cuMemsetD2D*``,
  ``cuMemcpyPeer``, ``cuCtxSetLimit``/``GetLimit``,
  ``cuCtxDisablePeerAccess``, ``cuPointerSetAttribute``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
from gpuarray_sim import SimBackend
from gpuarray_sim import standin as _standin

from gpuarray.errors import CudaError, CudaOutOfMemoryError
from sim.tests.backend.test_error_code_audit import _cuda_h

_PRELUDE = r"""
import ctypes, mmap, threading
import numpy as np
from cuda.bindings import driver as d

E = d.CUresult
DA, PA = d.CUdevice_attribute, d.CUpointer_attribute

def chk(res, code=0):
    assert int(res[0]) == int(code), (res, code)
    out = res[1:]
    return out[0] if len(out) == 1 else out
"""


@pytest.fixture(scope="module")
def folder():
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")
    try:
        return _standin.build()
    except _standin.StandinUnavailableError as e:
        pytest.skip(f"the stand-in driver cannot be built here: {e}")


def _child(folder, code: str, **env: str) -> str:
    """Run ``code`` in a fresh Python over the stand-in; it must print OK."""
    e = _standin.environment(folder)
    for k in ("CUDA_VISIBLE_DEVICES", "GPUARRAY_SIM_DEVICES", "GPUARRAY_SIM_CC",
              "CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "GPUARRAY_SIM_MEMORY"):
        e.pop(k, None)
    e.update(env)
    res = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=300, env=e)
    assert res.returncode == 0 and res.stdout.rstrip().endswith("OK"), (
        f"exit {res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}")
    # ordinary errors are return codes: the stand-in prints no traceback for them
    assert "Traceback" not in res.stderr, res.stderr
    return res.stdout


# ------------------------------------------------------------ 1. initialisation
def test_before_cuinit_every_call_is_not_initialized(folder):
    _child(folder, r"""
    from gpuarray_sim.standin import _serve, _support
    NI = E.CUDA_ERROR_NOT_INITIALIZED
    # What a driver answers before cuInit: the version and the error strings.
    assert chk(d.cuDriverGetVersion()) >= 13000
    assert chk(d.cuGetErrorName(E.CUDA_ERROR_INVALID_VALUE)) == b"CUDA_ERROR_INVALID_VALUE"
    assert chk(d.cuGetErrorString(E.CUDA_ERROR_OUT_OF_MEMORY)) == b"out of memory"
    # Everything else, through the bindings: what cuda.core and numba call first.
    for res in (d.cuDeviceGetCount(), d.cuDeviceGet(0),
                d.cuDeviceGetAttribute(DA.CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
                d.cuDeviceGetName(64, 0), d.cuDevicePrimaryCtxRetain(0),
                d.cuDevicePrimaryCtxGetState(0), d.cuCtxCreate(None, 0, 0), d.cuCtxGetCurrent(),
                d.cuCtxGetDevice(), d.cuMemAlloc(16), d.cuMemHostAlloc(16, 0),
                d.cuStreamCreate(0), d.cuMemGetInfo(), d.cuCtxSynchronize()):
        assert int(res[0]) == NI, res
    # ... and every call the stand-in serves (each handler, all arguments 0).
    import inspect
    for name, fn in sorted(_serve._HANDLERS.items()):
        if name in _support.BEFORE_INIT or name.startswith("nvJitLink"):
            continue
        n = len([p for p in inspect.signature(fn).parameters.values() if p.default is p.empty])
        assert _serve.serve(name, (0,) * n) == NI, name
    # the stand-in nvJitLink's calls are no driver calls: they need no cuInit (a NULL
    # argument answers NVJITLINK_ERROR_NULL_INPUT, as the real library does)
    assert _serve.serve("nvJitLinkVersion", (0, 0)) == 10
    assert sorted(_support.BEFORE_INIT) == ["cuDriverGetVersion", "cuGetErrorName",
                                            "cuGetErrorString", "cuInit"]
    chk(d.cuInit(0))
    assert chk(d.cuDeviceGetCount()) == 1
    print("OK")
    """)


def test_the_calls_answered_before_cuinit_are_those_cuda_h_documents_so():
    header = _cuda_h()
    if header is None:
        pytest.skip("no CUDA toolkit here: cuda.h (CUDA_HOME, /usr/local/cuda*) is not installed")
    from gpuarray_sim.standin import _support

    from sim.tests.backend.test_error_code_audit import _documented

    docs = _documented(header)
    text = header.read_text(errors="replace")
    assert "If ::cuInit()\n * has not been called, any function from the driver API will return\n" \
           " * ::CUDA_ERROR_NOT_INITIALIZED" in text
    for call in _support.BEFORE_INIT - {"cuInit"}:
        # no context, no device and no NOT_INITIALIZED among what cuda.h lists
        assert docs[call] == {"CUDA_SUCCESS", "CUDA_ERROR_INVALID_VALUE"}, (call, docs[call])


# ------------------------------------------------------------------ 2. contexts
_CONTEXTS = r"""
SPIN, YIELD, BLOCKING = 1, 2, 4
chk(d.cuInit(0))
assert chk(d.cuDeviceGetCount()) == 3
# cuDevicePrimaryCtxGetState (dev, *flags, *active); the flags of SetFlags are kept
assert tuple(chk(d.cuDevicePrimaryCtxGetState(0))) == (0, 0)
chk(d.cuDevicePrimaryCtxSetFlags(0, SPIN | YIELD), E.CUDA_ERROR_INVALID_VALUE)
chk(d.cuDevicePrimaryCtxSetFlags(0, YIELD | BLOCKING), E.CUDA_ERROR_INVALID_VALUE)
chk(d.cuDevicePrimaryCtxSetFlags(0, BLOCKING | 0x10))
chk(d.cuDevicePrimaryCtxGetState(3), E.CUDA_ERROR_INVALID_DEVICE)
ctx0 = chk(d.cuDevicePrimaryCtxRetain(0))
assert tuple(chk(d.cuDevicePrimaryCtxGetState(0))) == (BLOCKING | 0x10, 1)
chk(d.cuCtxSetCurrent(ctx0))
assert chk(d.cuCtxGetFlags()) == BLOCKING | 0x10
chk(d.cuCtxCreate(None, SPIN | BLOCKING, 0), E.CUDA_ERROR_INVALID_VALUE)
created = chk(d.cuCtxCreate(None, YIELD | 0x08, 0))
assert chk(d.cuCtxGetFlags()) == YIELD | 0x08
# the context a pointer was allocated or registered in
p = chk(d.cuMemAlloc(64))
hp = chk(d.cuMemHostAlloc(64, 0))
buf = np.zeros(4096, np.uint8)
chk(d.cuMemHostRegister(buf.ctypes.data, buf.nbytes, 0))
for ptr in (p, hp, buf.ctypes.data):
    assert int(chk(d.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_CONTEXT, ptr))) == int(created)
chk(d.cuMemHostUnregister(buf.ctypes.data))
chk(d.cuMemFreeHost(hp))
chk(d.cuMemFree(p))
chk(d.cuCtxDestroy(created))
assert int(chk(d.cuCtxGetCurrent())) == int(ctx0)
p0 = chk(d.cuMemAlloc(64))
assert int(chk(d.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_CONTEXT, p0))) == int(ctx0)

# peer access: devices 0 and 1 are sm_90, device 2 sm_86 (cuDeviceCanAccessPeer 0)
assert chk(d.cuDeviceCanAccessPeer(0, 1)) == 1
assert chk(d.cuDeviceCanAccessPeer(0, 2)) == 0 and chk(d.cuDeviceCanAccessPeer(0, 0)) == 0
ctx1 = chk(d.cuDevicePrimaryCtxRetain(1))
ctx2 = chk(d.cuDevicePrimaryCtxRetain(2))
chk(d.cuCtxEnablePeerAccess(ctx0, 0), E.CUDA_ERROR_INVALID_CONTEXT)
chk(d.cuCtxEnablePeerAccess(ctx2, 0), E.CUDA_ERROR_PEER_ACCESS_UNSUPPORTED)
chk(d.cuCtxDisablePeerAccess(ctx1), E.CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)
chk(d.cuCtxEnablePeerAccess(ctx1, 0))
chk(d.cuCtxEnablePeerAccess(ctx1, 0), E.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
chk(d.cuCtxDisablePeerAccess(ctx1))
chk(d.cuCtxDisablePeerAccess(ctx1), E.CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)
chk(d.cuCtxEnablePeerAccess(ctx1, 0))
chk(d.cuDevicePrimaryCtxRelease(1))
chk(d.cuDevicePrimaryCtxRelease(2))

# a context destroyed by another thread, current here: CONTEXT_IS_DESTROYED, and it stays current
other = chk(d.cuCtxCreate(None, 0, 0))
chk(d.cuCtxPopCurrent())
got = {}
ready, destroyed = threading.Event(), threading.Event()
def user():
    chk(d.cuCtxSetCurrent(other))
    ready.set()
    destroyed.wait()
    got["alloc"] = int(d.cuMemAlloc(16)[0])
    got["device"] = int(d.cuCtxGetDevice()[0])
    got["device of ctx0"] = int(chk(d.cuCtxGetDevice_v2(ctx0)))   # CUDA 13: names its context
    got["sync"] = int(d.cuCtxSynchronize()[0])
    got["current"] = int(chk(d.cuCtxGetCurrent()))
t = threading.Thread(target=user)
t.start()
ready.wait()
chk(d.cuCtxDestroy(other))
destroyed.set()
t.join()
IS_DESTROYED = int(E.CUDA_ERROR_CONTEXT_IS_DESTROYED)
assert got == {"alloc": IS_DESTROYED, "device": IS_DESTROYED, "sync": IS_DESTROYED,
               "device of ctx0": 0, "current": int(other)}, got

# a primary context whose last retain was released, still current
assert int(chk(d.cuCtxGetCurrent())) == int(ctx0)
chk(d.cuDevicePrimaryCtxRelease(0))
assert tuple(chk(d.cuDevicePrimaryCtxGetState(0))) == (BLOCKING | 0x10, 0)
chk(d.cuMemAlloc(16), E.CUDA_ERROR_CONTEXT_IS_DESTROYED)
chk(d.cuCtxSynchronize(), E.CUDA_ERROR_CONTEXT_IS_DESTROYED)
chk(d.cuCtxGetDevice(), E.CUDA_ERROR_CONTEXT_IS_DESTROYED)
assert int(chk(d.cuDevicePrimaryCtxRetain(0))) == int(ctx0)  # retained again: usable
chk(d.cuMemFree(chk(d.cuMemAlloc(16))))
print("OK")
"""


def test_context_rules_of_cuda_h(folder):
    _child(folder, _CONTEXTS, GPUARRAY_SIM_DEVICES="3", GPUARRAY_SIM_CC="9.0,9.0,8.6")


def test_context_rules_on_the_simulator():
    b = SimBackend(devices=3, compute_capability=[(9, 0), (9, 0), (8, 6)])
    b.init()
    assert b.device_can_access_peer(0, 1) and not b.device_can_access_peer(0, 2)
    assert not b.device_can_access_peer(1, 1)
    with pytest.raises(CudaError, match="more than one") as e:
        b.ctx_create(0, 3)
    assert e.value.code == 1
    ctx = b.primary_ctx_retain(0)
    b.ctx_set_current(ctx)
    with pytest.raises(CudaError) as e:
        b.ctx_enable_peer_access(ctx)
    assert e.value.code == 201
    with pytest.raises(CudaError) as e:
        b.ctx_enable_peer_access(b.primary_ctx_retain(2))
    assert e.value.name == "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"
    b.primary_ctx_release(0)
    with pytest.raises(CudaError) as e:
        b.mem_alloc(16)
    assert e.value.name == "CUDA_ERROR_CONTEXT_IS_DESTROYED"


# --------------------------------------------------------------- 3. error names
def test_every_cuda_h_result_code_has_a_name_and_a_string(folder):
    header = _cuda_h()
    if header is None:
        pytest.skip("no CUDA toolkit here: cuda.h (CUDA_HOME, /usr/local/cuda*) is not installed")
    text = header.read_text(errors="replace")
    body = text[text.index("typedef enum cudaError_enum"):]
    body = body[:body.index("} CUresult;")]
    codes = {int(v): k for k, v in re.findall(r"(CUDA_\w+)\s*=\s*(\d+)", body)}
    assert len(codes) > 90
    _child(folder, f"""
    codes = {codes!r}
    for code, name in codes.items():
        assert chk(d.cuGetErrorName(E(code))).decode() == name, (code, name)
        s = chk(d.cuGetErrorString(E(code))).decode()
        assert s and s != name and not s.startswith("CUDA_"), (code, s)
    for code in E:   # and those of the bindings' CUDA (newer codes included)
        assert chk(d.cuGetErrorName(code)).decode() == code.name, code
    chk(d.cuInit(0))
    assert chk(d.cuGetErrorString(E.CUDA_ERROR_UNSUPPORTED_LIMIT)) == \\
        b"limit is not supported on this architecture"
    assert chk(d.cuGetErrorString(E.CUDA_SUCCESS)) == b"no error"
    print("OK")
    """)


# --------------------------------------------------------------- 5. host memory
_HOST_MEMORY = r"""
chk(d.cuInit(0))
ctx = chk(d.cuDevicePrimaryCtxRetain(0))
chk(d.cuCtxSetCurrent(ctx))
PAGE = mmap.PAGESIZE
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
base = libc.mmap(None, 6 * PAGE, 3, 0x22, -1, 0)  # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
assert base not in (None, ctypes.c_void_p(-1).value)
assert libc.munmap(base + 5 * PAGE, PAGE) == 0    # the sixth page is a hole

# overlapping registrations, however they overlap
chk(d.cuMemHostRegister(base + PAGE, 2 * PAGE, 0))
for lo, n in ((0, 4), (PAGE, 1), (2 * PAGE, 2), (0, 2)):
    chk(d.cuMemHostRegister(base + lo, n * PAGE, 0), E.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
chk(d.cuMemHostRegister(base + 3 * PAGE, PAGE, 0))   # adjacent: fine
chk(d.cuMemHostUnregister(base + 3 * PAGE))
# addresses this process has not mapped, and ranges running past a mapping
for addr, n in ((0x1000, PAGE), (base + 4 * PAGE, 2 * PAGE), (base + 5 * PAGE, PAGE)):
    chk(d.cuMemHostRegister(addr, n, 0), E.CUDA_ERROR_INVALID_VALUE)
# managed memory is not pageable host memory
m = chk(d.cuMemAllocManaged(PAGE, 1))
chk(d.cuMemHostRegister(m, PAGE, 0), E.CUDA_ERROR_INVALID_VALUE)
chk(d.cuMemFree(m))

# cuMemHostGetFlags: the flags of cuMemHostAlloc/cuMemAllocHost memory, nothing else
chk(d.cuMemHostGetFlags(base + PAGE), E.CUDA_ERROR_INVALID_VALUE)   # registered
chk(d.cuMemHostUnregister(base + PAGE))
for flags in (0, 1, 2, 4, 7):
    hp = chk(d.cuMemHostAlloc(64, flags))
    assert chk(d.cuMemHostGetFlags(hp)) == flags, flags
    chk(d.cuMemFreeHost(hp))
hp = chk(d.cuMemAllocHost(64))
assert chk(d.cuMemHostGetFlags(hp)) == 0
chk(d.cuMemFreeHost(hp))
chk(d.cuMemHostGetFlags(base), E.CUDA_ERROR_INVALID_VALUE)          # pageable

# page-locked memory the host cannot give
chk(d.cuMemHostAlloc(1 << 60, 0), E.CUDA_ERROR_OUT_OF_MEMORY)
chk(d.cuMemAllocHost(1 << 60), E.CUDA_ERROR_OUT_OF_MEMORY)

# cuMemcpy2D: a pitch must hold its row (WidthInBytes + XInBytes)
dev = chk(d.cuMemAlloc(4 * 64))
host = np.arange(4 * 64, dtype=np.uint8)
def copy2d(dpitch, dx, spitch, sx, width=32, height=4):
    c = d.CUDA_MEMCPY2D()
    c.srcMemoryType, c.srcHost, c.srcPitch, c.srcXInBytes = (
        d.CUmemorytype.CU_MEMORYTYPE_HOST, host.ctypes.data, spitch, sx)
    c.dstMemoryType, c.dstDevice, c.dstPitch, c.dstXInBytes = (
        d.CUmemorytype.CU_MEMORYTYPE_DEVICE, dev, dpitch, dx)
    c.WidthInBytes, c.Height = width, height
    return d.cuMemcpy2D(c)
chk(copy2d(64, 32, 64, 32))
chk(copy2d(64, 40, 64, 0), E.CUDA_ERROR_INVALID_VALUE)    # dstPitch < Width + dstX
chk(copy2d(64, 0, 64, 33), E.CUDA_ERROR_INVALID_VALUE)    # srcPitch < Width + srcX
chk(copy2d(64, 0, 16, 0, height=1), E.CUDA_ERROR_INVALID_VALUE)
print("OK")
"""


def test_host_memory_rules_of_cuda_h(folder):
    _child(folder, _HOST_MEMORY)


def test_host_memory_rules_on_the_simulator():
    import numpy as np

    b = SimBackend()
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    buf = np.zeros(4 * 4096 + 4096, np.uint8)
    base = (buf.ctypes.data + 4095) & ~4095
    b.mem_host_register(base + 4096, 4096)
    with pytest.raises(CudaError) as e:
        b.mem_host_register(base, 3 * 4096)  # covers it without touching its ends
    assert e.value.code == 712
    with pytest.raises(CudaError, match="not mapped") as e:
        b.mem_host_register(0x1000, 4096)
    assert e.value.code == 1
    with pytest.raises(CudaOutOfMemoryError):
        b.mem_host_alloc(1 << 60)
    p = b.mem_host_alloc(64, write_combined=True)
    assert b.mem_host_get_flags(p) == 4
    with pytest.raises(CudaError):
        b.mem_host_get_flags(base + 4096)
    b.mem_host_unregister(base + 4096)
    b.mem_free_host(p)


# ------------------------------------------------------ 6. calls programs make
_SERVED = r"""
chk(d.cuInit(0))
ctx0 = chk(d.cuDevicePrimaryCtxRetain(0))
ctx1 = chk(d.cuDevicePrimaryCtxRetain(1))
chk(d.cuCtxSetCurrent(ctx0))
s = chk(d.cuStreamCreate(0))

# cuMemAllocPitch: a pitch that holds the row, the element sizes cuda.h allows
p, pitch = chk(d.cuMemAllocPitch(100, 3, 4))
assert pitch >= 100 and pitch % 4 == 0
assert tuple(map(int, chk(d.cuMemGetAddressRange(p)))) == (int(p), pitch * 3)
for w, h, e in ((100, 3, 3), (0, 3, 4), (100, 0, 8), (1 << 40, 1, 16)):
    chk(d.cuMemAllocPitch(w, h, e), E.CUDA_ERROR_INVALID_VALUE)

# cuMemsetD2D8/16/32 (+Async): rows of Width values, pitch bytes apart; the rest untouched
out = np.zeros(pitch * 3, np.uint8)
chk(d.cuMemsetD8(p, 0xEE, pitch * 3))
chk(d.cuMemsetD2D8(p, pitch, 0x11, 10, 3))
chk(d.cuMemsetD2D16Async(int(p) + 16, pitch, 0x2233, 4, 2, s))
chk(d.cuMemsetD2D32Async(int(p) + 32, pitch, 0x44556677, 2, 3, 0))
chk(d.cuStreamSynchronize(s))
chk(d.cuMemcpyDtoH(out.ctypes.data, p, out.nbytes))
rows = out.reshape(3, pitch)
want = np.full((3, pitch), 0xEE, np.uint8)
want[:, :10] = 0x11
want[:2, 16:24] = np.frombuffer(np.full(4, 0x2233, np.uint16).tobytes(), np.uint8)
want[:, 32:40] = np.frombuffer(np.full(2, 0x44556677, np.uint32).tobytes(), np.uint8)
assert (rows == want).all()
chk(d.cuMemsetD2D8(p, 8, 0, 10, 2), E.CUDA_ERROR_INVALID_VALUE)            # pitch < width
chk(d.cuMemsetD2D32(int(p) + 2, pitch, 0, 2, 2), E.CUDA_ERROR_INVALID_VALUE)  # misaligned
chk(d.cuMemsetD2D8(p, pitch, 0, 10, 4), E.CUDA_ERROR_INVALID_VALUE)       # past the end

# cuMemcpyPeer (+Async): device memory of two contexts' devices, no peer access needed
a = np.arange(64, dtype=np.uint8)
src = chk(d.cuMemAlloc(64))
chk(d.cuMemcpyHtoD(src, a.ctypes.data, 64))
chk(d.cuCtxSetCurrent(ctx1))
dst = chk(d.cuMemAlloc(64))
chk(d.cuCtxSetCurrent(ctx0))
chk(d.cuMemcpyPeer(dst, ctx1, src, ctx0, 64))
back = np.zeros(64, np.uint8)
chk(d.cuMemcpyDtoH(back.ctypes.data, dst, 64))
assert (back == a).all()
chk(d.cuMemsetD8(src, 0, 64))
chk(d.cuMemcpyPeerAsync(src, ctx0, dst, ctx1, 32, s))
chk(d.cuStreamSynchronize(s))
chk(d.cuMemcpyDtoH(back.ctypes.data, src, 64))
assert (back[:32] == a[:32]).all() and (back[32:] == 0).all()
chk(d.cuMemcpyPeer(dst, ctx0, src, ctx0, 64), E.CUDA_ERROR_INVALID_VALUE)  # dst is device 1's
chk(d.cuMemcpyPeer(dst, 0, src, ctx0, 64), E.CUDA_ERROR_INVALID_CONTEXT)

# cuCtxSetLimit / cuCtxGetLimit: every CUlimit answers; set values read back
L = d.CUlimit
for lim in LIMITS:   # cuda.h's CUlimit (the bindings may know newer ones)
    chk(d.cuCtxGetLimit(L(lim)))
for lim, v in ((L.CU_LIMIT_STACK_SIZE, 4096), (L.CU_LIMIT_PRINTF_FIFO_SIZE, 1 << 22),
               (L.CU_LIMIT_MALLOC_HEAP_SIZE, 64 << 20), (L.CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 64),
               (L.CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 4096),
               (L.CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED, 0)):
    chk(d.cuCtxSetLimit(lim, v))
    assert chk(d.cuCtxGetLimit(lim)) == v, lim
chk(d.cuCtxSetCurrent(ctx1))
assert chk(d.cuCtxGetLimit(L.CU_LIMIT_STACK_SIZE)) == 1024   # per context
chk(d.cuCtxSetLimit(L.CU_LIMIT_STACK_SIZE, 2048))
chk(d.cuDevicePrimaryCtxReset(1))                              # a reset forgets them
assert chk(d.cuCtxGetLimit(L.CU_LIMIT_STACK_SIZE)) == 1024
chk(d.cuCtxSetCurrent(ctx0))
chk(d.cuCtxSetLimit(L.CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 4), E.CUDA_ERROR_UNSUPPORTED_LIMIT)  # sm_90
chk(d.cuCtxSetLimit(L.CU_LIMIT_CIG_ENABLED, 1), E.CUDA_ERROR_INVALID_VALUE)   # query only
assert chk(d.cuCtxGetLimit(L.CU_LIMIT_CIG_ENABLED)) == 0

# cuCtxDisablePeerAccess
chk(d.cuCtxEnablePeerAccess(ctx1, 0))
chk(d.cuCtxDisablePeerAccess(ctx1))
chk(d.cuCtxDisablePeerAccess(ctx1), E.CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)

# cuPointerSetAttribute: SYNC_MEMOPS, the one attribute cuda.h lets one set
SYNC = PA.CU_POINTER_ATTRIBUTE_SYNC_MEMOPS
assert chk(d.cuPointerGetAttribute(SYNC, src)) is False
chk(d.cuPointerSetAttribute(True, SYNC, src))
assert chk(d.cuPointerGetAttribute(SYNC, src)) is True
chk(d.cuPointerSetAttribute(False, SYNC, src))
assert chk(d.cuPointerGetAttribute(SYNC, src)) is False
chk(d.cuPointerSetAttribute(ctx1, PA.CU_POINTER_ATTRIBUTE_CONTEXT, src), E.CUDA_ERROR_INVALID_VALUE)
chk(d.cuPointerSetAttribute(True, SYNC, 0x1000), E.CUDA_ERROR_INVALID_VALUE)
print("OK")
"""


def _cuda_h_limits() -> list[int]:
    """The values of cuda.h's ``CUlimit`` (those of CUDA 13.0 without a toolkit)."""
    header = _cuda_h()
    if header is None:
        return list(range(10))  # CU_LIMIT_STACK_SIZE ... CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED
    text = header.read_text(errors="replace")
    body = text[text.index("typedef enum CUlimit_enum"):]
    body = body[:body.index("} CUlimit;")]
    return [int(v, 0) for v in re.findall(r"CU_LIMIT_\w+\s*=\s*(0x[0-9a-fA-F]+|\d+)", body)]


def test_calls_real_programs_make_are_served(folder):
    limits = _cuda_h_limits()
    assert len(limits) >= 7
    _child(folder, f"LIMITS = {limits!r}\n" + _SERVED, GPUARRAY_SIM_DEVICES="2")
