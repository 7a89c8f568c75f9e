"""Which DLPack core runs: the C extension, or its ctypes twin; and ``host_address``.

One concern, at the bottom of the interop package (it imports nothing of
gpuarray): choosing the core once per process (``GPUARRAY_DLPACK_CORE=c|python``,
else the C extension when it is built and current, else the ctypes twin) and
offering its functions.  ``host_address`` is here because the transfer layers
need it on every small copy and sit below the DLPack modules.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["core", "CORE", "CORE_DESCRIPTION", "host_address", "select"]

#: What the C core must export; a build from older sources lacks some (an
#: editable install whose extension was not rebuilt) and is not used.
_CORE_FUNCTIONS = ("make", "consume", "host_address", "live_exports", "deleter_calls",
                   "exchange_install", "exchange_prepare", "exchange_import", "exchange_stream",
                   "exchange_forget_streams", "cai_fields", "cai_register")


def _import_c_core() -> Any:
    from . import _dlpack_core

    missing = [name for name in _CORE_FUNCTIONS if not hasattr(_dlpack_core, name)]
    if missing:
        raise ImportError(f"{_dlpack_core.__file__} is out of date (no {', '.join(missing)}): "
                          "rebuild it with `pip install .`")
    return _dlpack_core


def _select_core() -> tuple[Any, str, str]:
    want = os.environ.get("GPUARRAY_DLPACK_CORE", "").strip().lower()
    if want not in ("", "c", "python"):
        raise ValueError(f"GPUARRAY_DLPACK_CORE={want!r} is not 'c' or 'python'")
    why = "GPUARRAY_DLPACK_CORE=python"
    if want != "python":
        try:
            _dlpack_core = _import_c_core()
        except ImportError as exc:
            if want == "c":
                raise ImportError("GPUARRAY_DLPACK_CORE=c, but the C extension "
                                  f"gpuarray.interop._dlpack_core is not available: {exc}") from exc
            why = f"the C extension is not usable: {exc}"
        else:
            return _dlpack_core, "c", "C extension (gpuarray.interop._dlpack_core)"
    from . import _dlpack_ctypes

    _dlpack_ctypes.install_sweeps()
    return _dlpack_ctypes, "python", f"ctypes fallback ({why})"


core, CORE, CORE_DESCRIPTION = _select_core()
#: ``host_address(obj) -> int``: the address of element ``[0, ..., 0]`` of a
#: host array, read from its NumPy array interface (``obj.__array_struct__``;
#: every ndarray has it).  ``TypeError`` for an object without one.  The
#: core's function itself (no wrapper: every small host copy calls it); look
#: it up on this module at each use, as tests switch cores (:func:`select`).
host_address: Any = core.host_address


def select(name: str) -> str:
    """Switch to the ``"c"`` or ``"python"`` core (tests); returns the previous one's name."""
    global core, CORE, CORE_DESCRIPTION, host_address
    previous = CORE
    if name == "c":
        core, CORE_DESCRIPTION = _import_c_core(), "C extension (gpuarray.interop._dlpack_core)"
    elif name == "python":
        from . import _dlpack_ctypes

        _dlpack_ctypes.install_sweeps()
        core, CORE_DESCRIPTION = _dlpack_ctypes, "ctypes fallback (selected by a test)"
    else:
        raise ValueError(f"DLPack core must be 'c' or 'python', not {name!r}")
    CORE, host_address = name, core.host_address
    return previous
