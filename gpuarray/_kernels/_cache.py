"""Compiled kernel images: in-memory and on-disk cache in front of NVRTC.

Key: SHA-256 of (cache format version, NVRTC version and library
fingerprint -- see :mod:`._nvrtc_id` --, target kind and architecture,
options, source, every header's name and text).  Lookups go memory -> disk
-> compile; one compilation per key per process even when several threads
ask at once (the others wait for it).  A hit never loads NVRTC: the caller
passes the :class:`~._nvrtc.Toolchain` (remembered on disk by
:mod:`._toolchain`), and NVRTC is loaded only to compile.

Disk cache: one file per key, ``<key>.gakc`` (``.gakf`` for the facts of
:mod:`._toolchain`), in ``GPUARRAY_KERNEL_CACHE_DIR``
(default ``$XDG_CACHE_HOME/gpuarray/kernels`` or ``~/.cache/gpuarray/kernels``);
``GPUARRAY_KERNEL_CACHE=0`` disables it (nothing is read or written).  A file
is a fixed header (magic, format version, entry kind, payload length, SHA-256
of the payload, the key) followed by the payload; it is written to a
temporary file in the same folder and renamed over the final name
(``os.replace``), so readers never see a partial file.  Anything that does
not verify -- short, wrong magic or version, wrong key, bad checksum -- is a
miss, and the recompiled image replaces it; so is an entry that verifies but
whose image the driver refuses to load (``get_image(..., rebuild=True)``,
asked once by ``_loader.get_kernel``).  The disk cache is best effort:
an unwritable folder costs a recompile next time, never an error.

Trust: a loaded CUBIN is code that runs on the device, so the folder is
created ``0o700`` and used only while it belongs to the current user and no
one else may write to it; otherwise a :class:`RuntimeWarning` (once per
folder and reason) says why, and kernels are compiled without the disk
cache.  Entries are opened with ``O_NOFOLLOW | O_NONBLOCK``, must be regular
files (``fstat``) of a plausible size, and at most the header plus the length
it records is read: a symlink, a FIFO, a device or an oversized file is a
miss, never a hang or an unbounded read.

The environment is read at each disk access (cheap next to a compile), so
tests may change it at run time.
"""

from __future__ import annotations

import os
import stat
import struct
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import cast

from .._driver._userdir import untrusted_reason, user_cache_dir
from . import _nvrtc
from ._hash import sha256

__all__ = [
    "FORMAT_VERSION",
    "MAX_ENTRY_BYTES",
    "cache_dir",
    "disk_cache_enabled",
    "cache_key",
    "read_entry",
    "write_entry",
    "get_image",
    "cache_info",
    "clear_cache",
]

#: Bump when the file layout or the meaning of a key changes.
FORMAT_VERSION = 2
_MAGIC = b"GAKCACHE"
_HEADER = struct.Struct("<8sIIQ32s64s")  # magic, version, kind, length, sha256, key hex
# host: a host-built library (._host), keyed by its hash; hostref: the hash of
# the library holding one specialisation, keyed by that specialisation.
_KINDS = {"cubin": 0, "ptx": 1, "facts": 2, "host": 3, "hostref": 4}
_SUFFIX = ".gakc"          # images
_FACTS_SUFFIX = ".gakf"    # what was learnt of an NVRTC (see ._toolchain)
#: Largest payload read back; a bigger entry is a miss (images are ~10-100 kB).
MAX_ENTRY_BYTES = 64 << 20
_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0))
_WRITE_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                | getattr(os, "O_CLOEXEC", 0))

_lock = threading.Lock()
_memory: dict[str, bytes] = {}
_inflight: dict[str, _Pending] = {}
_warned: set[tuple[str, str]] = set()


class _Pending:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.image: bytes | None = None
        self.error: BaseException | None = None


def _debug(msg: str, *args) -> None:
    # Without ``logging`` imported nobody has configured a handler, so the
    # record would go nowhere: do not pay for importing it.
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger("gpuarray.kernels").debug(msg, *args)


