"""Registry of kernel reference implementations for the simulator.

The kernels layer registers one :class:`gpuarray._driver._base.SimKernel` per
kernel symbol name; the simulator backend looks names up here when a module's
function is requested.  This module holds no CUDA state and imports nothing.
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_registry: dict[str, Any] = {}


def register(name: str, impl: Any) -> None:
    """Register ``impl`` (a ``SimKernel``) as the reference for symbol ``name``.

    Registering the same name again replaces the earlier implementation.
    """
    if not hasattr(impl, "run") or not hasattr(impl, "accesses"):
        raise TypeError(f"sim kernel {name!r} must have run() and accesses(), got {impl!r}")
    with _lock:
        _registry[name] = impl


def lookup(name: str) -> Any | None:
    """The reference implementation registered for ``name``, or None."""
    with _lock:
        return _registry.get(name)
