"""Which NVRTC would compile, identified without loading it.

Loading NVRTC costs about 0.1-0.2 s (importing ``cuda.bindings.nvrtc`` and
``dlopen`` of a 140 MB library); a kernel-cache hit must not pay that just to
learn the library's version.  :func:`fingerprint` names the NVRTC that
``cuda.bindings`` would load from what is on disk instead: the path, size,
modification time, inode and device of every NVRTC library file in every
place cuda-pathfinder's search looks (site-packages wheels ``nvidia/cu13``,
``nvidia/cu12``, ``nvidia/cuda_nvrtc``; ``$CONDA_PREFIX``; the folders of
``LD_LIBRARY_PATH``; ``$CUDA_PATH``/``$CUDA_HOME``; the files that
``/etc/ld.so.cache`` lists; the sonames in the system library folders), the
NVRTC libraries
already mapped into this process, the versions of the installed
cuda-bindings/cuda-pathfinder/NVRTC wheels (their ``.dist-info`` names).
Environment variables enter only through the files in the folders they name,
so a change that adds no NVRTC file (another ``PATH``, an
``LD_LIBRARY_PATH`` entry without NVRTC) keeps the fingerprint.

It errs on the side of change: anything that could make the loader pick
another library, or the same path hold another build, gives another
fingerprint (at worst a needless recompile); nothing is ``dlopen``-ed and no
Python extension is imported.  Computed once per process (about 0.1-1 ms).
Blind spot: a library rewritten in place with its size, modification time
and inode all restored.  Should the remembered facts then be wrong, the next
compile notices (:class:`._nvrtc.StaleToolchain`) and corrects them.
"""

from __future__ import annotations

import functools
import os
import site
import sys

__all__ = ["fingerprint", "candidate_dirs"]

#: Sub-folders of a site-packages folder where NVIDIA's wheels put libnvrtc.
WHEEL_LIB_DIRS = ("nvidia/cu13/lib", "nvidia/cu12/lib", "nvidia/cuda_nvrtc/lib",
                  "nvidia/cu13/bin", "nvidia/cuda_nvrtc/bin")
#: Folders the dynamic loader searches by default (glibc, multiarch, RHEL):
#: large, so only the sonames below are looked up there, not listed.
SYSTEM_LIB_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib",
                   "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                   "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                   "/usr/local/cuda/lib64", "/usr/local/cuda/lib")
#: The names the loader asks for (cuda-pathfinder's, newest first).
SONAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")
#: Installed distributions whose version may change which library is picked.
_DISTS = ("cuda_bindings-", "cuda_pathfinder-", "nvidia_cuda_nvrtc")
_LD_SO_CACHE = "/etc/ld.so.cache"
_CACHE_PATHS = rb"/[^\0]*/[^\0/]*nvrtc[^\0/]*"


def _is_nvrtc(name: str) -> bool:
    return "nvrtc" in name.lower()


def _site_packages() -> list[str]:
    out: list[str] = []
    try:
        out += site.getsitepackages()
    except AttributeError:  # pragma: no cover - virtualenv's old site module
        pass
    if site.ENABLE_USER_SITE:
        out.append(site.getusersitepackages())
    return list(dict.fromkeys(out))


def _site_dirs() -> list[str]:
    """site-packages folders, then ``sys.path`` (a superset of where pathfinder looks)."""
    return list(dict.fromkeys(_site_packages() + [p for p in sys.path if p]))


def candidate_dirs() -> list[str]:
    """The folders whose NVRTC files all enter the fingerprint, in search order.

    They may not exist.  The system folders (:data:`SYSTEM_LIB_DIRS`) come on
    top, where only the :data:`SONAMES` are looked up.
    """
    dirs: list[str] = []
    for sp in _site_dirs():
        dirs += [os.path.join(sp, rel) for rel in WHEEL_LIB_DIRS]
    conda = os.environ.get("CONDA_PREFIX", "")
    if conda:
        dirs += [os.path.join(conda, "lib"), os.path.join(conda, "lib64")]
    dirs += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    for var in ("CUDA_PATH", "CUDA_HOME"):
        root = os.environ.get(var, "")
        if root:
            dirs += [os.path.join(root, "lib64"), os.path.join(root, "lib"),
                     os.path.join(root, "bin")]
            targets = os.path.join(root, "targets")
            try:
                with os.scandir(targets) as it:
                    dirs += [os.path.join(e.path, sub) for e in it for sub in ("lib", "lib64")]
            except OSError:
                pass
    return list(dict.fromkeys(dirs))  # first occurrence wins: search order kept


def _stat_line(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError as e:
        return f"{path}\0missing:{e.errno}"
    return f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0{st.st_dev}"


def _scan_dir(d: str, pick) -> list[str]:
    try:
        with os.scandir(d) as it:
            return sorted(os.path.join(d, e.name) for e in it if pick(e.name))
    except OSError:
        return []


def _ld_cache_paths() -> list[str]:
    """The NVRTC paths ld.so.cache lists (not the cache file: any ldconfig rewrites it)."""
    try:
        with open(_LD_SO_CACHE, "rb") as f:
            data = f.read(64 << 20)
    except OSError:
        return []
    if b"nvrtc" not in data:
        return []
    import re  # only when the cache lists an NVRTC

    paths = {m.decode(errors="replace") for m in re.findall(_CACHE_PATHS, data)}
    return sorted(paths)


def _mapped_paths() -> list[str]:
    """NVRTC libraries already loaded into this process (the loader reuses them)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            data = f.read()
    except OSError:
        return []
    if b"nvrtc" not in data:
        return []
    found = set()
    for line in data.splitlines():
        if b"libnvrtc" in line:
            parts = line.split(None, 5)
            # libnvrtc itself only: cuda.bindings' own nvrtc modules are mapped
            # as soon as cuda.bindings.nvrtc is imported, by whoever imports it
            # first, which must not change the key.
            if len(parts) == 6 and os.path.basename(parts[5]).startswith(b"libnvrtc"):
                found.add(parts[5].decode(errors="replace"))
    return sorted(found)


def _describe() -> list[str]:
    # Environment variables enter through the folders they name: a variable
    # that adds no NVRTC file changes nothing the loader could pick.
    lines = [f"platform={sys.platform}"]
    for sp in _site_packages():
        lines += _scan_dir(sp, lambda n: n.startswith(_DISTS))
    for d in candidate_dirs():
        lines += [_stat_line(p) for p in _scan_dir(d, _is_nvrtc)]
    for d in SYSTEM_LIB_DIRS:
        for name in SONAMES:
            p = os.path.join(d, name)
            if os.path.lexists(p):
                lines.append(_stat_line(p))
    lines += [_stat_line(p) for p in _ld_cache_paths()]
    # A loaded library counts only when it is none of the files above (say
    # LD_PRELOAD): whether NVRTC happens to be loaded already must not
    # change the key.
    seen = {line.split("\0", 1)[1] for line in lines if "\0" in line}
    lines += ["mapped:" + line for line in map(_stat_line, _mapped_paths())
              if line.split("\0", 1)[1] not in seen]
    return lines


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
    """Hex SHA-256 naming the NVRTC this process would load (see the module docstring).

    Returns
    -------
    str
        64 hex digits; equal in two processes when, as far as the files and
        the environment tell, both would load the same NVRTC build.
    """
    from ._hash import sha256

    h = sha256()
    for line in _describe():
        b = line.encode(errors="surrogateescape")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()
