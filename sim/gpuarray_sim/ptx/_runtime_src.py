"""The text the PTX executor's builds are made of, and their disk cache key.

One concern: the runtime support headers inlined at the top of every unit
(:func:`runtime_source`) and the key a build is cached under
(:func:`cache_key`: the host runtime's ABI, the hash of every source of
this package -- translator, tables, runtime headers, interpreter -- and of
the host runtime's headers, the toolchain's key and the unit's own digest).
Both the translated tier (``_build.py``) and the interpreter's handlers
(``_interp.py``) build from them.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from .. import _hostrt

__all__ = ["HEADERS", "runtime_source", "cache_key"]

#: The runtime support headers, inlined in this order at the top of every unit.
HEADERS = tuple(Path(__file__).with_name(n)
                for n in ("ptxrt.h", "ptx_sync.h", "ptx_num.h", "ptx_printf.h"))


def _sources_digest() -> str:
    """The hash of every file whose text decides the generated C++ or its build: each
    source of this package (the translator, its tables, the runtime headers) and the
    host runtime's headers it includes -- none listed by hand, so an edited translator
    never meets a stale build."""
    global _SOURCES_DIGEST
    if _SOURCES_DIGEST is None:
        h = hashlib.sha256()
        here = Path(__file__).parent
        files = sorted(p for p in here.iterdir() if p.suffix in (".py", ".h", ".txt", ".cpp"))
        for path in [*files, *_hostrt.HEADERS]:
            h.update(path.name.encode() + b"\0" + path.read_bytes())
        _SOURCES_DIGEST = h.hexdigest()
    return _SOURCES_DIGEST


_SOURCES_DIGEST: str | None = None


@functools.cache
def runtime_source() -> str:
    """The runtime support headers as one text (their includes of each other dropped)."""
    parts = []
    for h in HEADERS:
        text = h.read_text(encoding="utf-8")
        parts.append("\n".join(line for line in text.split("\n")
                               if line.strip() != '#include "ptxrt.h"'))
    return "\n".join(parts)


def cache_key(digest: str, toolchain_key: str) -> str:
    """The disk cache key of the build of the translated C++ whose text hashes to ``digest``."""
    parts = ["gpuarray-ptx", str(_hostrt.ABI), _sources_digest(), toolchain_key, digest]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()
