"""Dask and ``distributed`` support: sizes and serializers for :class:`DeviceNDArray`.

Three pieces, none of which imports Dask or ``distributed`` when gpuarray is
imported:

- ``dask.sizeof`` of a DeviceNDArray is its ``nbytes``.  gpuarray registers
  this through Dask's ``dask.sizeof`` entry-point group (see
  ``pyproject.toml``), so every process with gpuarray installed gets it as
  soon as it imports ``dask.sizeof``; nothing to call.
- Pickling (``distributed``'s ``"pickle"`` family, and plain
  :mod:`pickle`) sends the data out of band with protocol 5: one
  device-to-host copy, no other host copy, for every layout (see
  ``gpuarray/_wire.py``).  Nothing to call either.
- :func:`register` adds the ``"dask"`` family (the same host frame, named in
  a Dask header) and the ``"cuda"`` family (the array's device memory as a
  frame exporting ``__cuda_array_interface__``, which UCX sends device to
  device; rebuilt on the receiving worker's device without a copy).
  ``distributed`` has no entry points for serializers and registers its own
  lazily by the top-level module of a type, a list gpuarray is not on, so
  this one call is needed in each process: in the client, and in each
  worker through a preload (``--preload gpuarray.dask``, or
  ``preload=["gpuarray.dask"]``), which calls :func:`dask_setup`.

Registering in one process and not another is safe for the ``"pickle"``
family only: a worker that receives a ``"dask"`` or ``"cuda"`` frame must
have called :func:`register` (the preload does that).
"""

from __future__ import annotations

import importlib
from typing import Any

from ._array import DeviceNDArray

__all__ = ["register", "dask_setup"]

#: Version of the header layout of the "dask" and "cuda" families.
_FORMAT = 1


def register() -> None:
    """Register DeviceNDArray's serializers with ``distributed`` (and its ``dask.sizeof``).

    Adds the ``"dask"`` family (host frames, out of band) and the ``"cuda"``
    family (device frames) for :class:`~gpuarray.DeviceNDArray`, and
    registers ``dask.sizeof`` directly too (for source trees run without an
    installed entry point).  Idempotent; call it in every process that
    sends or receives arrays: the client, and each worker (a preload of
    this module does it, see :func:`dask_setup`).

    Returns
    -------
    None

    Raises
    ------
    ImportError
        If ``distributed`` is not installed (``pip install distributed``).

    Examples
    --------
    >>> import gpuarray.dask
    >>> gpuarray.dask.register()
    >>> from distributed.protocol import serialize, deserialize
    >>> x = gpuarray.to_device(np.arange(4.0))
    >>> header, frames = serialize(x, serializers=("cuda",))
    >>> header["serializer"], hasattr(frames[0], "__cuda_array_interface__")
    ('cuda', True)
    >>> deserialize(header, frames).copy_to_host()
    array([0., 1., 2., 3.])
    """
    try:
        protocol = importlib.import_module("distributed.protocol")
    except ImportError as e:
        raise ImportError("gpuarray.dask.register() needs the 'distributed' package "
                          f"(pip install distributed): {e}") from e
    protocol.dask_serialize.register(DeviceNDArray, _dask_serialize)
    protocol.dask_deserialize.register(DeviceNDArray, _dask_deserialize)
    protocol.cuda_serialize.register(DeviceNDArray, _cuda_serialize)
    protocol.cuda_deserialize.register(DeviceNDArray, _cuda_deserialize)
    _register_sizeof(importlib.import_module("dask.sizeof").sizeof)


def dask_setup(server: Any = None) -> None:
    """Dask preload hook: call :func:`register` in a worker, nanny, scheduler or client.

    ``dask worker --preload gpuarray.dask``, ``LocalCluster(preload=["gpuarray.dask"])``
    or the ``distributed.worker.preload`` setting make each worker import
    this module and call this function with itself.

    Parameters
    ----------
    server : object, optional
        The Dask server or client being set up (unused).

    Returns
    -------
    None

    Examples
    --------
    >>> import gpuarray.dask
    >>> gpuarray.dask.dask_setup()
    """
    register()


# ---------------------------------------------------------------- dask.sizeof
def _sizeof(x: DeviceNDArray) -> int:
    return int(x.nbytes)


def _register_sizeof(sizeof: Any) -> None:
    """The ``dask.sizeof`` entry point: Dask calls it with its ``sizeof`` dispatcher."""
    sizeof.register(DeviceNDArray, _sizeof)


# --------------------------------------------------------- "dask" and "cuda"
def _header(header: dict[str, Any]) -> dict[str, Any]:
    from ._wire import encode_dtype

    return {"gpuarray-format": _FORMAT, "shape": list(header["shape"]),
            "core": list(header["core"]), "order": header["order"],
            "dtype": encode_dtype(header["dtype"]), "readonly": header["readonly"]}


def _check_format(header: dict[str, Any]) -> dict[str, Any]:
    if header.get("gpuarray-format") != _FORMAT:
        raise ValueError(f"a DeviceNDArray frame of format {header.get('gpuarray-format')!r} "
                         f"(this gpuarray reads format {_FORMAT}): mixed gpuarray versions?")
    return header


def _dask_serialize(x: DeviceNDArray) -> tuple[dict[str, Any], list[memoryview]]:
    from ._wire import to_host_frame

    header, frame = to_host_frame(x)
    return _header(header), [frame.data]


def _dask_deserialize(header: dict[str, Any], frames: list[Any]) -> DeviceNDArray:
    from ._wire import from_host_frame

    (frame,) = frames
    return from_host_frame(_check_format(header), frame)


def _cuda_serialize(x: DeviceNDArray) -> tuple[dict[str, Any], list[DeviceNDArray]]:
    from ._wire import to_device_frame

    header, frame = to_device_frame(x)
    return _header(header), [frame]


def _cuda_deserialize(header: dict[str, Any], frames: list[Any]) -> DeviceNDArray:
    from ._wire import from_device_frame

    (frame,) = frames
    return from_device_frame(_check_format(header), frame)
