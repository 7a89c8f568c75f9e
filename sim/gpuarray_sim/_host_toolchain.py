"""The host build's C++ toolchain, as the simulator's PTX executor reaches it.

One concern: a registry of one provider.  The toolchain (compiler, flags,
disk cache) belongs to the kernels layer (``sim/gpuarray_sim/kernels/_host.py``),
which registers a provider here when it is imported; the simulator's PTX
executor (``sim/ptx``) asks for it when it builds.  So the executor builds
with the same compiler, flags and cache without importing a layer above
it, and importing the kernels layer does not load the simulator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["set_toolchain", "toolchain"]

_provider: Callable[[], Any] | None = None


def set_toolchain(provider: Callable[[], Any] | None) -> None:
    """Set the function that returns the host build's toolchain (``None`` removes it).

    The toolchain has ``runtime()`` (the loaded host runtime),
    ``key(optimise=False)`` (compiler identity and flags, for cache keys),
    ``build(source, what, prefix=None, optimise=False) -> bytes`` (a shared
    library of ``prefix`` then ``source``, the prefix precompiled once where
    it can be; ``optimise``: at the higher optimisation level, for code that
    runs long; raises the kernels layer's ``HostCompileError``), ``load(payload) -> ctypes.CDLL``, and
    ``read(key) -> bytes | None`` / ``write(key, payload)`` (the disk cache).
    """
    global _provider
    _provider = provider


def toolchain() -> Any:
    """The registered toolchain, or None (the kernels layer was not imported)."""
    return _provider() if _provider is not None else None
