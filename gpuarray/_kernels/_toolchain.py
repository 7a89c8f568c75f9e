"""The NVRTC toolchain's facts, remembered so that a warm cache never loads NVRTC.

Choosing the target (:func:`._nvrtc.select_target`), the options and the
cache key needs NVRTC's version and supported architectures.  Asking the
library costs 0.1-0.2 s (import of ``cuda.bindings.nvrtc`` and ``dlopen``),
more than the rest of a warm first kernel operation together.  So the answer
is stored in the disk cache as an entry of kind ``facts`` whose key is
derived from the library's fingerprint (:func:`._nvrtc_id.fingerprint`,
computed from file metadata without loading anything): a later process with
the same fingerprint reads version and architectures from there and loads
NVRTC only if it has to compile.  When it does, :func:`._cache.get_image`
checks the loaded library against the remembered facts first
(:class:`._nvrtc.StaleToolchain`), and :func:`refresh` replaces them.

Without the disk cache (``GPUARRAY_KERNEL_CACHE=0``, an untrusted folder)
the facts are asked of NVRTC, once per process.
"""

from __future__ import annotations

import threading

from ..errors import NvrtcError, NvrtcVersionError
from . import _cache, _nvrtc, _nvrtc_id
from ._hash import sha256

__all__ = ["current", "require", "refresh", "forget", "facts_key", "check_driver"]

_lock = threading.Lock()
_current: _nvrtc.Toolchain | None = None


def facts_key(ident: str) -> str:
    """The cache key under which the facts of NVRTC ``ident`` are stored."""
    return sha256(f"gpuarray-nvrtc-facts/{_cache.FORMAT_VERSION}/{ident}".encode()).hexdigest()


def _encode(tc: _nvrtc.Toolchain) -> bytes:
    return f"{tc.version[0]}.{tc.version[1]}\n{','.join(map(str, tc.archs))}\n".encode()


def _decode(data: bytes, ident: str) -> _nvrtc.Toolchain | None:
    try:
        version, archs, rest = data.decode("ascii").split("\n")
        major, minor = (int(x) for x in version.split("."))
        arch_list = tuple(int(a) for a in archs.split(","))
    except ValueError:
        return None
    if rest or not arch_list or major < 1 or minor < 0 or min(arch_list) < 10:
        return None
    return _nvrtc.Toolchain((major, minor), tuple(sorted(arch_list)), ident)


def _probe() -> _nvrtc.Toolchain | None:
    try:
        return _nvrtc.loaded_toolchain()
    except (NvrtcError, OSError, RuntimeError):
        return None


def current() -> _nvrtc.Toolchain | None:
    """The :class:`~._nvrtc.Toolchain` that would compile, or None when NVRTC is unavailable.

    Memory, then the disk cache, then NVRTC itself (whose answer is then
    written to the disk cache).  Only the last step loads NVRTC.
    """
    global _current
    tc = _current
    if tc is not None:
        return tc
    ident = _nvrtc_id.fingerprint()
    use_disk = _cache.disk_cache_enabled()
    data = _cache.read_entry(facts_key(ident), "facts") if use_disk else None
    tc = _decode(data, ident) if data is not None else None
    if tc is None:
        tc = _probe()
        if tc is None:
            return None
        if use_disk:
            _cache.write_entry(facts_key(ident), "facts", _encode(tc))
    with _lock:
        _current = tc
    return tc


def require() -> _nvrtc.Toolchain:
    """:func:`current`, raising :class:`~gpuarray.errors.NvrtcError` when NVRTC is unavailable."""
    tc = current()
    if tc is not None:
        return tc
    try:  # ask again, for the loader's own reason
        return _nvrtc.loaded_toolchain()
    except (OSError, RuntimeError) as e:
        if isinstance(e, NvrtcError):
            raise
        raise NvrtcError(f"NVRTC is not available ({e})") from e


def refresh(loaded: _nvrtc.Toolchain) -> None:
    """Replace remembered facts that turned out wrong by those of the ``loaded`` NVRTC."""
    global _current
    with _lock:
        _current = loaded
    if _cache.disk_cache_enabled():
        _cache.write_entry(facts_key(loaded.ident), "facts", _encode(loaded))


def forget() -> None:
    """Drop the facts held in memory (tests; the disk entry stays)."""
    global _current
    with _lock:
        _current = None
    _nvrtc_id.fingerprint.cache_clear()


def check_driver(nvrtc_version: tuple[int, int], driver_version: int) -> None:
    """Refuse an NVRTC whose major version is newer than the driver's CUDA version.

    Parameters
    ----------
    nvrtc_version : tuple of int
        ``(major, minor)`` of NVRTC.
    driver_version : int
        ``cuDriverGetVersion``'s value, e.g. 12080 for CUDA 12.8.

    Raises
    ------
    NvrtcVersionError
        If ``nvrtc_version[0] > driver_version // 1000``: code from that NVRTC
        is not guaranteed to load on that driver.
    """
    if int(nvrtc_version[0]) > int(driver_version) // 1000:
        raise NvrtcVersionError(nvrtc_version, driver_version)
