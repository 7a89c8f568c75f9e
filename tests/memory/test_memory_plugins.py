"""Memory-manager plugins: every allocation reaches them, and the CuPy / RMM / PyTorch plugins.

1. A recording plugin sees every allocation of the library -- arrays,
   staging buffers of transfers, temporaries of overlapping copies, host
   memory -- and each is freed exactly once; views, imports and empty arrays
   allocate nothing.  (``tests/memory/test_memory.py`` covers the basic cases; these
   are the others.)
2. The CuPy, RMM and PyTorch plugins on the simulator, with stand-ins for the
   libraries that implement just the calls the plugins make, on the
   simulator's stream-ordered allocator and with each library's documented
   free semantics (a block returns to its allocation stream).  The race
   detector then judges the plugins' ordering exactly as for the pool manager.
   The stand-ins check the plugins' logic, not the libraries' behaviour.
3. The plugins with the real libraries: need the library and a GPU
   (``interop`` marker); skipped here with the reason.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import sys
import types
import warnings
import weakref

import numpy as np
import pytest

import gpuarray
from gpuarray import memory
from gpuarray.errors import CudaOutOfMemoryError
from gpuarray.memory import MemoryPointer, StreamOrderedPointer
from tests.support import simulated


@pytest.fixture(autouse=True)
def _manager_not_from_the_environment(monkeypatch):
    # These tests choose their managers; a GPUARRAY_MEMORY_MANAGER of the
    # caller's shell would turn every choice into a warning.
    monkeypatch.delenv("GPUARRAY_MEMORY_MANAGER", raising=False)
    gpuarray._config.reload()


# ------------------------------------------------ every allocation reaches it
class Recording(memory.HostOnlyCUDAMemoryManager):
    """Allocates through the default manager; records every allocation and free."""

    events: list[tuple[str, int, int]] = []  # (what, size, address)

    def initialize(self):
        super().initialize()
        self.inner = memory.DefaultMemoryManager(context=self.context)

    def memalloc(self, size):
        block = self.inner.memalloc(size)
        Recording.events.append(("device", size, block.device_pointer))
        return MemoryPointer(self.context, block.device_pointer, size, owner=block,
                             finalizer=lambda p=block.device_pointer, s=size:
                             Recording.events.append(("free", s, p)))

    def memhostalloc(self, size, mapped=False, portable=False, wc=False):
        Recording.events.append(("mapped" if mapped else "pinned", size, 0))
        return super().memhostalloc(size, mapped, portable, wc)

    def mempin(self, owner, pointer, size, mapped=False):
        Recording.events.append(("pin", size, int(pointer)))
        return super().mempin(owner, pointer, size, mapped)

    def get_memory_info(self):
        return self.inner.get_memory_info()

    def get_ipc_handle(self, memory_pointer):
        return self.inner.get_ipc_handle(memory_pointer)

    @property
    def interface_version(self):
        return 1


@pytest.fixture
def recording():
    Recording.events = []
    gpuarray.set_memory_manager(Recording)
    return Recording.events


def _device_allocs(events):
    return [size for what, size, _ in events if what == "device"]


def test_staging_buffers_and_temporaries_are_allocated_by_the_plugin(recording):
    d = gpuarray.zeros((4, 6), np.float32)
    assert _device_allocs(recording) == [96]
    d[:, ::2] = np.ones((4, 3), np.float64)   # strided destination, cast: a staging buffer
    assert _device_allocs(recording)[1:] == [4 * 3 * 4]
    d[1:] = d[:-1]                             # overlapping copy: a temporary
    assert _device_allocs(recording)[2:] == [3 * 6 * 4]
    d[:, 1::2].copy_to_host()                  # gather before the copy down
    assert _device_allocs(recording)[3:] == [48]
    d.astype(np.float16)                       # a new array
    assert _device_allocs(recording)[4:] == [48]
    gc.collect()
    frees = sorted((s, p) for what, s, p in recording if what == "free")
    allocs = sorted((s, p) for what, s, p in recording if what == "device")
    assert frees == [a for a in allocs if a[1] != d.ptr]  # all but d, each exactly once
    del d
    gc.collect()
    assert len([e for e in recording if e[0] == "free"]) == 5


def test_views_imports_and_empty_arrays_allocate_nothing(recording):
    d = gpuarray.to_device(np.arange(24.0).reshape(4, 6))
    n = len(recording)
    views = [d[1:], d.T, d.reshape(6, 4), d.view(np.int64), d.bind(gpuarray.stream()),
             d[::2, ::-1], d.squeeze(), d.ravel()]
    imported = [gpuarray.as_cuda_array(d), gpuarray.from_dlpack(d)]
    gpuarray.empty(0)
    gpuarray.zeros((3, 0))
    assert len(recording) == n
    del views, imported


def test_page_locked_host_memory_goes_through_the_plugin(recording):
    h = gpuarray.pinned_array(16, np.float32)
    m = gpuarray.mapped_array(8, np.int64)
    a = np.zeros(32)
    with gpuarray.pinned(a):
        pass
    kinds = [(what, size) for what, size, _ in recording]
    assert ("pinned", 64) in kinds and ("mapped", 64) in kinds and ("pin", 256) in kinds
    del h, m


# --------------------------------------------- stand-ins for the libraries
class _Libs:
    """Stand-ins for CuPy, RMM and PyTorch over the simulator's stream-ordered allocator.

    Each allocation is ``cuMemAllocAsync`` on the stream the library would
    use; dropping the library's object frees it with ``cuMemFreeAsync`` on
    that same stream -- the documented behaviour of the three pools (a freed
    block is reused in its allocation stream's order).
    """

    def __init__(self, sim):
        self.sim = sim
        self.allocated: list[tuple[int, int, int]] = []  # (size, stream handle, device)

    def _alloc(self, size, stream, device):
        from gpuarray.errors import CudaOutOfMemoryError as OOM

        with gpuarray.get_device(device).activate():
            try:
                ptr = self.sim.mem_alloc_async(size, stream)
            except OOM as e:
                raise MemoryError(str(e)) from None
        self.allocated.append((size, stream, device))
        return ptr

    def _free(self, ptr, stream, device):
        with gpuarray.get_device(device).activate():
            self.sim.mem_free_async(ptr, stream)

    def _mem_info(self, device=0):
        with gpuarray.get_device(device).activate():
            return self.sim.mem_get_info()

    # ------------------------------------------------------------- torch
    def torch(self):
        libs = self
        owners: dict[int, tuple[int, int]] = {}

        class OutOfMemoryError(RuntimeError):
            pass

        def caching_allocator_alloc(size, device=None, stream=None):
            assert isinstance(stream, int) and isinstance(device, int)
            try:
                ptr = libs._alloc(size, stream, device)
            except MemoryError as e:
                raise OutOfMemoryError(str(e)) from None
            owners[ptr] = (stream, device)
            return ptr

        def caching_allocator_delete(ptr):
            stream, device = owners.pop(ptr)
            libs._free(ptr, stream, device)

        mod = types.ModuleType("torch")
        mod.__version__ = "0+stand-in"
        mod.cuda = types.SimpleNamespace(
            caching_allocator_alloc=caching_allocator_alloc,
            caching_allocator_delete=caching_allocator_delete,
            OutOfMemoryError=OutOfMemoryError,
            mem_get_info=lambda device: libs._mem_info(device),
            memory_reserved=lambda device: 0, memory_allocated=lambda device: 0)
        return {"torch": mod}

    # -------------------------------------------------------------- cupy
    def cupy(self):
        libs = self
        current = {"stream": 0, "device": 0}

        class OutOfMemoryError(MemoryError):
            pass

        @contextlib.contextmanager
        def Device(i):
            prev, current["device"] = current["device"], i
            try:
                yield
            finally:
                current["device"] = prev

        class ExternalStream:  # deprecated in CuPy 14, which warns (seen on a GPU run)
            def __init__(self, ptr, device_id=-1, _new=False):
                if not _new:
                    warnings.warn("ExternalStream is deprecated. Use Stream.from_external() "
                                  "instead", DeprecationWarning, stacklevel=2)
                self.ptr, self.device_id = ptr, device_id

            def __enter__(self):
                assert self.device_id in (-1, current["device"])
                self.prev, current["stream"] = current["stream"], self.ptr
                return self

            def __exit__(self, *exc):
                current["stream"] = self.prev

        class CuPyPointer:
            def __init__(self, size):
                stream = current["stream"] or 1  # CuPy's null stream (0) is the legacy one
                try:
                    self.ptr = libs._alloc(size, stream, current["device"])
                except MemoryError as e:
                    raise OutOfMemoryError(str(e)) from None
                weakref.finalize(self, libs._free, self.ptr, stream, current["device"])

        class MemoryPool:
            def malloc(self, size):
                return CuPyPointer(size)

            def free_bytes(self):
                return 0

        pool = MemoryPool()
        mod = types.ModuleType("cupy")
        mod.get_default_memory_pool = lambda: pool
        mod.cuda = types.SimpleNamespace(
            Device=Device, ExternalStream=ExternalStream, MemoryPool=MemoryPool,
            Stream=types.SimpleNamespace(  # CuPy 14: the CUDA stream protocol
                from_external=lambda obj: ExternalStream(obj.__cuda_stream__()[1], _new=True)),
            memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError),
            runtime=types.SimpleNamespace(memGetInfo=lambda: libs._mem_info(current["device"])))
        return {"cupy": mod}

    # --------------------------------------------------------------- rmm
    def rmm(self):
        libs = self

        class Stream:
            def __init__(self, obj=None, _handle=None):
                if _handle is not None:
                    self.handle = _handle
                else:
                    version, self.handle = obj.__cuda_stream__()
                    assert version == 0

        class DeviceBuffer:
            def __init__(self, *, size, stream, mr):
                device = mr  # the stand-in resource is the device ordinal
                self.ptr = libs._alloc(size, stream.handle, device)
                weakref.finalize(self, libs._free, self.ptr, stream.handle, device)

        stream_mod = types.ModuleType("rmm.pylibrmm.stream")
        stream_mod.Stream = Stream
        stream_mod.DEFAULT_STREAM = Stream(_handle=0)
        stream_mod.LEGACY_DEFAULT_STREAM = Stream(_handle=1)
        stream_mod.PER_THREAD_DEFAULT_STREAM = Stream(_handle=2)
        pylibrmm = types.ModuleType("rmm.pylibrmm")
        pylibrmm.stream = stream_mod
        mr = types.ModuleType("rmm.mr")
        mr.get_per_device_resource = lambda device: device
        mod = types.ModuleType("rmm")
        mod.DeviceBuffer, mod.mr, mod.pylibrmm = DeviceBuffer, mr, pylibrmm
        return {"rmm": mod, "rmm.pylibrmm": pylibrmm, "rmm.pylibrmm.stream": stream_mod,
                "rmm.mr": mr}


PLUGINS = ["cupy", "rmm", "torch"]


@pytest.fixture
def stand_in(sim, monkeypatch, request):
    """Install the stand-in library named by the test's ``plugin`` parameter and select it."""
    name = request.node.callspec.params["plugin"]
    libs = _Libs(sim)
    for modname, mod in getattr(libs, name)().items():
        monkeypatch.setitem(sys.modules, modname, mod)
    monkeypatch.delitem(sys.modules, f"gpuarray.memory.plugins.{name}", raising=False)
    gpuarray.set_memory_manager(name)
    yield libs
    gpuarray.synchronize()
    memory._manager._reset_for_tests()
    sys.modules.pop(f"gpuarray.memory.plugins.{name}", None)  # never keep one bound to a stand-in


def _keep(a):
    mem = a._mem
    assert isinstance(mem, StreamOrderedPointer)
    return mem


@pytest.mark.parametrize("plugin", PLUGINS)
def test_stand_in_plugin_allocates_on_the_stream_of_use(plugin, stand_in):
    mgr = memory.get_memory_manager()
    assert isinstance(mgr, memory.HostOnlyCUDAMemoryManager)
    assert mgr.interface_version == 1
    a = gpuarray.to_device(np.arange(100.0))
    assert stand_in.allocated[-1] == (800, 1, 0)  # legacy default stream, device 0
    s = gpuarray.stream(non_blocking=True)
    with memory.allocation_stream(s):
        tmp = memory.allocate(64)
    assert stand_in.allocated[-1] == (64, s.handle, 0) and tmp.stream_uses.home is s
    assert a.copy_to_host()[-1] == 99.0
    info = gpuarray.get_memory_info()
    assert 0 < info.free <= info.total


@pytest.mark.parametrize("plugin", PLUGINS)
def test_stand_in_plugin_frees_never_overtake_work(plugin, stand_in):
    s, t = gpuarray.stream(non_blocking=True), gpuarray.stream(non_blocking=True)
    a = gpuarray.zeros(1 << 12, np.float32)
    a.bind(s).fill(1.0)             # a bind view's pending work
    b = gpuarray.zeros(1 << 12, np.float32, stream=t)  # an array on a non-blocking stream
    b.fill(2.0)
    mems = [_keep(a), _keep(b)]
    del a, b
    for m in mems:
        m.free()                    # StreamOrderError here if a free overtook the fills
    gpuarray.synchronize()


@pytest.mark.parametrize("plugin", PLUGINS)
def test_stand_in_plugin_out_of_memory_retries_then_states_the_size(plugin, stand_in, make_sim):
    # A 1 MiB device: the first free is queued behind the fill when the second asks.
    sim = make_sim(memory=1 << 20)
    stand_in.sim = sim
    gpuarray.set_memory_manager(plugin)
    a = gpuarray.empty(600 << 10, np.uint8)
    a.fill(1)
    del a
    b = gpuarray.empty(600 << 10, np.uint8)  # fails once, synchronises, retries
    assert b.size == 600 << 10
    with pytest.raises(CudaOutOfMemoryError, match=r"1\.0 MiB.*device 0"):
        gpuarray.empty(1 << 20, np.uint8)


# ------------------------------------------------------ the real libraries
def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


@pytest.mark.parametrize("plugin", PLUGINS)
def test_plugin_without_its_library_says_what_to_install(plugin, monkeypatch):
    if _installed(plugin):
        pytest.skip(f"{plugin} is installed here")
    monkeypatch.delitem(sys.modules, f"gpuarray.memory.plugins.{plugin}", raising=False)
    with pytest.raises(ImportError, match=rf"plugins\.{plugin} needs {plugin}.*Install it"):
        importlib.import_module(f"gpuarray.memory.plugins.{plugin}")
    with pytest.raises(ImportError, match="Install it"):
        gpuarray.set_memory_manager(plugin)


def _real(plugin: str):
    """The real library on a GPU, else skip saying why."""
    if simulated():
        pytest.skip(f"the {plugin} plugin allocates real CUDA memory: needs GPUARRAY_BACKEND=cuda "
                    "and a GPU (the simulator's memory, behind the stand-in driver too, is not "
                    "CUDA memory)")
    if not _installed(plugin):
        pytest.skip(f"{plugin} is not installed")
    try:
        mod = importlib.import_module(f"gpuarray.memory.plugins.{plugin}")
    except Exception as e:  # the library's own CUDA initialisation may fail
        pytest.skip(f"{plugin} cannot be used here: {type(e).__name__}: {e}")
    gpuarray.set_memory_manager(plugin)
    return mod


@pytest.mark.gpu
@pytest.mark.interop
@pytest.mark.parametrize("plugin", PLUGINS)
def test_real_plugin_round_trip_and_stream_order(plugin):
    _real(plugin)
    s = gpuarray.stream(non_blocking=True)
    a = gpuarray.to_device(np.arange(1 << 20, dtype=np.float32))
    a.bind(s).fill(3.0)
    b = a.copy()
    assert isinstance(a._mem, StreamOrderedPointer)
    del a
    gc.collect()
    c = gpuarray.empty(1 << 20, np.float32)  # may reuse a's block: ordered after the fill
    c.fill(1.0)
    assert b.copy_to_host()[:3].tolist() == [3.0, 3.0, 3.0]
    assert c.copy_to_host().sum() == 1 << 20
    info = gpuarray.get_memory_info()
    assert 0 < info.free <= info.total


@pytest.mark.gpu
@pytest.mark.interop
def test_real_torch_plugin_shares_pytorchs_cache():
    _real("torch")
    import torch

    before = torch.cuda.memory_allocated(0)
    a = gpuarray.empty(1 << 20, np.uint8)
    assert torch.cuda.memory_allocated(0) >= before + (1 << 20)
    del a
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated(0) == before


@pytest.mark.gpu
@pytest.mark.interop
def test_real_cupy_plugin_shares_cupys_pool():
    _real("cupy")
    import cupy

    pool = cupy.get_default_memory_pool()
    before = pool.used_bytes()
    a = gpuarray.empty(1 << 20, np.uint8)
    assert pool.used_bytes() >= before + (1 << 20)
    del a
    gc.collect()
    assert pool.used_bytes() == before


@pytest.mark.gpu
@pytest.mark.interop
def test_real_rmm_plugin_uses_the_current_resource():
    _real("rmm")
    import rmm

    stats = getattr(rmm, "statistics", None)
    if stats is None:
        pytest.skip("this RMM has no rmm.statistics")
    with stats.statistics():
        a = gpuarray.empty(1 << 20, np.uint8)
        assert stats.get_statistics().current_bytes >= 1 << 20
        del a
        gc.collect()
