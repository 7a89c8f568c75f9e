"""Where the CUDA sources of ``kernels/`` are, and their text.

Search order of :func:`kernel_source_dir`:

1. the package ``gpuarray._kernel_sources`` (an installed wheel maps the
   top-level ``kernels/`` folder there);
2. ``<repository root>/kernels``, next to the ``gpuarray/`` package (a source
   checkout run with ``PYTHONPATH=.``).

The first folder that holds every file of :data:`KERNEL_FILES` wins.  The
texts are read once per process.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

__all__ = ["KERNEL_FILES", "kernel_source_dir", "kernel_headers"]

#: The files every kernel build needs (all are handed to NVRTC as headers).
KERNEL_FILES = ("ga_common.cuh", "ga_copy.cuh", "ga_fill.cuh", "ga_transpose.cuh")


def _candidates() -> list[Path]:
    package_dir = Path(__file__).resolve().parent.parent  # .../gpuarray
    try:
        spec = importlib.util.find_spec("gpuarray._kernel_sources")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        out = [Path(p) for p in spec.submodule_search_locations]
    else:
        out = [package_dir / "_kernel_sources"]
    out.append(package_dir.parent / "kernels")
    return out


@functools.lru_cache(maxsize=1)
def kernel_source_dir() -> Path:
    """The folder holding the CUDA sources of the kernels.

    Returns
    -------
    pathlib.Path
        ``gpuarray/_kernel_sources`` of an installed package, else the
        ``kernels/`` folder of the source tree.

    Raises
    ------
    FileNotFoundError
        If neither location holds all of :data:`KERNEL_FILES`; the message
        lists the places searched.

    Examples
    --------
    >>> (kernel_source_dir() / "ga_copy.cuh").is_file()
    True
    """
    tried = _candidates()
    for d in tried:
        if all((d / f).is_file() for f in KERNEL_FILES):
            return d
    raise FileNotFoundError(
        "gpuarray's CUDA kernel sources were not found: looked for "
        f"{', '.join(KERNEL_FILES)} in " + " and ".join(str(d) for d in tried)
        + ". An installed wheel ships them as gpuarray/_kernel_sources; a source "
        "checkout has them in kernels/ next to the gpuarray/ package.")


@functools.lru_cache(maxsize=1)
def kernel_headers() -> dict[str, str]:
    """Name -> text of every file of :data:`KERNEL_FILES` (read once)."""
    d = kernel_source_dir()
    out = {}
    for name in KERNEL_FILES:
        with open(os.path.join(d, name), encoding="utf-8") as f:
            out[name] = f.read()
    return out
