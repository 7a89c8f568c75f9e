"""The kernels layer: strided copy / cast / fill on the device.

Concern: turn "copy this strided array into that one" and "fill this strided
array" into driver calls -- ``cuMemcpy*Async``/``cuMemsetD*Async`` where the
layout allows, otherwise kernels whose CUDA C++ sources live in the top-level
``kernels/`` folder, specialised per element types, dimension count and
index width, compiled by NVRTC for the device's architecture, cached in
memory and on disk, and launched through :mod:`gpuarray._driver`.  It decides
no array semantics: callers pass pointers, byte strides, dtypes and shapes.

Modules: ``_dtypes`` (type codes), ``_specs`` (specialisations, symbol names,
parameter blocks), ``_source`` (finding ``kernels/``), ``_nvrtc``
(compilation), ``_cache`` (memory + disk cache), ``_plan`` (pure planning),
``_loader`` (per-context modules; builds what the backend executes),
``_launch`` (entry points).  The simulator's host build of ``kernels/`` and
its NumPy reference kernels belong to ``gpuarray-sim``
(``gpuarray_sim.kernels``).

Environment: ``GPUARRAY_KERNEL_CACHE_DIR`` (disk cache folder),
``GPUARRAY_KERNEL_CACHE=0`` (no disk cache); the simulator's own settings
(``GPUARRAY_SIM_COMPILE``, ``GPUARRAY_SIM_KERNELS``, ...) are gpuarray-sim's.

Import cost: the planning half (``_plan``, ``_specs``, ``_launch``) is
imported with gpuarray; the loading half (``_loader``, ``_cache``, ``_nvrtc``,
``_source``, with ``pathlib`` and ``hashlib``) with the first kernel launch,
which looks up the cache anyway; NVRTC itself is loaded only to compile (see
``_toolchain``).
"""

from __future__ import annotations

from typing import Any

from ._launch import copy, fill

__all__ = ["copy", "fill", "cache_info", "clear_cache", "kernel_source_dir"]


def __getattr__(name: str) -> Any:  # PEP 562: the disk cache and the sources load on first use
    if name in ("cache_info", "clear_cache", "kernel_source_dir"):
        from . import _cache, _source
        return getattr(_source if name == "kernel_source_dir" else _cache, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _reset_for_tests() -> None:
    """Forget per-backend state (loaded function handles, device info); keep compiled images."""
    from ._cache import _warned
    from ._loader import forget_loaded

    forget_loaded()
    _warned.clear()

