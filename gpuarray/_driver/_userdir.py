"""gpuarray's per-user cache folders and the rule for trusting one.

One concern: where compiled code that gpuarray loads lives on disk (kernel
images and host kernel libraries, ``gpuarray._kernels._cache``; the stand-in
driver, ``standin``), and when such a folder may be used.  A folder is
trusted only if it belongs to this user and no one else may write to it:
what is cached there is code that gets loaded and run.  Pure paths and
``os.stat``: no CUDA.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["user_cache_dir", "untrusted_reason"]


def user_cache_dir(name: str, override: str) -> Path:
    """The folder ``name`` of gpuarray's user cache (it may not exist yet).

    Parameters
    ----------
    name : str
        The subfolder, e.g. ``"kernels"``.
    override : str
        The environment variable that, when set, names the folder instead.

    Returns
    -------
    pathlib.Path
        ``$override``, else ``$XDG_CACHE_HOME/gpuarray/name``, else
        ``~/.cache/gpuarray/name``.

    Examples
    --------
    >>> user_cache_dir("demo", "EXAMPLE_UNSET_VARIABLE").parts[-2:]
    ('gpuarray', 'demo')
    """
    d = os.environ.get(override, "").strip()
    if d:
        return Path(d).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base).expanduser() if base else Path.home() / ".cache"
    return root / "gpuarray" / name


def untrusted_reason(st: os.stat_result) -> str | None:
    """Why a folder with status ``st`` must not hold code gpuarray loads, or None."""
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    if uid is not None and st.st_uid != uid:
        return f"it belongs to uid {st.st_uid}, not to this user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "everyone" if st.st_mode & stat.S_IWOTH else "its group"
        return f"{who} may write to it (mode {stat.S_IMODE(st.st_mode):o})"
    return None
