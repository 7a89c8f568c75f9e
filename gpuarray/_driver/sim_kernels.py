"""Registry of kernel implementations for the simulator.

The simulator backend looks a kernel's symbol name up here when a module's
function is requested.  Two sources answer, in this order:

1. names registered with :func:`register` (tests register small kernels of
   their own this way);
2. the resolver set with :func:`set_resolver`: the kernels layer sets one at
   import that turns any gpuarray kernel symbol into its
   :class:`gpuarray._driver._base.SimKernel`, so the simulator finds gpuarray's
   kernels whoever loaded the module (the ``sim`` backend, or the ``cuda``
   backend over the stand-in driver).

This module holds no CUDA state and imports nothing of gpuarray.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_registry: dict[str, Any] = {}
_resolver: Callable[[str], Any] | None = None


def register(name: str, impl: Any) -> None:
    """Register ``impl`` (a ``SimKernel``) as the reference for symbol ``name``.

    Registering the same name again replaces the earlier implementation.
    """
    if not hasattr(impl, "run") or not hasattr(impl, "accesses"):
        raise TypeError(f"sim kernel {name!r} must have run() and accesses(), got {impl!r}")
    with _lock:
        _registry[name] = impl


def set_resolver(resolver: Callable[[str], Any] | None) -> None:
    """Set the function that makes the implementation of a name nobody registered.

    ``resolver(name)`` returns a ``SimKernel`` or None (not a kernel it
    knows); ``None`` removes the resolver.
    """
    global _resolver
    with _lock:
        _resolver = resolver


def lookup(name: str) -> Any | None:
    """The implementation of kernel ``name``: registered, else resolved, else None."""
    with _lock:
        impl = _registry.get(name)
        resolver = _resolver
    if impl is None and resolver is not None:
        impl = resolver(name)
    return impl
