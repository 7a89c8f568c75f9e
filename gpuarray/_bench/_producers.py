"""The foreign producers the benchmark rows import from: one protocol each."""

from __future__ import annotations

from typing import Any

__all__ = ["CAIOnly", "DLPackOnly"]


class CAIOnly:
    """Exports only ``__cuda_array_interface__`` (a foreign producer)."""

    def __init__(self, arr: Any) -> None:
        self.__cuda_array_interface__ = dict(arr.__cuda_array_interface__)
        self._keep = arr


class DLPackOnly:
    """Exports only ``__dlpack__`` / ``__dlpack_device__`` (a foreign producer)."""

    def __init__(self, arr: Any) -> None:
        self._arr = arr

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._arr.__dlpack_device__()