def disk_cache_enabled() -> bool:
    """False when ``GPUARRAY_KERNEL_CACHE`` is ``0``/``false``/``no``/``off``."""
    v = os.environ.get("GPUARRAY_KERNEL_CACHE", "1").strip().lower()
    return v not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """The on-disk cache folder (it may not exist yet)."""
    return user_cache_dir("kernels", "GPUARRAY_KERNEL_CACHE_DIR")


def cache_key(source: str, headers: Mapping[str, str], options: Sequence[str],
              target: _nvrtc.Target, nvrtc_version: tuple[int, int],
              nvrtc_ident: str = "") -> str:
    """Hex SHA-256 naming one compiled image (see the module docstring).

    ``nvrtc_ident`` is :attr:`Toolchain.ident <._nvrtc.Toolchain>`: which
    NVRTC library (two builds of one version give different keys).
    """
    h = sha256()

    def put(text: str) -> None:
        b = text.encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)

    put(f"gpuarray-kernel-cache/{FORMAT_VERSION}")
    put(f"nvrtc/{nvrtc_version[0]}.{nvrtc_version[1]}")
    put(f"nvrtc-id/{nvrtc_ident}")
    put(target.kind)
    put(target.arch)
    put("\0".join(options))
    put(source)
    for name in sorted(headers):
        put(name)
        put(headers[name])
    return h.hexdigest()


def _trusted(d: Path) -> bool:
    """True when ``d`` is a folder that only this user can write (warns once if not)."""
    try:
        st = os.stat(d)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    reason = untrusted_reason(st)
    if reason is None:
        return True
    with _lock:
        first = (str(d), reason) not in _warned
        _warned.add((str(d), reason))
    if first:
        warnings.warn(
            f"gpuarray does not use the kernel cache folder {d}: {reason}. A cached "
            "kernel is code that runs on the GPU, so the folder must belong to you and "
            "be writable only by you; kernels are compiled without the disk cache. "
            f"Run 'chmod go-w {d}' if the folder is yours, or set "
            "GPUARRAY_KERNEL_CACHE_DIR to a private folder.", RuntimeWarning, stacklevel=2)
    return False


def _entry_path(d: Path, key: str, kind: str) -> Path:
    return d / (key + (_FACTS_SUFFIX if kind == "facts" else _SUFFIX))


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_entry(key: str, kind: str) -> bytes | None:
    """The verified payload of entry ``key`` of ``kind``, or None (a miss).

    The folder must pass the trust check; the entry must be a regular file
    (opened without following a symlink and without blocking) no larger than
    the header plus :data:`MAX_ENTRY_BYTES`; at most the header and the
    length it records are read.
    """
    d = cache_dir()
    if not _trusted(d):
        return None
    try:
        fd = os.open(_entry_path(d, key, kind), _READ_FLAGS)
    except OSError:
        return None   # missing, a symlink (ELOOP), unreadable
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode)
                or not _HEADER.size <= st.st_size <= _HEADER.size + MAX_ENTRY_BYTES):
            _debug("kernel cache entry %s is not a plausible regular file; ignored", key)
            return None
        head = _read_exact(fd, _HEADER.size)
        if head is None:
            return None
        magic, version, k, length, digest, fkey = _HEADER.unpack(head)
        if (magic != _MAGIC or version != FORMAT_VERSION or k != _KINDS[kind]
                or fkey != key.encode() or length != st.st_size - _HEADER.size):
            _debug("kernel cache entry %s is invalid; recompiling", key)
            return None
        payload = _read_exact(fd, length)
    except OSError:
        return None
    finally:
        os.close(fd)
    if payload is None or sha256(payload).digest() != digest:
        _debug("kernel cache entry %s fails its checksum; recompiling", key)
        return None
    return payload


def _drop_entry(key: str, kind: str) -> None:
    """Remove entry ``key`` of ``kind`` from the disk cache (best effort)."""
    d = cache_dir()
    if not _trusted(d):
        return
    try:
        os.unlink(_entry_path(d, key, kind))
    except OSError:
        pass


