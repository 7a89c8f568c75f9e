"""Modules and kernel launches: the driver calls of the real backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _state as S
from ._state import (
    _ELF_MAGIC,
    _FATBIN_MAGIC,
    _PARAM_ARRAYS,
    _VOID_P,
    CallsBase,
    _addressof,
    _bad_param,
    _check,
)


class ModuleCalls(CallsBase):
    """Modules and kernel launches: the driver calls of the real backend."""

    # -------------------------------------------------- modules and launches
    def module_load_data(self, image: bytes) -> int:
        if not self._ready:
            self.init()
        image = bytes(image)
        head = image[:4]
        if head != _ELF_MAGIC and head != _FATBIN_MAGIC and not image.endswith(b"\0"):
            image += b"\0"  # PTX text must be NUL-terminated
        return int(
            _check(
                S._d.cuModuleLoadData(image),
                "cuModuleLoadData",
                lambda: f"while loading a {len(image)}-byte module image",
            )
        )

    def module_unload(self, module: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuModuleUnload(module), "cuModuleUnload")

    def module_get_function(self, module: int, name: str) -> int:
        if not self._ready:
            self.init()
        return int(
            _check(
                S._d.cuModuleGetFunction(module, name.encode()),
                "cuModuleGetFunction",
                lambda: f"for kernel {name!r}",
            )
        )

    def launch_kernel(
        self,
        func: int,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: int,
        params: Sequence[Any],
    ) -> None:
        if not self._ready:
            self.init()
        n = len(params)
        if n:
            # The caller's `params` keeps the ctypes objects alive for the
            # call; `args` (the void*[] of their addresses) lives in this frame.
            array_type = _PARAM_ARRAYS.get(n)
            if array_type is None:
                array_type = _PARAM_ARRAYS[n] = _VOID_P * n
            args = array_type()
            try:
                args[:] = [_addressof(p) for p in params]  # faster than array_type(*...)
            except TypeError:
                raise _bad_param(params) from None
            kp = _addressof(args)
        else:
            kp = 0
        gx, gy, gz = grid
        bx, by, bz = block
        _check(
            S._d.cuLaunchKernel(func, gx, gy, gz, bx, by, bz, shared_mem, stream or 1, kp, 0),
            "cuLaunchKernel",
            lambda: (
                f"launching grid {tuple(grid)} block {tuple(block)} "
                f"with {shared_mem} bytes of shared memory"
            ),
        )
