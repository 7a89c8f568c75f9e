"""The interpreter tier: a module's decoded form run by a prebuilt interpreter, nothing compiled per module.

One concern: make a decoded module (``_decode.py``) launchable.  Two kinds
of code are compiled, each once per toolchain and cached on disk like any
build (kind ``host`` of the kernel cache, the same trust rules):

- the interpreter itself (``ptx_interp.cpp`` after the runtime headers:
  :func:`core_entry`, the address of its ``ga_ptx_interp`` entry);
- the *handlers*: one C++ function per distinct instruction form (the
  translator's own C++ for an instruction, operands in slots), shared by
  every module of every process -- a module whose forms were all seen
  before starts at once; the forms it brings new are compiled together in
  one unit (:func:`handlers`), each then found through a small reference
  entry naming the library that holds it.

:class:`Interpreted` lays a decoded module out as the interpreter's
records (``ptx::interp::Step``/``Local``/``Func``/``Entry``, in NumPy
arrays it keeps alive) and gives each entry's record address, which a
launch passes in ``ptx::Launch::code``.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ._decode import CALL, HANDLER, ICALL, Decoded

__all__ = ["core_entry", "handlers", "handler_source", "Interpreted", "CORE_SOURCE"]

#: The interpreter's C++ (compiled after the runtime headers).
CORE_SOURCE = Path(__file__).with_name("ptx_interp.cpp")

_STEP = np.dtype([("fn", "<u8"), ("k", "<u8"), ("op", "<u4"), ("guard", "<u4"), ("neg", "<u4"),
                  ("target", "<u4"), ("back", "<u4"), ("line", "<u4")])
_LOCAL = np.dtype([("size", "<u8"), ("align", "<u8"), ("slot", "<u4"), ("line", "<u4")])
_FUNC = np.dtype([("steps", "<u8"), ("locals", "<u8"), ("nlocals", "<u4"), ("nregs", "<u4"),
                  ("param_bytes", "<u4"), ("max_args", "<u4")])
_ENTRY = np.dtype([("funcs", "<u8"), ("func", "<u8"), ("local_bytes", "<u8")])
_REF = b"GAPTXREF1\n"

_lock = threading.Lock()
_addresses: dict[str, int] = {}  # form -> handler address
_libs: dict[str, Any] = {}  # library key -> the loaded library
_core: dict[str, int] = {}  # toolchain key -> ga_ptx_interp's address


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _symbol(form: str) -> str:
    return "ga_h_" + _digest(form)[:32]


def handler_source(form: str) -> str:
    """The C++ of the handler of ``form`` (see ``_slots.py`` for its conventions)."""
    return (f"GA_HOST_EXPORT void {_symbol(form)}(ptx::Thread* T, uint64_t* R, const uint64_t* K, "
            "char* const* A, char* PB) {\n"
            "    (void)T; (void)R; (void)K; (void)A; (void)PB;\n"
            "    const uint32_t LN_ = (uint32_t)K[0]; (void)LN_;\n"
            "    uint32_t& CC = *reinterpret_cast<uint32_t*>(R); (void)CC;\n"
            f"    {form}\n}}\n")


def _key(tc: Any, what: str) -> str:
    from ._runtime_src import cache_key

    return cache_key(_digest(what), tc.key())


def _address(lib: Any, symbol: str) -> int:
    import ctypes

    return ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value or 0


def core_entry(tc: Any) -> int:
    """The address of the interpreter's entry (``ga_ptx_interp``), built or loaded once."""
    from ._runtime_src import runtime_source

    tkey = tc.key()
    with _lock:
        hit = _core.get(tkey)
        if hit is not None:
            return hit
        text = CORE_SOURCE.read_text(encoding="utf-8")
        key = _key(tc, "gpuarray-ptx-interpreter\0" + text)
        payload = tc.read(key)
        lib = None
        if payload is not None:
            try:
                lib = tc.load(payload)
                addr = _address(lib, "ga_ptx_interp")
            except (OSError, AttributeError):
                lib = None
        if lib is None:
            payload = tc.build(text, "the PTX interpreter (ptx_interp.cpp)",
                               prefix=runtime_source())
            tc.write(key, payload)
            lib = tc.load(payload)
            addr = _address(lib, "ga_ptx_interp")
        _libs[key] = lib
        _core[tkey] = addr
        return addr


