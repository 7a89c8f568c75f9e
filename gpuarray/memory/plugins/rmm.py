"""RMM as gpuarray's device memory manager (NBEP 7 plugin).

``GPUARRAY_MEMORY_MANAGER=rmm`` (or ``=gpuarray.memory.plugins.rmm``, or
``gpuarray.set_memory_manager("rmm")``) makes gpuarray allocate
``rmm.DeviceBuffer`` objects from the device's current RMM memory resource
(``rmm.mr.get_per_device_resource(ordinal)``: a pool, an arena,
``cudaMallocAsync``... whatever the program configured, e.g. with
``rmm.reinitialize(pool_allocator=True)``).  Importing this module needs RMM.

Device: the resource is looked up by the manager's device ordinal and the
allocation is made with that device's context current.

Stream correctness.  RMM's resources are stream-ordered: ``DeviceBuffer``
allocates on its stream, and its destructor deallocates on the same stream;
a pool resource reuses a freed block right away for that stream, and for
another stream only after ordering it behind the free (RMM's
``stream_ordered_memory_resource`` waits on an event, or synchronises).  This
plugin (1) creates the buffer on the stream the memory will be used on (home,
from :func:`gpuarray.memory.allocation_stream`, else the legacy default
stream), passed to RMM through the CUDA stream protocol
(``gpuarray.Stream.__cuda_stream__``) -- an RMM too old to accept it gets the
legacy default stream, which then becomes home -- and (2) when gpuarray
drops the memory, first makes home wait on events of every other stream
recorded on it (:class:`~gpuarray.memory.StreamOrderedMemoryManager`), and
only then drops the buffer, so RMM's stream-ordered deallocation comes after
all work that used it.

IPC works when the resource's memory comes from ``cudaMalloc`` (e.g. a pool
over ``CudaMemoryResource``): the handle names the underlying allocation and
carries the block's offset.  ``cudaMallocAsync`` resources cannot be shared
this way.
"""

from __future__ import annotations

from typing import Any

from ..._device import Device, get_device
from ..._driver import get_backend
from ..._stream import Stream, legacy_default_stream
from .._manager import GetIpcHandleMixin
from .._pointer import MemoryInfo, MemoryPointer
from .._stream_ordered import StreamOrderedMemoryManager
from . import _require

rmm = _require("rmm", "rmm", "pip install rmm-cu13 (or rmm-cu12), or conda install -c rapidsai rmm")
try:
    from rmm.pylibrmm import stream as _rmm_stream  # RMM >= 24.12
except ImportError:
    from rmm._cuda import stream as _rmm_stream  # older RMM

__all__ = ["RMMMemoryManager"]

_STREAM_LEGACY, _STREAM_PER_THREAD = 1, 2


class RMMMemoryManager(GetIpcHandleMixin, StreamOrderedMemoryManager):
    """Device memory from RMM (``rmm.DeviceBuffer`` on the device's current resource).

    Parameters
    ----------
    context : Device, optional
        The device this instance manages (keyword argument).

    Examples
    --------
    >>> gpuarray.set_memory_manager("rmm")   # doctest: +SKIP
    """

    pool_description = "RMM's memory resource"

    @staticmethod
    def rmm_stream(home: Stream) -> tuple[Any, Stream]:
        """RMM's view of ``home``, and the stream the buffer will really live on.

        Parameters
        ----------
        home : Stream

        Returns
        -------
        tuple
            ``(rmm stream, gpuarray stream)``; the legacy default stream when
            this RMM cannot wrap ``home``.
        """
        if home.handle == _STREAM_LEGACY:
            return _rmm_stream.LEGACY_DEFAULT_STREAM, home
        if home.handle == _STREAM_PER_THREAD:
            return _rmm_stream.PER_THREAD_DEFAULT_STREAM, home
        try:
            return _rmm_stream.Stream(home), home  # CUDA stream protocol
        except TypeError:  # an RMM without the protocol: only its own, Numba's or CuPy's streams
            return _rmm_stream.LEGACY_DEFAULT_STREAM, legacy_default_stream(home.device)

    def memalloc(self, size: int) -> MemoryPointer:
        """Allocate ``size`` bytes as an ``rmm.DeviceBuffer`` on this manager's device.

        Parameters
        ----------
        size : int

        Returns
        -------
        StreamOrderedPointer
        """
        dev: Device = self.context if self.context is not None else get_device()
        rstream, home = self.rmm_stream(self.allocation_stream_for(dev))

        def attempt() -> Any:
            with dev.activate():
                mr = rmm.mr.get_per_device_resource(dev.id)
                try:
                    return rmm.DeviceBuffer(size=size, stream=rstream, mr=mr)
                except TypeError:  # an RMM whose DeviceBuffer takes no mr: the current device's
                    return rmm.DeviceBuffer(size=size, stream=rstream)

        buf = self.allocate_with_retry(dev, size, attempt, (MemoryError,), "rmm.DeviceBuffer")
        # RMM frees on the allocation stream (home), which waits for every user.
        return self.owned_pointer(dev, buf, int(buf.ptr), size, home)

    def get_memory_info(self) -> MemoryInfo:
        """Free and total device memory (memory RMM's pools hold counts as used).

        Returns
        -------
        MemoryInfo
        """
        return MemoryInfo(*get_backend().mem_get_info())


#: ``GPUARRAY_MEMORY_MANAGER=gpuarray.memory.plugins.rmm`` (or ``=rmm``) selects it.
_gpuarray_memory_manager = RMMMemoryManager