def write_entry(key: str, kind: str, payload: bytes) -> None:
    """Store ``payload`` as entry ``key`` atomically; failures are logged, never raised.

    Creates the folder ``0o700``; an untrusted folder is left alone (with
    the warning of the trust check).
    """
    d = cache_dir()
    tmp = None
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        if not _trusted(d):
            return
        header = _HEADER.pack(_MAGIC, FORMAT_VERSION, _KINDS[kind], len(payload),
                              sha256(payload).digest(), key.encode())
        tmp = d / f".{key[:16]}-{os.getpid()}-{os.urandom(6).hex()}.tmp"
        fd = os.open(tmp, _WRITE_FLAGS, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            f.write(payload)
        os.replace(tmp, _entry_path(d, key, kind))
        tmp = None
    except OSError as e:
        _debug("kernel cache: could not write %s: %s", d, e)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def get_image(source: str, headers: Mapping[str, str], target: _nvrtc.Target,
              compile_fn: Callable[..., bytes] | None = None, fast: bool = False,
              toolchain: _nvrtc.Toolchain | None = None, rebuild: bool = False) -> bytes:
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
    toolchain : Toolchain, optional
        The NVRTC that compiles (:func:`._toolchain.current`); with it a
        hit loads nothing.  Omitted: asked of the loaded NVRTC.
    rebuild : bool
        The image held for this key is a miss (the driver refused it: see
        ``_loader.get_kernel``): forget it, in memory and on disk, and
        compile again.

    Returns
    -------
    bytes
        A CUBIN, or NUL-terminated PTX.

    Raises
    ------
    NvrtcError
        If compilation fails (every waiting thread gets it; nothing is cached).
    StaleToolchain
        If NVRTC, loaded to compile, is not the one ``toolchain`` describes
        (the caller refreshes it and asks again); nothing is compiled.
    """
    tc = toolchain if toolchain is not None else _nvrtc.loaded_toolchain()
    options = _nvrtc.compile_options(target, fast=fast, version=tc.version)
    key = cache_key(source, headers, options, target, tc.version, tc.ident)
    with _lock:
        image = _memory.pop(key, None) if rebuild else _memory.get(key)
        if image is not None and not rebuild:
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
        if rebuild and use_disk:
            _drop_entry(key, target.kind)
        image = read_entry(key, target.kind) if use_disk and not rebuild else None
        if image is None:
            fn = compile_fn
            if fn is None:
                fn = _nvrtc.compile_program
                if toolchain is not None:
                    loaded = _nvrtc.loaded_toolchain()
                    if loaded != toolchain:
                        raise _nvrtc.StaleToolchain(toolchain, loaded)
            image = fn(source, headers, options, target.kind)
            if use_disk:
                write_entry(key, target.kind, image)
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
        ``path`` (str, the disk folder), ``entries`` (kernel images in it),
        ``bytes`` (their total size), ``enabled`` (disk cache on) and
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
                if e.name.endswith(_SUFFIX) and e.is_file(follow_symlinks=False):
                    entries += 1
                    size += e.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    with _lock:
        mem = len(_memory)
    return {"path": str(d), "entries": entries, "bytes": size,
            "enabled": disk_cache_enabled(), "memory_entries": mem}


def clear_cache(memory: bool = True) -> int:
    """Delete the disk cache's entries (and the in-memory images).

    Only files this cache wrote (``*.gakc``, ``*.gakf`` and its temporary files) are
    removed -- a symlink under such a name is removed, never its target --;
    the folder itself stays.

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
            names = [e.name for e in it if e.is_file(follow_symlinks=False) or e.is_symlink()]
    except OSError:
        names = []
    for name in names:
        if (name.endswith((_SUFFIX, _FACTS_SUFFIX))
                or (name.startswith(".") and name.endswith(".tmp"))):
            try:
                os.unlink(d / name)
                removed += 1
            except OSError:
                pass
    if memory:
        with _lock:
            _memory.clear()
    return removed
