"""Configuration read from environment variables, in one place.

Every ``GPUARRAY_*`` variable the library reads (besides the simulator's own
``GPUARRAY_SIM_*``, read by the simulator) is parsed here into a frozen
:class:`Config`.  The snapshot is taken at first use; :func:`reload` re-reads
the environment (tests call it around each test).  A malformed value raises
``ValueError`` naming the variable and the value.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

__all__ = ["Config", "get", "reload"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _flag(name: str, default: bool) -> bool:
    text = os.environ.get(name)
    if text is None:
        return default
    t = text.strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise ValueError(f"{name}={text!r} is not a boolean (use 1/0, true/false)")


def _number(name: str, default, kind=int, minimum=0):
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a {kind.__name__}") from None
    if value < minimum:
        raise ValueError(f"{name}={text!r} must be at least {minimum}")
    return value


@dataclasses.dataclass(frozen=True)
class Config:
    """The library's settings (one snapshot of the environment).

    Attributes
    ----------
    per_thread_default_stream : bool
        ``GPUARRAY_PER_THREAD_DEFAULT_STREAM``: the library default stream is
        the per-thread default stream instead of the legacy one.
    cai_export_stream : bool
        ``GPUARRAY_CAI_EXPORT_STREAM`` (default on): export the array's
        stream in ``__cuda_array_interface__``; off exports ``None``.
    cai_import_sync : bool
        ``GPUARRAY_CUDA_ARRAY_INTERFACE_SYNC`` (default on): order imported
        arrays after the producer's stream.
    memory_manager : str
        ``GPUARRAY_MEMORY_MANAGER``: module exposing ``_gpuarray_memory_manager``.
    max_pending_deallocs_count : int
        ``GPUARRAY_MAX_PENDING_DEALLOCS_COUNT`` (default 10).
    max_pending_deallocs_ratio : float
        ``GPUARRAY_MAX_PENDING_DEALLOCS_RATIO`` (default 0.2 of device memory).
    staging_min : int
        ``GPUARRAY_STAGING_MIN``: smallest pageable transfer that goes through
        the page-locked staging ring (default 4 MiB; 0: never).
    staging_chunk : int
        ``GPUARRAY_STAGING_CHUNK``: bytes per staging slot (default 4 MiB,
        at least 4096).
    """

    per_thread_default_stream: bool = False
    cai_export_stream: bool = True
    cai_import_sync: bool = True
    memory_manager: str = ""
    max_pending_deallocs_count: int = 10
    max_pending_deallocs_ratio: float = 0.2
    staging_min: int = 4 << 20
    staging_chunk: int = 4 << 20


_config: Config | None = None
#: Called (no arguments) by each :func:`reload`: caches of answers that depend on it.
on_reload: list[Any] = []


def reload() -> Config:
    """Re-read the environment and return the new configuration."""
    global _config
    _config = Config(
        per_thread_default_stream=_flag("GPUARRAY_PER_THREAD_DEFAULT_STREAM", False),
        cai_export_stream=_flag("GPUARRAY_CAI_EXPORT_STREAM", True),
        cai_import_sync=_flag("GPUARRAY_CUDA_ARRAY_INTERFACE_SYNC", True),
        memory_manager=os.environ.get("GPUARRAY_MEMORY_MANAGER", "").strip(),
        max_pending_deallocs_count=_number("GPUARRAY_MAX_PENDING_DEALLOCS_COUNT", 10, int, 0),
        max_pending_deallocs_ratio=_number("GPUARRAY_MAX_PENDING_DEALLOCS_RATIO", 0.2, float, 0),
        staging_min=_number("GPUARRAY_STAGING_MIN", 4 << 20, int, 0),
        staging_chunk=_number("GPUARRAY_STAGING_CHUNK", 4 << 20, int, 4096),
    )
    for hook in on_reload:
        hook()
    return _config


def get() -> Config:
    """The current configuration (read from the environment on first use)."""
    return _config if _config is not None else reload()
