"""The capture checkpoint (``gpuarray/_driver/_checkpoint.py``): every driver call declared.

Every method of the driver interface has a kind, the testing guide's tables
are the code's, and a backend method with no declared kind is not served.
"""

from __future__ import annotations

import inspect
import pathlib
import re

import pytest

from gpuarray import _driver
from gpuarray._driver import _call_kinds
from gpuarray._driver._base import Backend
from gpuarray._driver._call_kinds import KINDS, RULES
from gpuarray._driver._checkpoint import Checkpoint

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "sim" / "testing.rst"


def _interface_methods(cls: type) -> set[str]:
    return {n for n, v in inspect.getmembers(cls, callable) if not n.startswith("_")}


def test_every_method_of_the_driver_interface_has_a_declared_kind():
    methods = _interface_methods(Backend)
    assert methods, "the interface lost its methods?"
    missing = sorted(methods - set(KINDS))
    assert not missing, f"driver calls with no declared capture kind: {missing}"
    stale = sorted(set(KINDS) - methods)
    assert not stale, f"kinds declared for calls the interface does not have: {stale}"
    assert {kind for kind, _ in KINDS.values()} == set(RULES)
    for name, (_, call) in KINDS.items():
        assert re.fullmatch(r"cu[A-Z][A-Za-z0-9]+", call), (name, call)


def test_methods_a_backend_adds_beside_the_interface_are_not_served():
    """Upper layers reach only declared calls: a backend's extra public methods are refused."""
    b = _driver.get_backend()
    extra = sorted(_interface_methods(type(b.backend)) - set(KINDS))
    for n in extra:
        with pytest.raises(AttributeError, match="no declared capture kind"):
            getattr(b, n)


def test_a_driver_call_with_no_declared_kind_is_not_served(monkeypatch):
    """The enumeration fails for a new interface method until its kind is declared."""

    class Grown(Backend):
        def stream_new_call(self, stream: int) -> None:  # a new driver call, undeclared
            """cuStreamNewCall."""

    methods = _interface_methods(Grown)
    assert "stream_new_call" in methods - set(KINDS)  # what the first test reports
    b = _driver.get_backend()
    monkeypatch.setattr(type(b.backend), "stream_new_call", lambda self, s: None, raising=False)
    with pytest.raises(AttributeError, match="stream_new_call.*no declared capture kind"):
        b.stream_new_call(0)


def test_get_backend_is_the_checkpoint():
    b = _driver.get_backend()
    assert isinstance(b, Checkpoint)
    assert _driver.checkpoint() is b
    _driver.set_backend(b.backend)  # wrapping again gives a checkpoint, not a checkpoint of one
    assert isinstance(_driver.get_backend(), Checkpoint)
    assert not isinstance(_driver.get_backend().backend, Checkpoint)


def _rows(text: str, header: str) -> list[list[str]]:
    """The rows of the list-table whose first header cell is ``header``."""
    start = text.index(f"   * - {header}\n")
    rows: list[list[str]] = []
    for block in re.split(r"\n   \* - ", text[start:].split("\n\n", 1)[0])[1:]:
        rows.append([c.strip() for c in block.split("\n     - ")])
    return rows


def test_the_testing_guide_tables_are_the_code():
    text = GUIDE.read_text()
    section = text[text.index("The capture checkpoint: kinds of driver call"):]
    kinds = {r[0].strip("`"): " ".join(r[1].split()) for r in _rows(section, "kind")}
    assert kinds == {k: " ".join(v.split()) for k, v in RULES.items()}
    calls = {r[0].strip("`"): (r[2].strip("`"), r[1].strip("`"))
             for r in _rows(section, "driver interface method")}
    assert calls == KINDS


def test_quiet_checkpoint_hands_out_the_backends_own_methods():
    """No capture can exist: stream work costs what it cost without the checkpoint."""
    raw = _driver.get_backend().backend
    b = Checkpoint(raw)  # fresh: no capture, no external stream seen
    try:
        assert not b._watching
        assert b.memcpy_htod_async == raw.memcpy_htod_async
        assert b.stream_synchronize == raw.stream_synchronize
        assert b.mem_free != raw.mem_free  # potentially unsafe: always relaxed
    finally:
        object.__setattr__(raw, "_checkpoint", _driver.get_backend())
    assert _call_kinds.QUERY in RULES


def _mode(b) -> str:
    prev = b.exchange_capture_mode("global")
    b.exchange_capture_mode(prev)
    return prev


def test_a_relaxed_block_switches_once_per_thread_and_restores_the_mode_it_found():
    import threading

    cp = _driver.checkpoint()
    b = cp.backend
    start = b.exchange_capture_mode("thread_local")  # not the default: the block restores it
    try:
        seen = []
        with cp.relaxed():
            assert _mode(b) == "relaxed"
            with cp.relaxed(now=True):  # nested: shares the outer switch
                assert _mode(b) == "relaxed"
            assert _mode(b) == "relaxed"  # the inner exit did not restore
            other = threading.Thread(target=lambda: seen.append(_mode(b)))
            other.start()
            other.join()
        assert seen == ["global"]  # the block is the thread's
        assert _mode(b) == "thread_local"
        with pytest.raises(KeyError), cp.relaxed():
            raise KeyError("inside")
        assert _mode(b) == "thread_local"  # restored after an error too
    finally:
        b.exchange_capture_mode(start)
