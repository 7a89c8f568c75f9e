"""The stand-in driver's GPU coredump settings: ``cuCoredump{Get,Set}Attribute[Global]``.

One concern: the settings a driver keeps for GPU coredumps, globally and per
context, with cuda.h's defaults, value types and refusals.  They are kept and
reported, as a driver reports them; the simulator writes no coredump (a device
fault is reported by its message and the sticky error code, as always), so the
settings change nothing else.

Values (cuda.h, ``CUcoredumpSettings``): ``ENABLE_ON_EXCEPTION``,
``TRIGGER_HOST``, ``LIGHTWEIGHT`` and ``ENABLE_USER_TRIGGER`` are C ``bool``
(1 byte); ``FILE`` and ``PIPE`` strings of up to 1023 characters (a
1024-byte buffer); ``GENERATION_FLAGS`` an ``int``.  A ``value`` of NULL asks
for the size.  ``ENABLE_USER_TRIGGER`` and ``PIPE`` cannot be set per
context, and a context's setting not made falls back to the global one.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
import weakref
from typing import Any

from gpuarray.errors import CudaError

from ._support import _INVALID_VALUE, _SIZE, backend

_ENABLE_ON_EXCEPTION, _TRIGGER_HOST, _LIGHTWEIGHT, _USER_TRIGGER, _FILE, _PIPE, _FLAGS = range(1, 8)
_STRING_BYTES = 1024
#: Attribute -> (ctypes type or None for a string, its size in bytes).
_TYPES: dict[int, tuple[Any, int]] = {
    _ENABLE_ON_EXCEPTION: (ctypes.c_bool, 1), _TRIGGER_HOST: (ctypes.c_bool, 1),
    _LIGHTWEIGHT: (ctypes.c_bool, 1), _USER_TRIGGER: (ctypes.c_bool, 1),
    _FILE: (None, _STRING_BYTES), _PIPE: (None, _STRING_BYTES), _FLAGS: (ctypes.c_int, 4),
}
#: Not settable per context (cuda.h, cuCoredumpSetAttribute).
_GLOBAL_ONLY = frozenset({_USER_TRIGGER, _PIPE})

_lock = threading.Lock()
_global: dict[int, Any] = {}
_per_context: weakref.WeakKeyDictionary[Any, dict[int, Any]] = weakref.WeakKeyDictionary()


def _default(attrib: int) -> Any:
    host, pid = socket.gethostname(), os.getpid()
    return {_ENABLE_ON_EXCEPTION: False, _TRIGGER_HOST: True, _LIGHTWEIGHT: False,
            _USER_TRIGGER: False, _FILE: f"core.cuda.{host}.{pid}".encode(),
            _PIPE: f"corepipe.cuda.{host}.{pid}".encode(), _FLAGS: 0}[attrib]


def _kind(call: str, attrib: int, psize: int) -> tuple[Any, int]:
    if attrib not in _TYPES:
        raise CudaError(_INVALID_VALUE, call, f"coredump attribute {attrib} (cuda.h has 1..7)")
    if not psize:
        raise CudaError(_INVALID_VALUE, call, "(NULL size)")
    return _TYPES[attrib]


def _get(call: str, attrib: int, value: int, psize: int, table: dict[int, Any] | None) -> None:
    ctype, need = _kind(call, attrib, psize)
    size = _SIZE.from_address(psize)
    if not value:
        size.value = need
        return
    if size.value < (1 if ctype is None else need):
        raise CudaError(_INVALID_VALUE, call, f"size {size.value} for attribute {attrib} "
                                              f"(it needs {need} bytes)")
    with _lock:
        got = table.get(attrib) if table is not None else None
        if got is None:
            got = _global.get(attrib, _default(attrib))
    if ctype is None:
        data = got[:size.value - 1] + b"\0"
        ctypes.memmove(value, data, len(data))
    else:
        ctype.from_address(value).value = got


def _set(call: str, attrib: int, value: int, psize: int, table: dict[int, Any]) -> None:
    ctype, need = _kind(call, attrib, psize)
    size = _SIZE.from_address(psize)
    if not value:
        size.value = need
        return
    if ctype is None:
        text = ctypes.string_at(value, min(size.value, _STRING_BYTES))
        text = text.split(b"\0", 1)[0]
        if len(text) >= _STRING_BYTES:
            raise CudaError(_INVALID_VALUE, call, f"a {attrib} string of {len(text)} characters "
                                                  "(at most 1023)")
        got: Any = text
    else:
        if size.value < need:
            raise CudaError(_INVALID_VALUE, call, f"size {size.value} for attribute {attrib} "
                                                  f"(it needs {need} bytes)")
        got = ctype.from_address(value).value
    with _lock:
        table[attrib] = got


def cuCoredumpGetAttributeGlobal(attrib: int, value: int, psize: int) -> None:
    _get("cuCoredumpGetAttributeGlobal", attrib, value, psize, None)


def cuCoredumpSetAttributeGlobal(attrib: int, value: int, psize: int) -> None:
    call = "cuCoredumpSetAttributeGlobal"
    if attrib == _PIPE and value and _global.get(_USER_TRIGGER):
        raise CudaError(_INVALID_VALUE, call, "the pipe cannot change once ENABLE_USER_TRIGGER is "
                                              "set (cuda.h)")
    _set(call, attrib, value, psize, _global)


def _context_table(call: str) -> dict[int, Any]:
    ctx = backend()._current(call, work=False)
    with _lock:
        return _per_context.setdefault(ctx, {})


def cuCoredumpGetAttribute(attrib: int, value: int, psize: int) -> None:
    call = "cuCoredumpGetAttribute"
    _get(call, attrib, value, psize, _context_table(call))


def cuCoredumpSetAttribute(attrib: int, value: int, psize: int) -> None:
    call = "cuCoredumpSetAttribute"
    if attrib in _GLOBAL_ONLY:
        raise CudaError(_INVALID_VALUE, call, f"coredump attribute {attrib} cannot be set per "
                                              "context (cuda.h: ENABLE_USER_TRIGGER and PIPE)")
    _set(call, attrib, value, psize, _context_table(call))
