"""The stand-in driver's device calls: initialisation, devices, primary contexts, errors.

One concern: the driver forms about the machine and its devices --
``cuInit``, the version, device enumeration and attributes (every
``CUdevice_attribute``, from the simulator's profile table
``sim/_profile.py``), primary contexts, the
profiler switches, and ``cuGetErrorName``/``cuGetErrorString`` -- each
named after its form and served by the simulator of ``_support.py``.
"""

from __future__ import annotations

import ctypes
from typing import Any

from gpuarray.errors import _DESCRIPTIONS, CUDA_ERROR_NAMES, CudaError

from .. import _profile
from . import _context_calls, _support
from ._support import (
    _I32,
    _INVALID_VALUE,
    _SIZE,
    _U32,
    _U64,
    _device,
    _out,
    _output_first,
    _signed,
    _str_out,
    backend,
)

_STRINGS: dict[bytes, Any] = {}  # the C strings cuGetErrorName/String hand out, kept alive


def cuInit(flags: int) -> None:
    if flags:
        raise CudaError(_INVALID_VALUE, "cuInit", f"flags {flags} (must be 0)")
    backend().init()
    _support.initialized = True


def cuDriverGetVersion(p: int) -> None:
    _out("cuDriverGetVersion", p, _I32, backend().driver_version())


def cuDeviceGet(p: int, ordinal: int) -> None:
    _out("cuDeviceGet", p, _I32, _device("cuDeviceGet", ordinal))


def cuDeviceGetCount(p: int) -> None:
    _out("cuDeviceGetCount", p, _I32, backend().device_count())


def cuDeviceGetName(p: int, length: int, dev: int) -> None:
    name = backend().device_name(_signed(dev)).encode()
    n = _signed(length)
    if not p or n <= 0:
        raise CudaError(_INVALID_VALUE, "cuDeviceGetName", f"(buffer {p:#x} of {n} bytes)")
    raw = name[: n - 1] + b"\0"
    ctypes.memmove(p, raw, len(raw))


def cuDeviceGetAttribute(p: int, attrib: int, dev: int) -> None:
    attrib = _signed(attrib)
    row = _profile.BY_CODE.get(attrib)
    if row is None:
        raise CudaError(_INVALID_VALUE, "cuDeviceGetAttribute",
                        f"{attrib} is not a CUdevice_attribute")
    _out("cuDeviceGetAttribute", p, _I32, backend().device_attribute(row[1], _signed(dev)))


def cuDeviceTotalMem_v2(p: int, dev: int) -> None:
    _out("cuDeviceTotalMem", p, _SIZE, backend().device_total_memory(_signed(dev)))


def cuDeviceGetUuid_v2(p: int, dev: int) -> None:
    uuid = backend().device_uuid(_signed(dev))
    if not p:
        raise CudaError(_INVALID_VALUE, "cuDeviceGetUuid", "(NULL output pointer)")
    ctypes.memmove(p, uuid, 16)


cuDeviceGetUuid = cuDeviceGetUuid_v2


def cuDeviceGetPCIBusId(p: int, length: int, dev: int) -> None:
    call = "cuDeviceGetPCIBusId"
    d = _device(call, dev)
    n = _signed(length)
    if not p or n <= 0:
        raise CudaError(_INVALID_VALUE, call, f"(buffer {p:#x} of {n} bytes)")
    b = backend()
    text = "{:08X}:{:02X}:{:02X}.0".format(b.device_attribute("pci_domain_id", d),
                                          b.device_attribute("pci_bus_id", d),
                                          b.device_attribute("pci_device_id", d)).encode()
    raw = text[: n - 1] + b"\0"
    ctypes.memmove(p, raw, len(raw))


def cuDeviceCanAccessPeer(p: int, dev: int, peer: int) -> None:
    ok = backend().device_can_access_peer(_signed(dev), _signed(peer))
    _out("cuDeviceCanAccessPeer", p, _I32, int(ok))


@_output_first
def cuDevicePrimaryCtxRetain(p: int, dev: int) -> None:
    _out("cuDevicePrimaryCtxRetain", p, _U64, backend().primary_ctx_retain(_signed(dev)))


def cuDevicePrimaryCtxRelease_v2(dev: int) -> None:
    b = backend()
    b.primary_ctx_release(_signed(dev))
    if not b.primary_ctx_refs(_signed(dev)):  # the last retain: reset, limits included
        _context_calls.forget_limits(b.primary_ctx_handle(_signed(dev)))


def cuDevicePrimaryCtxReset_v2(dev: int) -> None:
    b = backend()
    b.primary_ctx_reset(_signed(dev))
    _context_calls.forget_limits(b.primary_ctx_handle(_signed(dev)))


def cuDevicePrimaryCtxGetState(dev: int, pflags: int, pactive: int) -> None:
    call = "cuDevicePrimaryCtxGetState"
    d = _device(call, dev)
    if not pflags or not pactive:
        raise CudaError(_INVALID_VALUE, call, "(NULL output pointer)")
    b = backend()
    _out(call, pflags, _U32, b.primary_ctx_flags(d))
    _out(call, pactive, _I32, int(b.primary_ctx_refs(d) > 0))


def cuDevicePrimaryCtxSetFlags_v2(dev: int, flags: int) -> None:
    backend().primary_ctx_set_flags(_device("cuDevicePrimaryCtxSetFlags", dev), flags)


def cuProfilerStart() -> None:
    backend().profiler_start()


def cuProfilerStop() -> None:
    backend().profiler_stop()


def cuGetErrorName(code: int, p: int) -> None:
    name = CUDA_ERROR_NAMES.get(_signed(code))
    if name is None:
        _out("cuGetErrorName", p, ctypes.c_void_p, None)  # cuda.h: *pStr = NULL, INVALID_VALUE
        raise CudaError(_INVALID_VALUE, "cuGetErrorName", f"{_signed(code)} is not a CUresult "
                                                          "the stand-in knows")
    _str_out("cuGetErrorName", p, name.encode(), _STRINGS)


def cuGetErrorString(code: int, p: int) -> None:
    name = CUDA_ERROR_NAMES.get(_signed(code))
    if name is None:
        _out("cuGetErrorString", p, ctypes.c_void_p, None)
        raise CudaError(_INVALID_VALUE, "cuGetErrorString", f"{_signed(code)} is not a CUresult "
                                                            "the stand-in knows")
    text = _DESCRIPTIONS.get(name, name)
    _str_out("cuGetErrorString", p, text.encode(), _STRINGS)
