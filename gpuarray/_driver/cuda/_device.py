"""Devices, contexts and the profiler: the driver calls of the real backend."""

from __future__ import annotations

from typing import Any

from .._base import DEVICE_ATTRIBUTES
from . import _state as S
from ._state import _ERR_PEER_ACCESS_ALREADY_ENABLED, CallsBase, _check


class DeviceCalls(CallsBase):
    """Devices, contexts and the profiler: the driver calls of the real backend."""

    # -------------------------------------------------------------- devices
    def _dev(self, ordinal: int) -> Any:
        dev = self._devices.get(ordinal)
        if dev is None:
            if not self._ready:
                self.init()
            dev = _check(S._d.cuDeviceGet(ordinal), "cuDeviceGet", lambda: f"for device {ordinal}")
            self._devices[ordinal] = dev
        return dev

    def device_count(self) -> int:
        if not self._ready:
            self.init()
        return int(_check(S._d.cuDeviceGetCount(), "cuDeviceGetCount"))

    def device_name(self, ordinal: int) -> str:
        dev = self._dev(ordinal)  # before `S._d.` is evaluated: it may initialise
        raw = _check(S._d.cuDeviceGetName(256, dev), "cuDeviceGetName")
        return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")

    def device_attribute(self, attr: str, ordinal: int) -> int:
        if attr not in DEVICE_ATTRIBUTES:
            raise ValueError(
                f"unknown device attribute {attr!r}; expected one of {', '.join(DEVICE_ATTRIBUTES)}"
            )
        dev = self._dev(ordinal)
        return int(
            _check(
                S._d.cuDeviceGetAttribute(S._DEV_ATTRS[attr], dev),
                "cuDeviceGetAttribute",
                lambda: f"for attribute {attr!r} of device {ordinal}",
            )
        )

    def device_total_memory(self, ordinal: int) -> int:
        dev = self._dev(ordinal)
        return int(_check(S._d.cuDeviceTotalMem(dev), "cuDeviceTotalMem"))

    def device_uuid(self, ordinal: int) -> bytes:
        dev = self._dev(ordinal)
        uuid = _check(S._cuDeviceGetUuid(dev), "cuDeviceGetUuid")
        return bytes(uuid.bytes)[:16]

    def device_can_access_peer(self, ordinal: int, peer: int) -> bool:
        dev, peer_dev = self._dev(ordinal), self._dev(peer)
        return bool(_check(S._d.cuDeviceCanAccessPeer(dev, peer_dev), "cuDeviceCanAccessPeer"))

    # ------------------------------------------------------------- contexts
    def primary_ctx_retain(self, ordinal: int) -> int:
        dev = self._dev(ordinal)
        return int(
            _check(
                S._d.cuDevicePrimaryCtxRetain(dev),
                "cuDevicePrimaryCtxRetain",
                lambda: f"for device {ordinal}",
            )
        )

    def primary_ctx_release(self, ordinal: int) -> None:
        dev = self._dev(ordinal)
        _check(S._d.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")

    def primary_ctx_reset(self, ordinal: int) -> None:
        dev = self._dev(ordinal)
        _check(S._d.cuDevicePrimaryCtxReset(dev), "cuDevicePrimaryCtxReset",
               lambda: f"for device {ordinal}")

    def ctx_set_current(self, ctx: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def ctx_get_current(self) -> int:
        if not self._ready:
            self.init()
        ctx = _check(S._d.cuCtxGetCurrent(), "cuCtxGetCurrent")
        return int(ctx) if ctx is not None else 0

    def ctx_get_device(self) -> int:
        if not self._ready:
            self.init()
        return int(_check(S._d.cuCtxGetDevice(), "cuCtxGetDevice"))

    def ctx_synchronize(self) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuCtxSynchronize(), "cuCtxSynchronize")

    def ctx_enable_peer_access(self, peer_ctx: int) -> None:
        if not self._ready:
            self.init()
        res = S._d.cuCtxEnablePeerAccess(peer_ctx, 0)
        if int(res[0]) != _ERR_PEER_ACCESS_ALREADY_ENABLED:
            _check(res, "cuCtxEnablePeerAccess")

    def profiler_start(self) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuProfilerStart(), "cuProfilerStart")

    def profiler_stop(self) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuProfilerStop(), "cuProfilerStop")
