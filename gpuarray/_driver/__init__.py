"""Backend selection: the one place that decides which driver implementation runs.

``GPUARRAY_BACKEND=cuda`` (default) selects the cuda.bindings backend,
``GPUARRAY_BACKEND=sim`` the CPU simulator.  Nothing falls back silently: with
``cuda`` and no driver, the first CUDA use raises ``CudaUnavailableError``.
Selecting a backend imports it but does not initialise CUDA.

The simulator is a distribution of its own, ``gpuarray-sim`` (import name
``gpuarray_sim``), that depends on gpuarray, never the reverse: it is found
through the entry point ``sim`` of the group ``gpuarray.backends``
(:data:`ENTRY_POINTS`), loaded only when selected.  Without it installed,
``GPUARRAY_BACKEND=sim`` raises :class:`~gpuarray.errors.CudaUnavailableError`
naming ``pip install "gpuarray[sim]"``.
"""

from __future__ import annotations

import os
import threading

from ._base import Backend
from ._checkpoint import Checkpoint

__all__ = ["get_backend", "set_backend", "backend_name", "checkpoint", "backend_factory",
           "ENTRY_POINTS"]

#: The entry-point group in which a distribution offers a backend by name: its
#: object is a callable that makes the backend from the environment.
ENTRY_POINTS = "gpuarray.backends"

_lock = threading.Lock()
_backend: Backend | None = None


def backend_name() -> str:
    """The backend name the environment selects (``cuda`` or ``sim``)."""
    name = os.environ.get("GPUARRAY_BACKEND", "cuda").strip().lower() or "cuda"
    if name not in ("cuda", "sim"):
        raise ValueError(
            f"GPUARRAY_BACKEND={name!r} is not a backend: use 'cuda' (default) or 'sim'"
        )
    return name


def get_backend() -> Backend:
    """The process-wide driver backend, created on first use.

    It is the backend behind the capture checkpoint (``_checkpoint.py``):
    every driver call gpuarray makes passes there.
    """
    global _backend
    b = _backend
    if b is not None:
        return b
    # Made outside the lock: making one may run the garbage collector, whose
    # finalizers (a stream's, an allocation's) call get_backend() on this
    # thread; under the lock that call waited for itself for ever.  Such a
    # nested call makes and installs a backend of its own; the first one
    # installed is the process's, and the other is dropped unused (making a
    # backend initialises no CUDA).
    made = _make(backend_name())
    with _lock:
        if _backend is None:
            _backend = made
        return _backend


def checkpoint() -> Checkpoint:
    """The capture checkpoint of the process-wide backend (what :func:`get_backend` returns)."""
    return get_backend()  # type: ignore[return-value]


def set_backend(backend: Backend | None) -> None:
    """Replace the process-wide backend (tests; ``None`` re-reads the environment)."""
    global _backend
    with _lock:
        _backend = _checked(backend) if backend is not None else None


def _make(name: str) -> Backend:
    if name == "sim":
        return _checked(backend_factory("sim")())
    from .cuda import CudaBackend

    return _checked(CudaBackend())


def backend_factory(name: str):
    """The factory an installed distribution offers for backend ``name`` (entry point).

    Raises
    ------
    SimulatorNotInstalledError
        When no installed distribution offers it (a ``CudaUnavailableError``
        whose message names ``pip install "gpuarray[sim]"``).
    """
    from importlib.metadata import entry_points

    found = entry_points(group=ENTRY_POINTS, name=name)
    if not found:
        from ..errors import SimulatorNotInstalledError

        raise SimulatorNotInstalledError()
    return next(iter(found)).load()


def _checked(backend: Backend) -> Backend:
    """``backend`` behind the capture checkpoint (a checkpoint is kept as it is)."""
    if isinstance(backend, Checkpoint):
        return backend
    return Checkpoint(backend)  # type: ignore[return-value]
