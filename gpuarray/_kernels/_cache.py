"""Compiled kernel images: in-memory and on-disk cache in front of NVRTC.

Key: SHA-256 of (cache format version, NVRTC version, target kind and
architecture, options, source, every header's name and text).  Lookups go
memory -> disk -> compile; one compilation per key per process even when
several threads ask at once (the others wait for it).

Disk cache: one file per key, ``<key>.gakc``, in ``GPUARRAY_KERNEL_CACHE_DIR``
(default ``$XDG_CACHE_HOME/gpuarray/kernels`` or ``~/.cache/gpuarray/kernels``);
``GPUARRAY_KERNEL_CACHE=0`` disables it (nothing is read or written).  A file
is a fixed header (magic, format version, image kind, payload length, SHA-256
of the payload, the key) followed by the image; it is written to a temporary
file in the same folder and renamed over the final name (``os.replace``), so
readers never see a partial file.  Anything that does not verify -- short,
wrong magic or version, wrong key, bad checksum -- is a miss, and the
recompiled image replaces it.  The disk cache is best effort: an unwritable
folder costs a recompile next time, never an error.

The environment is read at each disk access (cheap next to a compile), so
tests may change it at run time.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import cast

from . import _nvrtc

__all__ = [
    "FORMAT_VERSION",
    "cache_dir",
    "disk_cache_enabled",
    "cache_key",
    "get_image",
    "cache_info",
    "clear_cache",
]

_log = logging.getLogger("gpuarray.kernels")

#: Bump when the file layout or the meaning of a key changes.
FORMAT_VERSION = 1
_MAGIC = b"GAKCACHE"
_HEADER = struct.Struct("<8sIIQ32s64s")  # magic, version, kind, length, sha256, key hex
_KINDS = {"cubin": 0, "ptx": 1}
_SUFFIX = ".gakc"

_lock = threading.Lock()
_memory: dict[str, bytes] = {}
_inflight: dict[str, _Pending] = {}


class _Pending:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.image: bytes | None = None
        self.error: BaseException | None = None


def disk_cache_enabled() -> bool:
    """False when ``GPUARRAY_KERNEL_CACHE`` is ``0``/``false``/``no``/``off``."""
    v = os.environ.get("GPUARRAY_KERNEL_CACHE", "1").strip().lower()
    return v not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """The on-disk cache folder (it may not exist yet)."""
    d = os.environ.get("GPUARRAY_KERNEL_CACHE_DIR", "").strip()
    if d:
        return Path(d).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base).expanduser() if base else Path.home() / ".cache"
    return root / "gpuarray" / "kernels"


def cache_key(source: str, headers: Mapping[str, str], options: Sequence[str],
              target: _nvrtc.Target, nvrtc_version: tuple[int, int]) -> str:
    """Hex SHA-256 naming one compiled image (see the module docstring)."""
    h = hashlib.sha256()

    def put(text: str) -> None:
        b = text.encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)

    put(f"gpuarray-kernel-cache/{FORMAT_VERSION}")
    put(f"nvrtc/{nvrtc_version[0]}.{nvrtc_version[1]}")
    put(target.kind)
    put(target.arch)
    put("\0".join(options))
    put(source)
    for name in sorted(headers):
        put(name)
        put(headers[name])
    return h.hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / (key + _SUFFIX)


def _disk_load(key: str, kind: str) -> bytes | None:
    try:
        with open(_path(key), "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < _HEADER.size:
        return None
    magic, version, k, length, digest, fkey = _HEADER.unpack_from(data)
    payload = data[_HEADER.size:]
    if (magic != _MAGIC or version != FORMAT_VERSION or k != _KINDS[kind]
            or fkey != key.encode() or length != len(payload)
            or hashlib.sha256(payload).digest() != digest):
        _log.debug("kernel cache entry %s is invalid; recompiling", key)
        return None
    return payload


def _disk_store(key: str, kind: str, image: bytes) -> None:
    d = cache_dir()
    tmp = None
    try:
        d.mkdir(parents=True, exist_ok=True)
        header = _HEADER.pack(_MAGIC, FORMAT_VERSION, _KINDS[kind], len(image),
                              hashlib.sha256(image).digest(), key.encode())
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp", dir=d)
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            f.write(image)
        os.replace(tmp, _path(key))
        tmp = None
    except OSError as e:
        _log.debug("kernel cache: could not write %s: %s", d, e)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def get_image(source: str, headers: Mapping[str, str], target: _nvrtc.Target,
              compile_fn: Callable[..., bytes] | None = None, fast: bool = False) -> bytes:
    """The compiled image of ``source`` for ``target``: from memory, disk, or NVRTC.

    Parameters
    ----------
    source : str
        Translation unit (see :func:`gpuarray._kernels._specs.program_source`).
    headers : mapping of str to str
        Files it may include.
    target : Target
        Image kind and architecture.
    compile_fn : callable, optional
        Replaces :func:`gpuarray._kernels._nvrtc.compile_program` (tests).
    fast : bool
        Compile with the fast options (see :func:`_nvrtc.compile_options`);
        a different key from the normal image.

    Returns
    -------
    bytes
        A CUBIN, or NUL-terminated PTX.

    Raises
    ------
    NvrtcError
        If compilation fails (every waiting thread gets it; nothing is cached).
    """
    options = _nvrtc.compile_options(target, fast=fast)
    key = cache_key(source, headers, options, target, _nvrtc.nvrtc_version())
    with _lock:
        image = _memory.get(key)
        if image is not None:
            return image
        found = _inflight.get(key)
        owner = found is None
        pending = _inflight[key] = _Pending() if found is None else found
    if not owner:
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return cast(bytes, pending.image)
    try:
        use_disk = disk_cache_enabled()
        image = _disk_load(key, target.kind) if use_disk else None
        if image is None:
            fn = compile_fn or _nvrtc.compile_program
            image = fn(source, headers, options, target.kind)
            if use_disk:
                _disk_store(key, target.kind, image)
        with _lock:
            _memory[key] = image
        pending.image = image
        return image
    except BaseException as e:
        pending.error = e
        raise
    finally:
        with _lock:
            _inflight.pop(key, None)
        pending.done.set()


def cache_info() -> dict:
    """What the kernel cache holds, for ``python -m gpuarray``.

    Returns
    -------
    dict
        ``path`` (str, the disk folder), ``entries`` (files in it), ``bytes``
        (their total size), ``enabled`` (disk cache on) and
        ``memory_entries`` (images held by this process).

    Examples
    --------
    >>> sorted(cache_info())
    ['bytes', 'enabled', 'entries', 'memory_entries', 'path']
    """
    d = cache_dir()
    entries = size = 0
    try:
        with os.scandir(d) as it:
            for e in it:
                if e.name.endswith(_SUFFIX) and e.is_file():
                    entries += 1
                    size += e.stat().st_size
    except OSError:
        pass
    with _lock:
        mem = len(_memory)
    return {"path": str(d), "entries": entries, "bytes": size,
            "enabled": disk_cache_enabled(), "memory_entries": mem}


def clear_cache(memory: bool = True) -> int:
    """Delete the disk cache's entries (and the in-memory images).

    Only files this cache wrote (``*.gakc`` and its temporary files) are
    removed; the folder itself stays.

    Parameters
    ----------
    memory : bool
        Also forget images held in memory (loaded modules stay loaded).

    Returns
    -------
    int
        Number of files removed.
    """
    removed = 0
    d = cache_dir()
    try:
        with os.scandir(d) as it:
            names = [e.name for e in it if e.is_file()]
    except OSError:
        names = []
    for name in names:
        if name.endswith(_SUFFIX) or (name.startswith(".") and name.endswith(".tmp")):
            try:
                os.unlink(d / name)
                removed += 1
            except OSError:
                pass
    if memory:
        with _lock:
            _memory.clear()
    return removed
