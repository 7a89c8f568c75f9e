"""Stream capture and graphs: the driver calls of the real backend.

``cuStreamBeginCapture_v2``, ``cuStreamEndCapture``, ``cuStreamIsCapturing``,
``cuStreamGetCaptureInfo``, ``cuThreadExchangeStreamCaptureMode`` and the
``cuGraph*`` calls that instantiate, upload, launch and destroy what a
capture made.  Modes and statuses cross the driver interface as strings
(``_base.CAPTURE_MODES`` / ``CAPTURE_STATUSES``, in ``CUstreamCaptureMode``
and ``CUstreamCaptureStatus`` order).
"""

from __future__ import annotations

from .._base import CAPTURE_MODES, CAPTURE_STATUSES
from . import _state as S
from ._state import CallsBase, _check

_INVALID_VALUE = 1


def _mode(mode: str, call: str):
    try:
        return S._CAPTURE_MODES[CAPTURE_MODES.index(mode)]
    except ValueError:
        raise ValueError(f"{call}: capture mode {mode!r} is not one of {CAPTURE_MODES}") from None


class GraphCalls(CallsBase):
    """Stream capture and graphs: the driver calls of the real backend."""

    def stream_begin_capture(self, stream: int, mode: str = "global") -> None:
        if not self._ready:
            self.init()
        m = _mode(mode, "cuStreamBeginCapture")
        _check(S._d.cuStreamBeginCapture(stream or 1, m), "cuStreamBeginCapture")

    def stream_end_capture(self, stream: int) -> int:
        if not self._ready:
            self.init()
        return int(_check(S._d.cuStreamEndCapture(stream or 1), "cuStreamEndCapture"))

    def stream_is_capturing(self, stream: int) -> str:
        if not self._ready:
            self.init()
        status = _check(S._d.cuStreamIsCapturing(stream or 1), "cuStreamIsCapturing")
        return CAPTURE_STATUSES[int(status)]

    def stream_capture_info(self, stream: int) -> tuple[str, int]:
        if not self._ready:
            self.init()
        out = _check(S._d.cuStreamGetCaptureInfo(stream or 1), "cuStreamGetCaptureInfo")
        status = CAPTURE_STATUSES[int(out[0])]
        return status, int(out[1]) if status == "active" else 0

    def exchange_capture_mode(self, mode: str) -> str:
        if not self._ready:
            self.init()
        m = _mode(mode, "cuThreadExchangeStreamCaptureMode")
        prev = _check(S._d.cuThreadExchangeStreamCaptureMode(m), "cuThreadExchangeStreamCaptureMode")
        return CAPTURE_MODES[int(prev)]

    def graph_instantiate(self, graph: int, auto_free_on_launch: bool = True) -> int:
        if not self._ready:
            self.init()
        flags = S._GRAPH_AUTO_FREE_ON_LAUNCH if auto_free_on_launch else 0
        return int(_check(S._cuGraphInstantiate(graph, flags),
                          "cuGraphInstantiateWithFlags"))

    def graph_launch(self, graph_exec: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuGraphLaunch(graph_exec, stream or 1), "cuGraphLaunch")

    def graph_upload(self, graph_exec: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuGraphUpload(graph_exec, stream or 1), "cuGraphUpload")

    def graph_exec_destroy(self, graph_exec: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuGraphExecDestroy(graph_exec), "cuGraphExecDestroy")

    def graph_destroy(self, graph: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuGraphDestroy(graph), "cuGraphDestroy")
