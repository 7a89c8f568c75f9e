"""Interop with the real libraries on a GPU: CuPy, PyTorch, JAX, Numba, cuda.core.

The round-trip matrix of INTEROP.md, in both directions and through both
protocols: shapes ``()``, ``(0,)``, ``(3, 0, 2)``, contiguous, transposed,
``a[:, ::2]`` and ``a[::-1]``; bool, int8...uint64, float16/32/64, bfloat16
and complex64/128; zero-copy (same pointer) and write-through; the producer
deleted before the consumer; a producer stream still busy with a ~100 ms
kernel; consumer streams None/1/2/handle/-1; read-only exports; device 1 with
device 0 current; views alive at interpreter exit.

Every test needs the real backend (``GPUARRAY_BACKEND=cuda``), a GPU and the
peer library; each skip says which of these is missing.  Where a *peer*
cannot express a case (PyTorch has no negative strides, JAX arrays are always
dense, CuPy has no bfloat16, CAI has no bfloat16 typestr), the test says so:
it asserts the peer's refusal when the peer refuses clearly, and skips with
that reason when the peer cannot even build the input.

Peer facts these tests rely on (checked in the peers' sources):
* CuPy exports CAI v3 with ``stream`` = its current stream (1 for the null
  stream), synchronises the host on an imported CAI stream, passes its
  current stream to ``__dlpack__`` and orders the consumer's stream after
  its current stream when exporting.
* PyTorch exports CAI v2 without ``stream``; refuses ``readonly=True`` with
  TypeError; ``torch.from_dlpack`` passes its current stream (1 for the
  default stream) and ``max_version=(1, 0)``; its ``__dlpack__`` orders the
  consumer's stream after its *current* stream; it refuses a stream for CPU
  (pinned) tensors; negative strides abort some builds (pytorch#188023).
* JAX exports CAI v2 read-only; its CAI import keeps no reference to the
  producer; ``from_dlpack`` passes only ``stream`` and JAX returns legacy
  capsules; only compact (permuted-dense) layouts are accepted.
* cuda.core needs a consumer stream (or -1) and CAI v3.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import importlib.util
import os
import subprocess
import sys
import textwrap
import types
import warnings
import weakref
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the GPU
os.environ.setdefault("JAX_ENABLE_X64", "1")                    # keep 64-bit dtypes

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import gpuarray  # noqa: E402
from gpuarray import DeviceNDArray  # noqa: E402
from gpuarray.interop import _dlpack_capsule as dl  # noqa: E402
from tests.support import backend_is_sim  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[2])

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.interop,
    # Peers' own deprecations are not what these tests check.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

#: ~100 ms of spinning at 2 GHz: long enough that no read can race past it by luck.
SPIN_CYCLES = 200_000_000
N_STREAM = 1 << 16

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128", "bfloat16"]
LAYOUTS = ["()", "(0,)", "(3,0,2)", "contiguous", "transposed", "step", "reversed"]
DENSE_LAYOUTS = {"()", "(0,)", "(3,0,2)", "contiguous"}
#: What JAX must take from gpuarray.  Elsewhere (offset 0-d views, size 0, non-compact or
#: negative strides) it may refuse clearly or copy, but values it accepts must be right.
JAX_MUST_ACCEPT = {"contiguous", "transposed"}
CAI_NO_BF16 = "CAI has no bfloat16 typestr: it travels as '<V2', an opaque 2-byte type"


# ================================================================ environment
@pytest.fixture(autouse=True)
def real_gpu():
    if backend_is_sim():
        pytest.skip("needs the real CUDA backend (GPUARRAY_BACKEND=cuda)")
    try:
        if gpuarray.device_count() < 1:
            raise RuntimeError("the driver reports 0 devices")
        gpuarray.get_device(0)
    except Exception as e:  # CudaUnavailableError, CudaError ...
        pytest.skip(f"no CUDA device: {e}")
    yield
    dl.sweep_capsules()
    gc.collect()


def _import(name, reason):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip(name, reason=reason)


def np_dtype(name):
    if name == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def is_bf16(dtype):
    return np.dtype(dtype).name == "bfloat16"


def sample(shape, dtype, seed=0):
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        return rng.integers(1, 100, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.integers(1, 50, shape) + 1j * rng.integers(1, 50, shape)).astype(dtype)
    return rng.integers(1, 50, shape).astype(np.float32).astype(dtype)   # exact in bf16/f16


def bits(a):
    """Bit patterns to compare exactly (bfloat16 as uint16)."""
    a = np.asarray(a)
    return a.view(np.uint16) if a.dtype.kind == "V" and a.dtype.itemsize == 2 else a


def assert_values(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    np.testing.assert_array_equal(bits(got), bits(want))


BASE_SHAPE = {"(0,)": (0,), "(3,0,2)": (3, 0, 2)}


def apply_layout(a, layout):
    """The layout's view of an array of shape ``BASE_SHAPE.get(layout, (3, 4))``."""
    if layout == "()":
        return a[1, 2, ...]
    if layout == "transposed":
        return a.T
    if layout == "step":
        return a[:, ::2]
    if layout == "reversed":
        return a[::-1]
    return a


def gpu_pair(layout, dtype="float32"):
    """(host view, gpuarray view of the same values and layout)."""
    base = sample(BASE_SHAPE.get(layout, (3, 4)), np_dtype(dtype))
    return apply_layout(base, layout), apply_layout(gpuarray.to_device(base), layout)


