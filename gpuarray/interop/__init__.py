"""Interop: the CUDA Array Interface (v3) and DLPack (1.x), both directions.

Pure halves (no array knowledge): ``_cai_desc`` validates and builds CAI
dictionaries; ``_dlpack_capsule`` makes and consumes DLPack capsules through
its core (``_dlpack_core``, a C extension -- ``_dlpack_module.c`` with one
unit per concern: ``_dlpack_core.c`` exports, ``_dlpack_consume.c`` imports
-- or the ``_dlpack_ctypes`` fallback), and ``_dlpack_protocol`` checks ``__dlpack__`` keywords and maps
dtypes to DLPack codes; ``_dlpack_export`` is the array's ``__dlpack__``
(it uses the array's attributes, never imports it).  The C extension also
holds the DLPack C exchange table (``_dlpack_exchange.c``, dlpack.h 1.3),
which ``_dlpack_table`` publishes on the array type, and the fast half of
the CAI parser (``_cai_fields.c``, the twin of ``_cai_desc._parse_fields``).  Glue: ``_cai``
(``as_cuda_array``, ``from_cuda_array_interface``, ``is_cuda_array``) and
``_dlpack`` (``from_dlpack``).  The glue modules import the array class,
which itself uses the pure halves, so they are loaded on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["as_cuda_array", "from_cuda_array_interface", "is_cuda_array", "from_dlpack"]

_WHERE = {"as_cuda_array": "_cai", "from_cuda_array_interface": "_cai", "is_cuda_array": "_cai",
          "from_dlpack": "_dlpack"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuarray.interop' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