def handlers(tc: Any, forms: Iterable[str]) -> tuple[dict[str, int], int]:
    """The handler address of each form (compiling those no cache holds, in one unit).

    Returns the addresses and how many forms were compiled here.
    """
    from ._runtime_src import runtime_source

    wanted = set(forms)
    out: dict[str, int] = {}
    with _lock:
        missing = []
        for form in sorted(wanted):
            addr = _addresses.get(form)
            if addr is None:
                addr = _from_disk(tc, form)
            if addr is None:
                missing.append(form)
            else:
                out[form] = _addresses[form] = addr
        if missing:
            source = "".join(handler_source(f) for f in missing)
            payload = tc.build(source, f"{len(missing)} PTX instruction forms (the interpreter's "
                                       "handlers)", prefix=runtime_source())
            lib_key = _digest("gpuarray-ptx-handlers\0") + hashlib.sha256(payload).hexdigest()
            lib_key = hashlib.sha256(lib_key.encode()).hexdigest()
            tc.write(lib_key, payload)
            lib = _libs[lib_key] = tc.load(payload)
            for form in missing:
                out[form] = _addresses[form] = _address(lib, _symbol(form))
                tc.write(_key(tc, "gpuarray-ptx-handler\0" + form), _REF + lib_key.encode())
        return out, len(missing)


def _from_disk(tc: Any, form: str) -> int | None:
    ref = tc.read(_key(tc, "gpuarray-ptx-handler\0" + form))
    if ref is None or not ref.startswith(_REF):
        return None
    lib_key = ref[len(_REF):].decode("ascii", "replace")
    lib = _libs.get(lib_key)
    if lib is None:
        payload = tc.read(lib_key)
        if payload is None:
            return None
        try:
            lib = _libs[lib_key] = tc.load(payload)
        except OSError:
            return None
    try:
        return _address(lib, _symbol(form))
    except AttributeError:  # not the library the reference said: compile the form again
        return None


class Interpreted:
    """A decoded module laid out for the interpreter; :meth:`entry` gives an entry's record."""

    def __init__(self, decoded: Decoded, addresses: dict[str, int]) -> None:
        ks: list[int] = [0]
        k_at: list[list[int]] = []
        for f in decoded.functions:
            offs = []
            for s in f.steps:
                if s.k:
                    offs.append(len(ks))
                    ks.extend(s.k)
                else:
                    offs.append(0)
            k_at.append(offs)
        self._k = np.array(ks, dtype=np.uint64)
        kbase = self._k.ctypes.data
        self._keep: list[np.ndarray] = []
        self._funcs = np.zeros(max(1, len(decoded.functions)), dtype=_FUNC)
        for i, (f, offs) in enumerate(zip(decoded.functions, k_at, strict=True)):
            steps = np.zeros(len(f.steps), dtype=_STEP)
            for j, s in enumerate(f.steps):
                steps[j] = (addresses[s.form] if s.kind == HANDLER else 0, kbase + 8 * offs[j],
                            s.kind, s.guard, int(s.neg), s.target, int(s.back), s.line)
            locs = np.zeros(max(1, len(f.locals)), dtype=_LOCAL)
            for j, (slot, size, align, line) in enumerate(f.locals):
                locs[j] = (size, align, slot, line)
            self._keep += [steps, locs]
            max_args = max((s.k[0] for s in f.steps if s.kind in (CALL, ICALL)), default=0)
            self._funcs[i] = (steps.ctypes.data, locs.ctypes.data, len(f.locals), f.nregs,
                              f.param_bytes, max_args)
        self._entries = np.zeros(max(1, len(decoded.entry_index)), dtype=_ENTRY)
        self._entry_at: dict[str, int] = {}
        for i, (name, fi) in enumerate(decoded.entry_index.items()):
            self._entries[i] = (self._funcs.ctypes.data, fi, decoded.local_bytes[name])
            self._entry_at[name] = self._entries.ctypes.data + i * _ENTRY.itemsize

    def entry(self, name: str) -> int:
        """The address of entry ``name``'s record (``ptx::interp::Entry``)."""
        return self._entry_at[name]