class CAIOnly:
    """Exposes only the CAI of ``arr`` (to force a peer down the CAI path)."""

    def __init__(self, arr, **edits):
        self.arr, self.edits = arr, edits

    @property
    def __cuda_array_interface__(self):
        return {**self.arr.__cuda_array_interface__, **self.edits}


def check_view(ptr, shape, byte_strides, dtype, g: DeviceNDArray):
    """A peer's view of ``g`` is zero-copy with the same layout."""
    assert tuple(shape) == g.shape
    if dtype is not None:
        assert np.dtype(dtype).itemsize == g.itemsize
    if g.size:
        assert ptr == g.ptr
        if byte_strides is not None:
            for n, got, want in zip(g.shape, byte_strides, g.strides, strict=True):
                if n > 1:
                    assert got == want
        else:
            assert g.is_c_contiguous()


_PyCapsule_GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi))
_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def wrapped_strides(cap, byte_strides, itemsize):
    """The strides of an unconsumed capsule when they are a negative stride's unsigned
    quotient (``(2**64 - 16) // 4`` for -16 bytes of float32: CuPy 14.2's reversed views on
    an H200 run), else None."""
    name = _PyCapsule_GetName(cap)
    cls = dl.DLManagedTensorVersioned if name == b"dltensor_versioned" else dl.DLManagedTensor
    t = cls.from_address(_PyCapsule_GetPointer(cap, name)).dl_tensor
    if not t.strides:
        return None
    got = tuple(t.strides[:t.ndim])
    wrapped = tuple(((1 << 64) + b) // itemsize if b < 0 else b // itemsize for b in byte_strides)
    return got if got != tuple(b // itemsize for b in byte_strides) and got == tuple(
        w - (1 << 64) if w >= 1 << 63 else w for w in wrapped) else None


def consume_cai(peer_name, g, consume):
    """``consume()`` a CAI export of ``g``; bfloat16 travels as '<V2', which a peer may refuse."""
    if not is_bf16(g.dtype):
        return consume()
    try:
        return consume()
    except Exception as e:
        pytest.skip(f"{peer_name} refuses it ({CAI_NO_BF16}): {type(e).__name__}: {e}")


def check_import(g: DeviceNDArray, ptr, host):
    """gpuarray's import of a peer array: zero-copy, values of ``host``."""
    assert g.shape == host.shape
    if host.size:
        assert g.ptr == ptr
    assert_values(g.copy_to_host(), host)


# ================================================================= the peers
class CupyPeer:
    name = "CuPy"
    protocols = ("cai", "dlpack")

    def __init__(self, cp):
        self.cp = cp

    def make(self, host):
        if is_bf16(host.dtype):
            try:
                x = self.cp.asarray(host)
            except Exception as e:
                pytest.skip(f"CuPy {self.cp.__version__} has no bfloat16 arrays: {e}")
            if x.dtype != host.dtype:
                pytest.skip(f"CuPy {self.cp.__version__} has no bfloat16 dtype (got {x.dtype})")
            return x
        return self.cp.asarray(host)

    def view(self, x, layout):
        return apply_layout(x, layout)

    def consume(self, g, protocol):
        if protocol == "cai":
            return consume_cai(self.name, g, lambda: self.cp.asarray(CAIOnly(g)))
        try:
            return self.cp.from_dlpack(g)
        except (NotImplementedError, TypeError, ValueError) as e:
            if is_bf16(g.dtype):
                pytest.skip(f"CuPy {self.cp.__version__} refuses bfloat16: {e}")
            raise

    def ptr(self, x):
        return x.data.ptr

    def strides(self, x):
        return x.strides

    def to_host(self, x):
        return self.cp.asnumpy(x)

    def check(self, x, g):
        check_view(self.ptr(x), x.shape, self.strides(x), x.dtype, g)

    def write_zero(self, x):
        x[...] = 0
        self.cp.cuda.get_current_stream().synchronize()

    def produce(self, x, protocol):
        if protocol == "cai":
            return gpuarray.as_cuda_array(x)
        bogus = wrapped_strides(x.__dlpack__(max_version=(1, 0)), x.strides, x.itemsize)
        if bogus:
            with pytest.raises(BufferError, match="does not fit 64 bits"):
                gpuarray.from_dlpack(x)
            pytest.skip(f"CuPy {self.cp.__version__} exports the negative strides {x.strides} "
                        f"as {bogus} elements (an unsigned quotient): gpuarray refuses them with "
                        "BufferError (checked)")
        try:
            return gpuarray.from_dlpack(x)
        except BufferError as e:
            if is_bf16(x.dtype):
                pytest.skip(f"CuPy cannot export bfloat16 over DLPack: {e}")
            raise


class TorchPeer:
    name = "PyTorch"
    protocols = ("cai", "dlpack")

    def __init__(self, torch):
        self.torch = torch

    def make(self, host, device="cuda"):
        t = self.torch
        host = np.array(host, order="C")
        if is_bf16(host.dtype):
            return t.from_numpy(host.view(np.uint16).copy()).view(t.bfloat16).to(device)
        return t.from_numpy(host.copy()).to(device)

    def view(self, x, layout):
        if layout == "reversed":
            pytest.skip("PyTorch tensors cannot have negative strides (a[::-1] is refused)")
        return apply_layout(x, layout)

    def consume(self, g, protocol):
        if any(s < 0 for s in g.strides) and g.size > 1:
            pytest.skip("negative strides to PyTorch run in a subprocess "
                        "(test_torch_negative_strides): some builds abort")
        if protocol == "cai":
            return consume_cai(self.name, g, lambda: self.torch.as_tensor(CAIOnly(g)))
        return self.torch.from_dlpack(g)

    def ptr(self, x):
        return x.data_ptr()

    def strides(self, x):
        return tuple(s * x.element_size() for s in x.stride())

    def to_host(self, x):
        x = x.detach().cpu()
        if x.dtype == self.torch.bfloat16:
            return x.view(self.torch.int16).numpy().view(np_dtype("bfloat16"))
        return x.numpy()

    def check(self, x, g):
        assert x.is_cuda and x.device.index == g.device.id
        check_view(self.ptr(x), tuple(x.shape), self.strides(x), None, g)

    def write_zero(self, x):
        x.zero_()
        self.torch.cuda.synchronize()

    def produce(self, x, protocol):
        return gpuarray.as_cuda_array(x) if protocol == "cai" else gpuarray.from_dlpack(x)


class JaxPeer:
    name = "JAX"
    protocols = ("cai", "dlpack")

    def __init__(self, jax):
        self.jax = jax
        self.jnp = importlib.import_module("jax.numpy")

    def make(self, host, index=0):
        return self.jax.device_put(np.array(host, order="C"), self.jax.devices("gpu")[index])

    def view(self, x, layout):
        if layout not in DENSE_LAYOUTS:
            pytest.skip("JAX arrays are always dense and row-major: .T and slicing make copies")
        return x[1, 2] if layout == "()" else x

    def consume(self, g, protocol):
        if protocol == "cai":   # JAX keeps no reference to g: the test holds it
            return consume_cai(self.name, g, lambda: self.jnp.asarray(CAIOnly(g)))
        return self.jnp.from_dlpack(g)

    def ptr(self, x):
        return x.unsafe_buffer_pointer()

    def to_host(self, x):
        return np.asarray(x)

    def check(self, x, g):
        assert x.shape == g.shape and x.dtype.itemsize == g.itemsize
        # JAX may copy (e.g. to realign an offset view): values, not pointers

    def produce(self, x, protocol):
        if protocol == "cai":
            try:
                _ = x.__cuda_array_interface__
            except Exception as e:
                if is_bf16(x.dtype):
                    pytest.skip(f"JAX exports no CAI for bfloat16: {e}")
                raise
            return gpuarray.as_cuda_array(x)
        return gpuarray.from_dlpack(x)


class NumbaPeer:
    name = "Numba"
    protocols = ("cai",)

    def __init__(self, cuda):
        self.cuda = cuda

    def make(self, host):
        try:
            return self.cuda.to_device(np.array(host, order="C"))
        except Exception as e:
            if is_bf16(host.dtype):
                pytest.skip(f"Numba cannot hold bfloat16 arrays: {e}")
            raise

    def view(self, x, layout):
        if layout == "()":
            pytest.skip("Numba returns a host scalar for a full integer index (no 0-d views)")
        try:
            return apply_layout(x, layout)
        except Exception as e:
            pytest.skip(f"Numba cannot make the {layout} view: {e}")

    def consume(self, g, protocol):
        return consume_cai(self.name, g, lambda: self.cuda.as_cuda_array(CAIOnly(g)))

    def ptr(self, x):
        return x.__cuda_array_interface__["data"][0]

    def to_host(self, x):
        if any(s < 0 for s in x.strides):
            return None   # Numba cannot copy negative strides to the host (layout is checked)
        return x.copy_to_host()

    def check(self, x, g):
        check_view(self.ptr(x), x.shape, x.strides, x.dtype, g)

    def produce(self, x, protocol):
        return gpuarray.as_cuda_array(x)


@pytest.fixture
def cupy():
    cp = _import("cupy", "CuPy is not installed")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        pytest.skip(f"CuPy cannot use the GPU: {e}")
    return cp


@pytest.fixture
def torch():
    t = _import("torch", "PyTorch is not installed")
    if not t.cuda.is_available():
        pytest.skip("PyTorch has no usable CUDA device (CPU-only build or no driver)")
    return t


@pytest.fixture
def jax():
    j = _import("jax", "JAX is not installed")
    try:
        j.devices("gpu")
    except RuntimeError as e:
        pytest.skip(f"JAX has no GPU backend: {e}")
    j.config.update("jax_enable_x64", True)
    return j


@pytest.fixture
def numba_cuda():
    cuda = _import("numba.cuda", "Numba (numba-cuda) is not installed")
    if not cuda.is_available():
        pytest.skip("Numba finds no usable CUDA GPU")
    return cuda


@pytest.fixture
def ccore():
    _import("cuda.core", "cuda.core is not installed")
    try:
        from cuda.core import Device
        utils = importlib.import_module("cuda.core.utils")
    except ImportError:
        from cuda.core.experimental import Device  # cuda.core 0.x
        utils = importlib.import_module("cuda.core.experimental.utils")
    dev = Device(0)
    dev.set_current()

    def allocate(nbytes):  # cuda.core 1.2 wants the stream, keyword-only (a GPU run)
        try:
            return dev.allocate(nbytes, stream=dev.default_stream)
        except TypeError:
            return dev.allocate(nbytes)

    return types.SimpleNamespace(Device=Device, dev=dev, SMV=utils.StridedMemoryView,
                                 viewable=utils.args_viewable_as_strided_memory,
                                 allocate=allocate)


@pytest.fixture
def peer(request):
    name = request.param
    fixture = {"cupy": ("cupy", CupyPeer), "torch": ("torch", TorchPeer),
               "jax": ("jax", JaxPeer), "numba": ("numba_cuda", NumbaPeer)}[name]
    return fixture[1](request.getfixturevalue(fixture[0]))


CONSUMERS = [("cupy", "cai"), ("cupy", "dlpack"), ("torch", "cai"), ("torch", "dlpack"),
             ("jax", "cai"), ("jax", "dlpack"), ("numba", "cai")]
CONSUMER_IDS = [f"{p}-{proto}" for p, proto in CONSUMERS]


# ================================================= gpuarray -> peer (consumer)
def _peer_consumes(peer, proto, layout, dtype):
    host, g = gpu_pair(layout, dtype)
    if isinstance(peer, JaxPeer) and layout not in JAX_MUST_ACCEPT:
        try:
            x = peer.consume(g, proto)
        except (RuntimeError, ValueError, TypeError, BufferError, NotImplementedError) as e:
            assert str(e)
            return
        assert_values(peer.to_host(x), host)
        return
    x = peer.consume(g, proto)
    peer.check(x, g)
    got = peer.to_host(x)
    if got is not None:
        assert_values(got, host)
    return x, g, host


@pytest.mark.parametrize("peer, proto", CONSUMERS, ids=CONSUMER_IDS, indirect=["peer"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gpuarray_layouts_to_peer(peer, proto, layout):
    _peer_consumes(peer, proto, layout, "float32")


@pytest.mark.parametrize("peer, proto", CONSUMERS, ids=CONSUMER_IDS, indirect=["peer"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpuarray_dtypes_to_peer(peer, proto, dtype):
    _peer_consumes(peer, proto, "transposed" if not isinstance(peer, JaxPeer) else "contiguous",
                   dtype)


@pytest.mark.parametrize("peer, proto", [c for c in CONSUMERS if c[0] in ("cupy", "torch")],
                         ids=[i for i in CONSUMER_IDS if i.startswith(("cupy", "torch"))],
                         indirect=["peer"])
def test_peer_writes_through_and_sees_gpuarray_writes(peer, proto):
    """Zero-copy both ways: the peer's writes land in gpuarray's memory (and only in the
    view's elements), gpuarray's writes are seen by the peer."""
    base_host = sample((3, 4), np.int32)
    base = gpuarray.to_device(base_host)
    g = base[:, ::2]
    x = peer.consume(g, proto)
    peer.write_zero(x)
    expect = base_host.copy()
    expect[:, ::2] = 0
    assert_values(base.copy_to_host(), expect)
    g.fill(5)
    g.stream.synchronize()
    assert_values(peer.to_host(x), np.full((3, 2), 5, np.int32))


@pytest.mark.parametrize("peer, proto", CONSUMERS, ids=CONSUMER_IDS, indirect=["peer"])
def test_gpuarray_producer_deleted_before_peer_consumer(peer, proto):
    if isinstance(peer, JaxPeer) and proto == "cai":
        pytest.skip("JAX's CAI import keeps no reference to the producer (its "
                    "on_delete_callback is empty): the caller must keep it alive")
    host = sample((64, 64), np.float32)
    g = gpuarray.to_device(host)
    ref = weakref.ref(g)
    x = peer.consume(g, proto)
    del g
    gc.collect()
    dl.sweep_capsules()
    assert ref() is not None, "the consumer must keep the gpuarray memory alive"
    junk = [gpuarray.full((64, 64), 99.0, np.float32) for _ in range(8)]  # would reuse freed memory
    gpuarray.synchronize()
    assert_values(peer.to_host(x), host)
    del junk


# ================================================= peer -> gpuarray (producer)
PRODUCERS = CONSUMERS
PRODUCER_IDS = CONSUMER_IDS


def _gpuarray_consumes(peer, proto, layout, dtype):
    base = sample(BASE_SHAPE.get(layout, (3, 4)), np_dtype(dtype))
    x = peer.view(peer.make(base), layout)
    host = apply_layout(base, layout)
    g = peer.produce(x, proto)
    assert g.device.id == 0 and g.shape == np.shape(host)
    if isinstance(peer, JaxPeer):
        assert_values(g.copy_to_host(), host)
        if proto == "cai":
            assert g.readonly, "JAX exports its immutable arrays with readonly=True"
        if np.size(host):
            assert g.ptr == peer.ptr(x)
        return
    if is_bf16(np_dtype(dtype)) and proto == "cai":
        assert g.dtype.kind == "V" and g.itemsize == 2   # CAI's '<V2': the bytes, untyped
        assert_values(g.copy_to_host().view(np.uint16), bits(host))
        return
    assert g.dtype == np_dtype(dtype)
    check_import(g, peer.ptr(x), host)
    peer_strides = peer.strides(x) if hasattr(peer, "strides") else x.strides
    for n, got, want in zip(g.shape, g.strides, peer_strides, strict=True):
        if n > 1 and g.size:
            assert got == want


@pytest.mark.parametrize("peer, proto", PRODUCERS, ids=PRODUCER_IDS, indirect=["peer"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_peer_layouts_to_gpuarray(peer, proto, layout):
    _gpuarray_consumes(peer, proto, layout, "float32")


@pytest.mark.parametrize("peer, proto", PRODUCERS, ids=PRODUCER_IDS, indirect=["peer"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_peer_dtypes_to_gpuarray(peer, proto, dtype):
    _gpuarray_consumes(peer, proto, "contiguous", dtype)


@pytest.mark.parametrize("peer, proto", PRODUCERS, ids=PRODUCER_IDS, indirect=["peer"])
def test_peer_producer_deleted_before_gpuarray_consumer(peer, proto):
    host = sample((64, 64), np.float32)
    x = peer.make(host)
    g = peer.produce(x, proto)
    del x
    gc.collect()
    junk = [peer.make(np.full((64, 64), 99.0, np.float32)) for _ in range(8)]
    if hasattr(peer, "torch"):
        peer.torch.cuda.synchronize()
    view = g[::2]
    del g
    gc.collect()
    assert_values(view.copy_to_host(), host[::2])
    del junk


# ================================================================ PyTorch only
_NEG_SCRIPT = """
import sys, numpy as np, torch, gpuarray
class CAIOnly:
    def __init__(self, a): self.a = a
    @property
    def __cuda_array_interface__(self): return self.a.__cuda_array_interface__
g = gpuarray.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))[::-1]
try:
    t = torch.from_dlpack(g) if sys.argv[1] == "dlpack" else torch.as_tensor(CAIOnly(g))
except Exception as e:
    print("REFUSED", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    sys.exit(0)
print("ACCEPTED", t.cpu().numpy().tolist() == g.copy_to_host().tolist())
"""


@pytest.mark.parametrize("proto", ["dlpack", "cai"])
def test_torch_negative_strides(torch, proto):
    """PyTorch has no negative strides: a clear refusal is right; some builds abort the
    process instead (pytorch/pytorch#188023), hence the subprocess."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", _NEG_SCRIPT, proto], capture_output=True,
                         text=True, env=env, timeout=300)
    if res.returncode < 0:
        pytest.xfail(f"PyTorch {torch.__version__} aborts on negative strides instead of "
                     f"raising (pytorch/pytorch#188023): signal {-res.returncode}")
    assert res.returncode == 0, res.stderr
    out = res.stdout.strip().splitlines()[-1]
    if out.startswith("REFUSED"):
        assert out.split()[1] in ("RuntimeError", "ValueError", "BufferError", "TypeError"), out
    else:
        assert out == "ACCEPTED True", out


def test_readonly_export_to_torch(torch):
    """INTEROP item 5: PyTorch raises TypeError for readonly=True; a writable export works."""
    g = gpuarray.to_device(np.arange(6.0, dtype=np.float32))
    ro = gpuarray.from_cuda_array_interface({**g.__cuda_array_interface__, "data": (g.ptr, True)},
                                            owner=g)
    assert ro.readonly and ro.__cuda_array_interface__["data"][1] is True
    with pytest.raises(TypeError):
        torch.as_tensor(CAIOnly(ro))
    t = torch.as_tensor(CAIOnly(g))
    assert t.data_ptr() == g.ptr and t.is_cuda
    assert_values(t.cpu().numpy(), np.arange(6.0, dtype=np.float32))


def test_torch_pinned_tensor_to_gpuarray(torch):
    """A pinned PyTorch tensor (kDLCUDAHost) is imported zero-copy; PyTorch takes no stream
    for it, so none is passed."""
    t = torch.arange(8, dtype=torch.float32).pin_memory()
    assert t.__dlpack_device__()[0] == dl.kDLCUDAHost
    g = gpuarray.from_dlpack(t)
    assert g.ptr == t.data_ptr() and g.__dlpack_device__() == (3, 0)
    assert_values(g.copy_to_host(), np.arange(8, dtype=np.float32))


def test_gpuarray_mapped_host_view_to_peers(request):
    """Pinned (mapped) host memory seen by the device through gpuarray, then by peers via CAI."""
    h = gpuarray.mapped_array(16, dtype=np.float32)
    h[:] = np.arange(16, dtype=np.float32)
    v = gpuarray.asarray(h)
    assert v.ptr == h.ctypes.data
    seen = 0
    for name in ("cupy", "torch"):
        if importlib.util.find_spec(name) is None:
            continue
        try:
            lib = request.getfixturevalue(name)
        except pytest.skip.Exception:
            continue
        x = lib.asarray(CAIOnly(v)) if name == "cupy" else lib.as_tensor(CAIOnly(v))
        got = lib.asnumpy(x) if name == "cupy" else x.cpu().numpy()
        assert_values(got, np.arange(16, dtype=np.float32))
        seen += 1
    if not seen:
        pytest.skip("needs CuPy or PyTorch")


# ==================================================================== JAX only
def test_jax_cai_export_is_readonly(jax):
    x = JaxPeer(jax).make(np.arange(6.0))
    g = gpuarray.as_cuda_array(x)
    assert g.readonly and g.ptr == x.unsafe_buffer_pointer()
    with pytest.raises(ValueError, match="read-only"):
        g.fill(0)
    try:
        y = jax.numpy.from_dlpack(g)
    except BufferError as e:   # JAX asked for a legacy capsule, which has no READ_ONLY flag
        assert "legacy" in str(e)
    else:
        assert_values(np.asarray(y), np.arange(6.0))
    assert_values(np.asarray(jax.numpy.from_dlpack(g.copy())), np.arange(6.0))


# ================================================================= Numba only
def test_numba_streams_in_its_cai(numba_cuda):
    host = np.arange(8.0)
    s = numba_cuda.stream()
    d = numba_cuda.to_device(host, stream=s)
    desc = d.__cuda_array_interface__
    g = gpuarray.as_cuda_array(d)
    if desc.get("stream") is not None:
        assert g.stream.handle == desc["stream"]
    assert_values(g.copy_to_host(), host)
    legacy = numba_cuda.to_device(host, stream=numba_cuda.legacy_default_stream())
    assert gpuarray.as_cuda_array(legacy).stream == gpuarray.legacy_default_stream()
    dflt = numba_cuda.to_device(host, stream=numba_cuda.default_stream())
    if dflt.__cuda_array_interface__.get("stream") == 0:   # Numba's bug (INTEROP item 4)
        with pytest.raises(ValueError, match="'stream'"):
            gpuarray.as_cuda_array(dflt)
    else:
        assert_values(gpuarray.as_cuda_array(dflt).copy_to_host(), host)
    src = gpuarray.to_device(host)
    n = numba_cuda.from_cuda_array_interface(src.__cuda_array_interface__, owner=src, sync=True)
    assert n.__cuda_array_interface__["data"][0] == src.ptr
    assert_values(n.copy_to_host(), host)


# ============================================================= cuda.core
def _smv(ccore, obj, proto, stream_ptr):
    SMV = ccore.SMV
    meth = {"dlpack": "from_dlpack", "cai": "from_cuda_array_interface"}[proto]
    if hasattr(SMV, meth):
        return getattr(SMV, meth)(obj, stream_ptr=stream_ptr)
    return SMV(obj if proto == "dlpack" else CAIOnly(obj), stream_ptr=stream_ptr)


def _check_smv(v, g, opaque_bf16=False):
    strides = None if v.strides is None else tuple(s * g.itemsize for s in v.strides)
    check_view(v.ptr, v.shape, strides, v.dtype, g)
    assert v.device_id == g.device.id and v.is_device_accessible
    if opaque_bf16:   # through CAI: '<V2'
        assert v.dtype.kind == "V" and v.dtype.itemsize == 2
    else:
        assert v.dtype == g.dtype


@pytest.mark.parametrize("proto", ["cai", "dlpack"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gpuarray_layouts_to_cuda_core(ccore, proto, layout):
    host, g = gpu_pair(layout, "float64")
    s = ccore.dev.create_stream()
    try:
        v = _smv(ccore, g, proto, int(s.handle))
        _check_smv(v, g)
    except (ValueError, TypeError, BufferError, NotImplementedError) as e:
        if layout != "reversed":
            raise
        pytest.skip(f"cuda.core refuses negative strides: {e}")
    assert v.readonly is False


@pytest.mark.parametrize("proto", ["cai", "dlpack"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpuarray_dtypes_to_cuda_core(ccore, proto, dtype):
    host, g = gpu_pair("transposed", dtype)
    _check_smv(_smv(ccore, g, proto, -1), g, opaque_bf16=proto == "cai" and dtype == "bfloat16")


def test_cuda_core_readonly_and_decorator(ccore):
    g = gpuarray.to_device(np.arange(6.0))
    ro = gpuarray.from_cuda_array_interface({**g.__cuda_array_interface__, "data": (g.ptr, True)},
                                            owner=g)
    assert _smv(ccore, ro, "cai", -1).readonly
    assert _smv(ccore, ro, "dlpack", -1).readonly   # versioned capsule, READ_ONLY flag
    s = ccore.dev.create_stream()

    @ccore.viewable((0,))
    def kernel_like(arr, stream):
        return arr.view(int(stream.handle))

    v = kernel_like(g[::2], s)
    _check_smv(v, g[::2])


def test_cuda_core_buffers_to_gpuarray(ccore):
    buf = ccore.allocate(4096)
    if not hasattr(buf, "__dlpack__"):
        pytest.skip("this cuda.core's Buffer has no __dlpack__")
    ref = weakref.ref(buf)
    g = gpuarray.from_dlpack(buf)
    assert g.ptr == int(buf.handle) and g.nbytes == 4096 and g.ndim == 1
    assert g.device.id == ccore.dev.device_id
    f = g.view(np.uint8).view(np.float32)
    f[:] = np.arange(1024, dtype=np.float32)
    assert_values(gpuarray.from_dlpack(buf).view(np.uint8).view(np.float32).copy_to_host(),
                  np.arange(1024, dtype=np.float32))
    del buf
    gc.collect()
    assert ref() is not None   # the import keeps the Buffer alive
    assert_values(f[::-1][:4].copy_to_host(), [1023.0, 1022.0, 1021.0, 1020.0])
    if hasattr(ccore.SMV, "from_buffer") and hasattr(ccore.SMV, "__dlpack__"):
        buf2 = ccore.allocate(12 * 8)
        v = ccore.SMV.from_buffer(buf2, (4, 3), (1, 4), dtype=np.float64)   # a transposed view
        t = gpuarray.from_dlpack(v)
        assert t.ptr == int(buf2.handle) and t.shape == (4, 3) and t.strides == (8, 32)


# ============================================================ stream ordering
_SPIN_SRC = r"""
extern "C" __global__ void spin_then_fill(float* out, long long n, long long cycles, float value)
{
    long long start = clock64();
    while (clock64() - start < cycles) { }
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        out[i] = value;
    }
}
"""


def _cupy_spin_fill(cp, out, value, n=None):
    """On CuPy's current stream: spin ~100 ms, then write ``value`` into ``out``."""
    kernel = cp.RawKernel(_SPIN_SRC, "spin_then_fill")
    kernel((1,), (256,), (out, np.int64(out.size if n is None else n), np.int64(SPIN_CYCLES),
                          np.float32(value)))


_IDLE_TARGET = []


def _keep_busy(handle):
    """Queue ~100 ms of spinning on stream ``handle`` (PyTorch or CuPy does it)."""
    if importlib.util.find_spec("torch") is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch = importlib.import_module("torch")
        if torch.cuda.is_available():
            with torch.cuda.stream(torch.cuda.ExternalStream(handle)):
                torch.cuda._sleep(SPIN_CYCLES)
            return
    if importlib.util.find_spec("cupy") is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cp = importlib.import_module("cupy")
        if not _IDLE_TARGET:
            _IDLE_TARGET.append(cp.empty(1, cp.float32))
        from_external = getattr(cp.cuda.Stream, "from_external", None)  # CuPy 14
        with (from_external(gpuarray.external_stream(handle)) if from_external
              else cp.cuda.ExternalStream(handle)):
            _cupy_spin_fill(cp, _IDLE_TARGET[0], 0.0, n=0)
        return
    pytest.skip("needs PyTorch or CuPy to keep a stream busy")


def _busy_gpuarray(value):
    """A gpuarray array whose ``fill(value)`` is queued behind ~100 ms on its own stream."""
    s = gpuarray.stream(non_blocking=True)
    g = gpuarray.zeros(N_STREAM, np.float32, stream=s)
    g.fill(1.0)            # compile and load the fill kernel now, not behind the spin
    s.synchronize()
    _keep_busy(s.handle)
    g.fill(value)
    assert not s.query(), "premise: the producer stream must still be busy"
    return g


@pytest.mark.parametrize("how", ["as_cuda_array", "from_cuda_array_interface", "from_dlpack"])
def test_busy_cupy_producer_read_through_gpuarray(cupy, how):
    """A CuPy kernel still spinning on a non-blocking stream writes the data; gpuarray reads
    it with no host synchronisation in between and sees the final values."""
    cp = cupy
    c = cp.zeros(N_STREAM, cp.float32)
    cp.cuda.Device().synchronize()
    s = cp.cuda.Stream(non_blocking=True)
    probe = gpuarray.stream(non_blocking=True)
    with s:
        _cupy_spin_fill(cp, c, 7.0)
        # premise: a read ordered after nothing (sync=False, an unrelated stream) is stale
        stale = gpuarray.as_cuda_array(c, sync=False).bind(probe).copy_to_host()
        if how == "as_cuda_array":
            g = gpuarray.as_cuda_array(c)          # CAI stream = s: adopted
            assert g.stream.handle == s.ptr
        elif how == "from_cuda_array_interface":
            g = gpuarray.from_cuda_array_interface(c.__cuda_array_interface__)  # waits on s
        else:
            g = gpuarray.from_dlpack(c)            # CuPy orders our stream after s
    assert not s.done, "premise: the producer kernel must still be running"
    assert (stale == 0).all(), "premise: an unordered read sees stale data"
    out = gpuarray.empty_like(g)
    out[:] = g                                     # device work on gpuarray's side first
    assert (out.copy_to_host() == 7.0).all()
    assert (g.copy_to_host() == 7.0).all()


def test_busy_torch_producer_read_through_gpuarray(torch):
    t = torch.zeros(N_STREAM, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(SPIN_CYCLES)
        t.fill_(7.0)
        g = gpuarray.from_dlpack(t)   # torch orders our legacy stream after its current one
    assert not s.query(), "premise: the producer stream must still be busy"
    assert (g.copy_to_host() == 7.0).all()


@pytest.mark.parametrize("proto", ["cai", "dlpack"])
def test_busy_gpuarray_producer_read_by_cupy(cupy, proto):
    g = _busy_gpuarray(7.0)
    c = cupy.asarray(CAIOnly(g)) if proto == "cai" else cupy.from_dlpack(g)
    assert c.data.ptr == g.ptr
    assert (cupy.asnumpy(c) == 7.0).all()   # on CuPy's current (null) stream


def test_busy_gpuarray_producer_read_by_torch(torch):
    g = _busy_gpuarray(7.0)
    t = torch.from_dlpack(g)             # torch passes its current stream (1)
    assert t.data_ptr() == g.ptr
    assert (t.cpu().numpy() == 7.0).all()


def test_busy_gpuarray_producer_read_by_numba(numba_cuda):
    g = _busy_gpuarray(7.0)
    n = numba_cuda.as_cuda_array(CAIOnly(g))   # Numba synchronises on the CAI stream
    assert (n.copy_to_host() == 7.0).all()


@pytest.mark.parametrize("proto", ["cai", "dlpack"])
def test_busy_gpuarray_producer_viewed_by_cuda_core(ccore, proto):
    """cuda.core orders its consumer stream after ours: the idle consumer stream is busy
    right after the view is made."""
    g = _busy_gpuarray(7.0)
    consumer = gpuarray.stream(non_blocking=True)
    assert consumer.query()
    _smv(ccore, g, proto, consumer.handle)
    assert not consumer.query(), "the consumer stream must wait for the producer"
    consumer.synchronize()
    assert (g.copy_to_host() == 7.0).all()


@pytest.mark.parametrize("stream", [None, 1, 2, "handle", -1])
def test_dlpack_consumer_streams_on_a_gpu(stream):
    """INTEROP item 18 on hardware: None/1 legacy, 2 per-thread, a handle: that stream waits
    for the array's pending work; -1: nothing waits."""
    g = _busy_gpuarray(3.0)
    consumer = gpuarray.stream(non_blocking=True)
    waiter = {None: gpuarray.legacy_default_stream(), 1: gpuarray.legacy_default_stream(),
              2: gpuarray.per_thread_default_stream(), "handle": consumer, -1: consumer}[stream]
    arg = consumer.handle if stream == "handle" else stream
    cap = g.__dlpack__(stream=arg, max_version=(1, 1))
    assert waiter.query() is (stream == -1)
    imported = gpuarray.from_dlpack(cap)
    g.stream.synchronize()
    assert imported.ptr == g.ptr and (imported.copy_to_host() == 3.0).all()


# ====================================================== device 1, device 0 current
@pytest.fixture
def two_gpus():
    if gpuarray.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    return gpuarray.get_device(1)


def test_device1_cupy(cupy, two_gpus):
    with cupy.cuda.Device(1):
        c = cupy.arange(10.0)
    assert gpuarray.get_device().id == 0
    for g in (gpuarray.as_cuda_array(c), gpuarray.from_dlpack(c)):
        assert g.device.id == 1 and g.ptr == c.data.ptr
        assert_values(g.copy_to_host(), np.arange(10.0))
    assert gpuarray.get_device().id == 0
    with two_gpus:
        g1 = gpuarray.to_device(np.arange(6.0))
    for x in (cupy.asarray(CAIOnly(g1)), cupy.from_dlpack(g1)):
        assert x.device.id == 1 and x.data.ptr == g1.ptr
        with cupy.cuda.Device(1):
            assert_values(cupy.asnumpy(x), np.arange(6.0))


def test_device1_torch(torch, two_gpus):
    t = torch.arange(10.0, device="cuda:1")
    torch.cuda.synchronize(1)
    assert gpuarray.get_device().id == 0
    for g in (gpuarray.as_cuda_array(t), gpuarray.from_dlpack(t)):
        assert g.device.id == 1 and g.ptr == t.data_ptr()
        assert_values(g.copy_to_host(), np.arange(10.0))
    with two_gpus:
        g1 = gpuarray.to_device(np.arange(6.0))
    for x in (torch.from_dlpack(g1), torch.as_tensor(CAIOnly(g1))):
        assert x.device == torch.device("cuda", 1) and x.data_ptr() == g1.ptr
        assert_values(x.cpu().numpy(), np.arange(6.0))


def test_device1_jax(jax, two_gpus):
    if len(jax.devices("gpu")) < 2:
        pytest.skip("needs 2 GPUs visible to JAX")
    x = JaxPeer(jax).make(np.arange(10.0), index=1)
    g = gpuarray.from_dlpack(x)
    assert g.device.id == 1 and g.ptr == x.unsafe_buffer_pointer()
    assert_values(g.copy_to_host(), np.arange(10.0))
    with two_gpus:
        g1 = gpuarray.to_device(np.arange(6.0))
    y = jax.numpy.from_dlpack(g1)
    assert list(y.devices())[0].id == jax.devices("gpu")[1].id
    assert_values(np.asarray(y), np.arange(6.0))


# ====================================================== alive at interpreter exit
_EXIT_SCRIPT = r"""
import os
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import warnings
warnings.simplefilter("ignore")
import numpy as np, gpuarray
g = gpuarray.to_device(np.arange(12.0).reshape(3, 4))
unconsumed = g.__dlpack__(max_version=(1, 0))
views = [g.T, g[::-1]]
done = ["gpuarray"]
try:
    import cupy
    cupy.cuda.runtime.getDeviceCount()
except Exception:
    cupy = None
if cupy is not None:
    c_cai = cupy.asarray(g.T)
    c_dl = cupy.from_dlpack(g[:, ::2])
    g_from_c = gpuarray.as_cuda_array(cupy.arange(5.0))
    g_from_c_dl = gpuarray.from_dlpack(cupy.arange(10.0)[::2])  # (CuPy 14.2 garbles [::-1])
    cycle = [gpuarray.as_cuda_array(cupy.ones(3))]
    cycle.append(cycle)
    del cycle
    done.append("cupy")
try:
    import torch
    ok = torch.cuda.is_available()
except Exception:
    ok = False
if ok:
    t_dl = torch.from_dlpack(g)
    g_from_t = gpuarray.from_dlpack(torch.ones(4, device="cuda"))
    g_from_t_cai = gpuarray.as_cuda_array(torch.ones(4, device="cuda").T)
    done.append("torch")
try:
    import jax
    jax.devices("gpu")
    ok = True
except Exception:
    ok = False
if ok:
    import jax.numpy as jnp
    j = jnp.from_dlpack(g)
    g_from_j = gpuarray.from_dlpack(jnp.arange(4.0))
    done.append("jax")
try:
    from numba import cuda as ncuda
    ok = ncuda.is_available()
except Exception:
    ok = False
if ok:
    n = ncuda.as_cuda_array(g)
    g_from_n = gpuarray.as_cuda_array(ncuda.to_device(np.ones(3)))
    done.append("numba")
import gc
gc.disable()   # leave whatever is left to interpreter teardown
print("ok", " ".join(done), flush=True)
"""


def test_cross_library_views_alive_at_interpreter_exit():
    libs = [m for m in ("cupy", "torch", "jax", "numba") if importlib.util.find_spec(m)]
    if not libs:
        pytest.skip("no peer library installed (CuPy, PyTorch, JAX, Numba)")
    env = dict(os.environ, GPUARRAY_BACKEND="cuda",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(_EXIT_SCRIPT)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert res.returncode == 0, f"exit status {res.returncode}\n{res.stderr[-4000:]}"
    assert res.stdout.startswith("ok gpuarray"), res.stdout
    for bad in ("Traceback", "Exception ignored", "Segmentation fault", "CUDA_ERROR"):
        assert bad not in res.stderr, res.stderr[-4000:]
