"""``DeviceNDArray``: an n-dimensional array in device memory.

An array is a layout (shape, byte strides, dtype, the address of element
[0, ..., 0]) over memory kept alive by a :class:`~gpuarray.memory.MemoryPointer`,
plus a default stream and a read-only flag.  Views (indexing, transpose,
reshape when possible, ``view``) share the memory pointer, so the memory lives
as long as any view.  Layout arithmetic is delegated to ``_layout``; data
movement to ``_transfer``; streams follow the contract in ``_transfer``'s
docstring.

This module holds the array's one concern of owning a layout over memory:
construction, attributes, transfers, copies and exports.  Its other method
groups are mixins it inherits: ``ArrayViewsMixin`` (``_array_views.py``:
reshaping, indexing, indexed assignment) and ``ArrayProtocolsMixin``
(``_array_protocols.py``: NumPy's protocols, repr, scalar conversions).
"""

from __future__ import annotations

import ctypes
import operator
from typing import Any, Literal

import numpy as np

from . import _config, _graph, _layout, _transfer
from ._array_protocols import ArrayProtocolsMixin
from ._array_views import ArrayViewsMixin, _check_dtype
from ._device import Device, current_primary, get_device
from ._driver import checkpoint
from ._stream import Stream, _device_for, as_stream
from .interop import _core
from .interop._cai_desc import make_cai
from .interop._dlpack_export import export_capsule
from .memory import MemoryPointer, allocate, record_stream
from .memory._manager import allocate_current

__all__ = ["DeviceNDArray", "is_device_array"]


