"""SHA-256 without importing :mod:`hashlib` when it is not loaded yet.

``hashlib`` loads OpenSSL (about 1-3 ms), a noticeable share of the first
kernel operation of a process; CPython's built-in ``_sha2`` (3.12+) /
``_sha256`` (3.11 and older) module gives the same digests for the few tens of
kilobytes a cache key hashes.  Falls back to ``hashlib`` where neither exists.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["sha256"]


def _pick() -> Any:
    loaded = sys.modules.get("hashlib")
    if loaded is not None:
        return loaded.sha256
    try:
        mod = __import__("_sha2" if sys.version_info >= (3, 12) else "_sha256")
    except ImportError:
        pass
    else:
        return mod.sha256
    import hashlib

    return hashlib.sha256


sha256 = _pick()
