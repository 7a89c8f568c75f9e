"""What the PTX executor refuses, and the driver's code for each: its one module of errors.

:class:`PtxError` is PTX the simulator cannot load (``CUDA_ERROR_INVALID_PTX``
218 and ``..._UNSUPPORTED_PTX_VERSION`` 222, from the syntax and the
checker); :class:`UnsupportedPtx` is legal PTX it does not execute
(``CUDA_ERROR_INVALID_IMAGE`` 200, from the translation).
"""

from __future__ import annotations

from .._codes import INVALID_IMAGE

__all__ = ["PtxError", "UnsupportedPtx"]


class PtxError(ValueError):
    """PTX the simulator cannot load: ``code`` is the ``CUresult`` a driver answers.

    ``code`` is ``CUDA_ERROR_INVALID_PTX`` (218) for text that is not PTX,
    ``CUDA_ERROR_UNSUPPORTED_PTX_VERSION`` (222) for a ``.version`` newer
    than the simulator reads; :class:`.UnsupportedPtx` (also a PtxError)
    for an instruction or feature it does not execute.  ``message`` names
    the PTX line.
    """

    def __init__(self, code: int, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.line = line

    def __reduce__(self):  # picklable with its fields
        return (type(self), (self.code, self.message, self.line))


class UnsupportedPtx(PtxError):
    """An instruction or feature the executor does not run (``code`` 200, ``CUDA_ERROR_INVALID_IMAGE``)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(INVALID_IMAGE, message, line)