class DeviceNDArray(ArrayViewsMixin, ArrayProtocolsMixin):
    """An array in device memory.

    Most arrays come from :func:`gpuarray.to_device`, :func:`gpuarray.empty`
    and friends, or from imports (:func:`gpuarray.as_cuda_array`,
    :func:`gpuarray.from_dlpack`).  The constructor follows Numba's.

    Parameters
    ----------
    shape : int or tuple of int
    strides : tuple of int or None
        Byte strides; C-contiguous when None.
    dtype : data-type
    stream : Stream, int or None
        The array's default stream (None: the library default stream).
    gpu_data : MemoryPointer, optional
        Memory to use (its ``device_pointer`` is element [0, ..., 0]);
        allocated when omitted.

    Examples
    --------
    >>> d = gpuarray.to_device(np.arange(6).reshape(2, 3))   # doctest: +SKIP
    >>> d[:, 1].copy_to_host()                               # doctest: +SKIP
    array([1, 4])
    """

    __slots__ = ("shape", "strides", "dtype", "_ptr", "_mem", "stream", "readonly", "device",
                 "_cai", "_dl", "_cf", "_dlt", "__weakref__")
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype
    _ptr: int
    _mem: MemoryPointer
    stream: Stream
    readonly: bool
    device: Device
    _cai: dict[str, Any] | None
    _dl: int
    _cf: tuple[bool, bool] | None
    _dlt: Any  # the DLPack C exchange table's DLTensor, made on first use (interop._dlpack_table)

    def __init__(self, shape, strides, dtype, stream: Any = None, gpu_data: MemoryPointer | None = None) -> None:
        dtype = _check_dtype(dtype)
        shape = _shape_tuple(shape)
        strides = _layout.c_strides(shape, dtype.itemsize) if strides is None else tuple(int(s) for s in strides)
        if len(strides) != len(shape):
            raise ValueError(f"strides {strides} do not match shape {shape}")
        lo, hi = _layout.extent(shape, strides, dtype.itemsize)
        if gpu_data is None:
            if lo < 0:
                raise ValueError(f"negative strides {strides} need gpu_data to point into memory")
            gpu_data = allocate(hi, _device_for(stream), stream)  # the stream's device, if one is given
        device = gpu_data.context if isinstance(gpu_data.context, Device) else get_device()
        made = DeviceNDArray._make(shape, strides, dtype, gpu_data.device_pointer, gpu_data,
                                   as_stream(stream, device), False, device)
        for name in _SLOTS:  # _make is the one place that fills an array
            setattr(self, name, getattr(made, name))

    # The collaborators of the class that live above it (DESIGN.md, layers), set
    # where the layers meet, by the package's __init__: the interop-aware
    # coercion of assigned values (``_coerce.as_device_source``) and pickling
    # through the host (``_wire.reduce_array``).
    _as_source: Any = staticmethod(lambda value, device: value)
    _reduce: Any = None

    @classmethod
    def _make(cls, shape, strides, dtype, ptr, mem, stream, readonly, device,
              record: bool = True) -> DeviceNDArray:
        """A new array of these values, unchecked (every array is made here)."""
        self = object.__new__(cls)
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self._ptr = ptr
        self._mem = mem
        self.stream = stream
        self.readonly = readonly
        self.device = device
        self._cai = None
        self._cf = None  # cached (C-contiguous, F-contiguous): the layout never changes
        self._dl = 2  # DLPack device type of the memory: 2 device, 3 page-locked host, 13 managed
        # Stream-ordered frees wait for this array's stream.  A plain
        # MemoryPointer that owns nothing (the default manager's) is not
        # stream-ordered: record_stream would find nothing to record.
        if record and (type(mem) is not MemoryPointer or mem.owner is not None):
            record_stream(mem, stream)
        return self

    def _view(self, shape, strides, offset: int = 0, dtype=None) -> DeviceNDArray:
        # Same memory, same stream: the parent already recorded the stream.
        v = DeviceNDArray._make(tuple(shape), tuple(strides), self.dtype if dtype is None else dtype,
                                self._ptr + offset, self._mem, self.stream, self.readonly, self.device,
                                record=False)
        v._dl = self._dl
        return v

    # ------------------------------------------------------------ attributes
    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the elements (``size * itemsize``)."""
        return self.size * self.dtype.itemsize

    @property
    def alloc_size(self) -> int:
        """Bytes of device memory the array spans (its extent)."""
        lo, hi = _layout.extent(self.shape, self.strides, self.dtype.itemsize)
        return hi - lo

    @property
    def flags(self) -> dict[str, bool]:
        """``{"C_CONTIGUOUS": ..., "F_CONTIGUOUS": ..., "WRITEABLE": ...}``."""
        return {"C_CONTIGUOUS": self.is_c_contiguous(), "F_CONTIGUOUS": self.is_f_contiguous(),
                "WRITEABLE": not self.readonly}

    @property
    def gpu_data(self) -> MemoryPointer:
        """A :class:`MemoryPointer` over the array's extent (keeps the memory alive)."""
        lo, hi = _layout.extent(self.shape, self.strides, self.dtype.itemsize)
        if self.size == 0:
            return MemoryPointer(self.device, 0, 0, owner=self._mem)
        return MemoryPointer(self.device, self._ptr + lo, hi - lo, owner=self._mem)

    @property
    def device_ctypes_pointer(self) -> ctypes.c_void_p:
        """Address of element [0, ..., 0] as ``ctypes.c_void_p`` (None for size 0)."""
        return ctypes.c_void_p(self._ptr if self.size else None)

    @property
    def ptr(self) -> int:
        """Address of element [0, ..., 0] (0 for size 0)."""
        return self._ptr if self.size else 0

    @property
    def T(self) -> DeviceNDArray:
        """The transposed view."""
        return self.transpose()

    def _contiguity(self) -> tuple[bool, bool]:
        cf = self._cf
        if cf is None:
            n = self.dtype.itemsize
            cf = self._cf = (_layout.is_c_contiguous(self.shape, self.strides, n),
                             _layout.is_f_contiguous(self.shape, self.strides, n))
        return cf

    def is_c_contiguous(self) -> bool:
        """Whether the array is C-contiguous (NumPy's relaxed rules)."""
        return self._contiguity()[0]

    def is_f_contiguous(self) -> bool:
        """Whether the array is Fortran-contiguous (NumPy's relaxed rules)."""
        return self._contiguity()[1]

    def __len__(self) -> int:
        """Length of the first axis; ``TypeError`` for a 0-d array, as NumPy."""
        if not self.shape:
            raise TypeError("len() of unsized object (a 0-d DeviceNDArray)")
        return self.shape[0]

    # --------------------------------------------------------------- writes
    def _check_writeable(self, what: str) -> None:
        if self.readonly:
            raise ValueError(f"{what}: this DeviceNDArray is read-only (it was imported read-only)")

    # ---------------------------------------------------------- transfers
    def _stream(self, stream: Any) -> Stream:
        return self.stream if stream is None else as_stream(stream, self.device)

    def copy_to_host(self, ary: np.ndarray | None = None, stream: Any = None) -> np.ndarray:
        """Copy the array to host memory.

        Parameters
        ----------
        ary : numpy.ndarray, optional
            Destination of the same shape (any layout, any dtype: cast as
            NumPy).  A new array of this array's layout is made when omitted.
        stream : Stream, optional
            Without a stream the result is complete on return.  With one, a
            copy into page-locked memory is asynchronous: synchronise the
            stream before reading it.

        Returns
        -------
        numpy.ndarray
        """
        s = self._stream(stream)
        if ary is None:
            order: Literal["C", "F"] = \
                "F" if self.is_f_contiguous() and not self.is_c_contiguous() else "C"
            ary = np.empty(self.shape, dtype=self.dtype, order=order)
        elif not isinstance(ary, np.ndarray):
            raise TypeError(f"copy_to_host(ary=...) needs a NumPy array, got {type(ary).__name__}")
        elif ary.shape != self.shape:
            raise ValueError(f"copy_to_host: destination shape {ary.shape} differs from {self.shape}")
        elif not ary.flags.writeable:
            raise ValueError("copy_to_host: the destination array is read-only")
        if checkpoint().capturing:
            _graph.keep(s, self)  # recorded (into page-locked memory): the graph reads self
        with _transfer.on_stream(s, self.stream):
            _transfer.dtoh(self.device, s, ary, self._ptr, self.strides, self.dtype,
                           sync=stream is None)
        return ary

    def get(self, stream: Any = None) -> np.ndarray:
        """Copy to a new host array (CuPy's name for :meth:`copy_to_host`).

        Parameters
        ----------
        stream : Stream, optional
            As for :meth:`copy_to_host`.

        Returns
        -------
        numpy.ndarray
        """
        return self.copy_to_host(stream=stream)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """A host copy for NumPy (``np.asarray(arr)``); ``copy=False`` raises ValueError."""
        if copy is False:
            raise ValueError("a DeviceNDArray cannot be viewed as a NumPy array without copying")
        host = self.copy_to_host()
        return host if dtype is None else host.astype(dtype, copy=False)

    def copy_to_device(self, ary: Any, stream: Any = None) -> None:
        """Copy data into this array from the host or another device array.

        Parameters
        ----------
        ary : array_like
            NumPy array, scalar, sequence, ``DeviceNDArray``, or an object
            exporting ``__cuda_array_interface__`` or ``__dlpack__``.  Must
            broadcast to this array's shape; cast as NumPy.
        stream : Stream, optional
        """
        self._assign(ary, self._stream(stream))

    def _assign(self, value: Any, s: Stream) -> None:
        self._check_writeable("assignment")
        if checkpoint().capturing:
            _graph.keep(s, self, value)  # captured: the graph writes self (and reads value)
        if type(value) in _SCALARS or isinstance(value, np.generic):
            self._fill_from(value, s)  # the fill kernel casts it with NumPy's assignment rules
            return
        if type(value) is np.ndarray:
            src: Any = value
        else:  # interop-aware coercion: set by the package (gpuarray/__init__.py)
            src = DeviceNDArray._as_source(value, self.device)
        if isinstance(src, DeviceNDArray):
            self._copy_from(src, s)
            return
        host = np.asarray(src)
        if host.ndim == 0 or host.size == 1 and host.ndim <= self.ndim:
            scalar = np.asarray(host.reshape(()), dtype=self.dtype) if host.dtype != self.dtype \
                else host.reshape(())
            self._fill_from(scalar[()], s)
            return
        _layout.broadcast_shapes(host.shape, self.shape)  # ValueError naming both shapes
        if host.shape != self.shape:
            if len(host.shape) > len(self.shape) or _layout.broadcast_shapes(host.shape, self.shape) != self.shape:
                raise ValueError(f"could not broadcast input array from shape {host.shape} "
                                 f"into shape {self.shape}")
            host = np.broadcast_to(host, self.shape)
        self._upload_from(host, s)

    # The three ways data arrives, on stream ``s`` (funnelled with the array's stream):
    def _fill_from(self, value: Any, s: Stream) -> None:
        """Every element set to the scalar ``value`` (a NumPy scalar or a Python number)."""
        if s is self.stream:
            _transfer.device_fill(self.device, s, self._ptr, self.strides, self.dtype,
                                  self.shape, value)
            return
        with _transfer.on_stream(s, self.stream):
            _transfer.device_fill(self.device, s, self._ptr, self.strides, self.dtype,
                                  self.shape, value)

    def _copy_from(self, src: DeviceNDArray, s: Stream) -> None:
        """A copy (and cast) of device array ``src``, broadcast to this array's shape."""
        strides = _layout.broadcast_strides(src.shape, src.strides, self.shape)
        with _transfer.on_stream(s, self.stream, src.stream):
            _transfer.device_copy(self.device, s, self._ptr, self.strides, self.dtype,
                                  src._ptr, strides, src.dtype, self.shape)

    def _upload_from(self, host: np.ndarray, s: Stream) -> None:
        """A copy (and cast) of host array ``host``, already of this array's shape."""
        with _transfer.on_stream(s, self.stream):
            _transfer.htod(self.device, s, self._ptr, self.shape, self.strides, self.dtype, host)

    # ------------------------------------------------------------ compute
    def fill(self, value: Any, stream: Any = None) -> DeviceNDArray:
        """Set every element to ``value`` (cast as NumPy).

        Parameters
        ----------
        value : scalar
        stream : Stream, optional

        Returns
        -------
        DeviceNDArray
            ``self``.
        """
        if type(value) not in _SCALARS and np.ndim(value) != 0:
            raise ValueError(f"fill() takes a scalar, got an array of shape {np.shape(value)}")
        self._assign(value, self._stream(stream))
        return self

    def copy(self, order: str = "C", stream: Any = None) -> DeviceNDArray:
        """A new array with a copy of the data.

        Parameters
        ----------
        order : {"C", "F", "A", "K"}
        stream : Stream, optional
            Where the copy runs (default: this array's stream); the result's
            default stream is this array's.

        Returns
        -------
        DeviceNDArray
        """
        return self.astype(self.dtype, order=order, stream=stream)

    def astype(self, dtype: Any, order: str = "K", copy: bool = True, stream: Any = None) -> DeviceNDArray:
        """A copy cast to ``dtype`` (NumPy's unsafe casting).

        Parameters
        ----------
        dtype : data-type
        order : {"C", "F", "A", "K"}
        copy : bool
            False returns ``self`` when nothing needs to change.
        stream : Stream, optional

        Returns
        -------
        DeviceNDArray
        """
        dt = _check_dtype(dtype)
        order = order.upper()
        if order not in ("C", "F", "A", "K"):
            raise ValueError(f"order must be one of 'C', 'F', 'A', 'K', got {order!r}")
        fortran = order == "F" or (order in ("A", "K") and self.is_f_contiguous() and not self.is_c_contiguous())
        if not copy and dt == self.dtype and (self.is_f_contiguous() if fortran else self.is_c_contiguous()):
            return self
        strides = (_layout.f_strides if fortran else _layout.c_strides)(self.shape, dt.itemsize)
        if checkpoint().capturing:
            _graph.keep(self._stream(stream), self)  # captured: the graph reads self
        mem = allocate(self.size * dt.itemsize, self.device, self._stream(stream))
        out = DeviceNDArray._make(self.shape, strides, dt, mem.device_pointer, mem, self.stream,
                                  False, self.device)
        s = self._stream(stream)
        with _transfer.on_stream(s, self.stream):
            _transfer.device_copy(self.device, s, out._ptr, strides, dt, self._ptr, self.strides,
                                  self.dtype, self.shape)
        return out

    # ------------------------------------------------------------- interop
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA Array Interface v3 description (cached per array).

        ``stream`` is this array's default stream (1 legacy, 2 per-thread,
        else the handle); every operation on the array is funnelled into it,
        so a consumer that synchronises on it sees all pending work.
        ``GPUARRAY_CAI_EXPORT_STREAM=0`` exports ``None``.
        """
        cai = self._cai
        if cai is None:
            captured = _graph._unlaunched and _graph.check_graph_memory(
                self.stream, "a CUDA Array Interface export", self._ptr)
            stream_value = self.stream.cai_value if _config.get().cai_export_stream else None
            cai = make_cai(ptr=self.ptr, shape=self.shape, byte_strides=self.strides,
                           dtype=self.dtype, readonly=self.readonly, stream_value=stream_value,
                           c_contiguous=self.is_c_contiguous())
            if not captured:  # a capture's graph memory is asked about again once it ends
                self._cai = cai
        return cai

    def __dlpack_device__(self) -> tuple[int, int]:
        """The DLPack device of the array's memory.

        Returns
        -------
        tuple of int
            ``(2, ordinal)`` for device memory, ``(3, 0)`` for page-locked
            host memory, ``(13, 0)`` for managed memory.
        """
        return (2, self.device.id) if self._dl == 2 else (self._dl, 0)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: bool | None = None) -> Any:
        """Export the array as a DLPack capsule (DLPack 1.x, array API 2024.12).

        Parameters
        ----------
        stream : int or None
            The consumer's stream: None or 1 legacy, 2 per-thread, -1 no
            ordering, other integers a stream handle.  The consumer's stream
            is made to wait for this array's pending work (no host blocking).
        max_version : tuple of int, optional
            ``(1, x)`` or newer gives a versioned capsule; None a legacy one.
        dl_device : tuple of int, optional
            ``(1, 0)`` asks for a host copy.
        copy : bool, optional
            True: export a copy; False: refuse to copy.

        Returns
        -------
        PyCapsule

        Raises
        ------
        BufferError
            For an export the array cannot satisfy (other devices, a
            read-only array on the legacy path, unsupported dtypes, byte
            strides that are not whole elements, a forbidden copy).
        """
        return export_capsule(self, stream, max_version, dl_device, copy)

    # ------------------------------------------------------------- pickle
    def __reduce_ex__(self, protocol):
        # Through the host, in gpuarray._wire's format: one device-to-host
        # copy whose memory pickle protocol 5 passes out of band.
        return DeviceNDArray._reduce(self, protocol)

    # -------------------------------------------------------------- IPC
    def get_ipc_handle(self):
        """A picklable :class:`~gpuarray.IpcHandle` another process opens as this array.

        The handle names the allocation holding the array (views included:
        their offset travels with it) and carries the shape, strides and
        dtype; ``handle.open()`` (or ``with handle as arr:``) in another
        process returns a :class:`DeviceNDArray` over the same memory, whose
        default stream is that process's default stream.  IPC carries no
        stream ordering: synchronise ``self.stream`` before handing the
        handle over.  The handle keeps the memory allocated here while it
        lives (``handle.base``); keep it, or this array, while the memory is
        mapped elsewhere.

        Returns
        -------
        IpcHandle

        Raises
        ------
        ValueError
            For an empty array, or memory its manager cannot share.
        CudaError
            When the driver refuses (e.g. memory that is not from ``cuMemAlloc``).

        Examples
        --------
        >>> h = d.get_ipc_handle()            # doctest: +SKIP
        >>> with h as arr:                     # in another process  # doctest: +SKIP
        ...     arr[0] = 1
        """
        import dataclasses

        from .memory import get_memory_manager

        if self.size == 0:
            raise ValueError(f"cannot share an empty array (shape {self.shape}) through IPC: "
                             "it has no memory")
        lo, _ = _layout.extent(self.shape, self.strides, self.dtype.itemsize)
        with self.device.activate():
            handle = get_memory_manager(self.device).get_ipc_handle(self.gpu_data)
        # The memory layer maps bytes; the array layer says how to rebuild the
        # array over them: ``DeviceNDArray(shape, strides, dtype, None, mem)``
        # with ``mem`` at element [0, ..., 0] (``origin`` bytes into the shared
        # range when strides are negative).  The class pickles by reference.
        return dataclasses.replace(handle, factory=DeviceNDArray,
                                   factory_args=(self.shape, self.strides, self.dtype, None),
                                   origin=-lo)


_SCALARS = frozenset((int, float, complex, bool))
#: What ``__init__`` copies from the array ``_make`` made (``_dlt`` is left
#: unset until the exchange table first needs it).
_SLOTS = tuple(name for name in DeviceNDArray.__slots__ if name not in ("__weakref__", "_dlt"))


#: Up to this many bytes, a C-contiguous host array goes to the device with one
#: allocation and one driver copy (:func:`_upload_small`), none of the planner or
#: staging machinery (far below the staging threshold, which is for large
#: pageable copies).
SMALL_UPLOAD = 64 * 1024


def upload(host: np.ndarray, stream: Any, copy: bool = True) -> DeviceNDArray:
    """A new device array of host array ``host`` (native byte order, no objects) on ``stream``.

    Ordered like ``host`` when it is contiguous, else C-ordered; the data
    copied when ``copy`` (one copy when the layouts match, no temporaries).
    """
    if copy and 0 < host.nbytes <= SMALL_UPLOAD and host.flags.c_contiguous:
        out = _upload_small(host, stream)
        if out is not None:
            return out
    f = host.flags.f_contiguous and not host.flags.c_contiguous
    out = DeviceNDArray(host.shape, (_layout.f_strides if f else _layout.c_strides)(host.shape, host.itemsize),
                        host.dtype, stream=stream)
    if copy and host.size:
        out._upload_from(host, out.stream)
    return out


def _upload_small(host: np.ndarray, stream: Any) -> DeviceNDArray | None:
    """A device copy of a small C-contiguous host array: one allocation and one driver copy.

    The hot path of ``to_device`` (every small upload pays for this Python;
    issue 13: at most 3 us over the raw allocation and copy), with no device
    activation and no call it can avoid.  None where it does not apply --
    no primary context current, a stream of another device or another
    library's, a capture in progress -- and the general path runs.
    """
    dev = current_primary()
    if dev is None:
        return None
    s = stream if type(stream) is Stream else as_stream(stream, dev)
    cp = checkpoint()
    if s.device is not dev or s.kind == "external" or cp.capturing:
        return None
    shape, itemsize, nbytes = host.shape, host.itemsize, host.nbytes
    mem = allocate_current(nbytes, dev)
    ptr = mem.device_pointer
    out = DeviceNDArray._make(shape, (itemsize,) if len(shape) == 1 else _layout.c_strides(shape, itemsize),
                              host.dtype, ptr, mem, s, False, dev)
    cp.memcpy_htod_async(ptr, _core.host_address(host), nbytes, s.handle)
    return out


def _shape_tuple(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        out = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(n < 0 for n in out):
        raise ValueError(f"negative dimensions are not allowed: shape {out}")
    return out


def _rebuild(host: np.ndarray, readonly: bool) -> DeviceNDArray:
    # Unpickles arrays pickled before gpuarray._wire (0.1.0 development builds).
    f = host.flags.f_contiguous and not host.flags.c_contiguous
    strides = _layout.f_strides(host.shape, host.dtype.itemsize) if f else None
    arr = DeviceNDArray(host.shape, strides, host.dtype)
    if host.size:
        arr._assign(host, arr.stream)
    arr.readonly = readonly  # before anyone could have cached its interface
    return arr


def is_device_array(obj: Any) -> bool:
    """Whether ``obj`` is a :class:`DeviceNDArray`.

    Parameters
    ----------
    obj : object

    Returns
    -------
    bool
    """
    return isinstance(obj, DeviceNDArray)
