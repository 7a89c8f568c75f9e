"""Kernel functions of the current context: build, load, look up, cache.

:func:`get_function` returns the ``CUfunction`` handle of a
:class:`KernelSpec` in the calling thread's current context, loading its
module there on first use: image from :mod:`._cache` (compiled for the
context's device architecture), ``backend.module_load_data`` and
``backend.module_get_function``.  Handles are cached per backend object and
per ``(context handle, symbol)``, so each context loads each kernel once.

What is built follows what the backend executes (``Backend.kernel_images``):
the cubin for the device (a GPU), the PTX a GPU build makes (a backend that
runs PTX), or, for a backend that runs its own implementation of each kernel
symbol (the simulator), an image compiled only so that a kernel that does
not compile fails there too: with ``--Ofast-compile=max`` (the image is
never run), about 0.04 s per kernel instead of 0.1-0.2 s.  A missing NVRTC,
or a backend that wants no image (``"none"``), gets a placeholder.

NVRTC is loaded only to compile: what the target choice and the cache key
need to know of it comes from :mod:`._toolchain`, so a warm disk cache loads
no NVRTC.  Before anything is built for a context, an NVRTC whose major
version is newer than the driver's CUDA version is refused
(:class:`gpuarray.errors.NvrtcVersionError`), on the simulator too (with its
simulated driver version) whenever it compiles the real sources.
"""

from __future__ import annotations

import threading
import weakref
from typing import NamedTuple

from .._driver import get_backend
from ..errors import CudaError, error_code
from . import _cache, _nvrtc, _source, _toolchain
from ._specs import KernelSpec, program_source

__all__ = ["DeviceInfo", "device_info", "get_kernel", "get_function", "build_image",
           "forget_loaded"]


class DeviceInfo(NamedTuple):
    """What launches need to know of a device (read once per backend and device)."""

    ordinal: int
    cc: tuple[int, int]
    sms: int
    driver_version: int = 0


_lock = threading.Lock()
_devices: weakref.WeakKeyDictionary[object, dict[int, DeviceInfo]] = weakref.WeakKeyDictionary()
_functions: weakref.WeakKeyDictionary[object, dict[tuple[int, str], tuple[int, DeviceInfo]]] = (
    weakref.WeakKeyDictionary())


def device_info(backend, ordinal: int) -> DeviceInfo:
    """Compute capability and multiprocessor count of device ``ordinal`` (cached)."""
    with _lock:
        info = _devices.get(backend, {}).get(ordinal)
    if info is not None:
        return info
    cc = (int(backend.device_attribute("compute_capability_major", ordinal)),
          int(backend.device_attribute("compute_capability_minor", ordinal)))
    sms = int(backend.device_attribute("multiprocessor_count", ordinal))
    info = DeviceInfo(ordinal, cc, max(1, sms), int(backend.driver_version()))
    with _lock:
        _devices.setdefault(backend, {})[ordinal] = info
    return info


def build_image(spec: KernelSpec, cc: tuple[int, int], fast: bool = False,
                driver_version: int | None = None, ptx: bool = False,
                rebuild: bool = False) -> bytes:
    """The compiled image (CUBIN or PTX) of one kernel for compute capability ``cc``.

    ``fast``: compile with minimal device optimisation (images never run).
    ``driver_version``: refuse an NVRTC newer than this driver
    (:func:`._toolchain.check_driver`).  ``ptx``: the PTX of the build a GPU
    loads (same options), not its cubin (``GPUARRAY_SIM_KERNELS=ptx``).
    ``rebuild``: the cached image is a miss (:func:`get_kernel`).
    Loads NVRTC only on a cache miss.
    """
    source, headers = program_source([spec]), _source.kernel_headers()

    def build(tc: _nvrtc.Toolchain) -> bytes:
        if driver_version is not None:
            _toolchain.check_driver(tc.version, driver_version)
        target = _nvrtc.select_target(*cc, archs=tc.archs, version=tc.version)
        if ptx:
            target = _nvrtc.Target("ptx", target.arch)
        return _cache.get_image(source, headers, target, fast=fast, toolchain=tc, rebuild=rebuild)

    tc = _toolchain.require()
    try:
        return build(tc)
    except _nvrtc.StaleToolchain as e:  # the remembered facts were wrong: use the loaded NVRTC's
        _toolchain.refresh(e.loaded)
        return build(e.loaded)


def get_kernel(spec: KernelSpec, backend=None) -> tuple[int, DeviceInfo]:
    """The function handle of ``spec`` in the current context, and that context's device.

    The kernel is compiled (or found in the cache) and its module loaded on
    first use in each context; later calls are one dictionary lookup.

    Parameters
    ----------
    spec : KernelSpec
    backend : Backend, optional
        Defaults to :func:`gpuarray._driver.get_backend`.

    Returns
    -------
    func : int
        A ``CUfunction`` handle for ``backend.launch_kernel``.
    info : DeviceInfo
        The current context's device.

    Raises
    ------
    NvrtcError
        If the kernel does not compile.
    CudaError
        If no context is current, or loading fails (an image the driver
        refuses is built again once first: a cache entry may be stale).
    """
    b = backend if backend is not None else get_backend()
    key = (b.ctx_get_current(), spec.symbol)
    table = _functions.get(b)
    if table is not None:
        hit = table.get(key)
        if hit is not None:
            return hit
    info = device_info(b, b.ctx_get_device())
    try:
        module = b.module_load_data(_image(b, spec, info))  # relaxed at the capture checkpoint
    except CudaError as e:
        if e.code not in _IMAGE_REFUSED:
            raise
        # An image whose cache entry verifies (header, digest) but which the
        # driver refuses -- a driver or toolchain change the key does not
        # see, a damaged compiler output -- is a miss: dropped and built
        # again, once; refused again, the driver's error goes up.
        module = b.module_load_data(_image(b, spec, info, rebuild=True))
    entry = (b.module_get_function(module, spec.symbol), info)
    with _lock:
        table = _functions.setdefault(b, {})
        prior = table.get(key)
        if prior is None:
            table[key] = entry
            return entry
    b.module_unload(module)  # another thread loaded it first
    return prior


#: The codes with which the driver refuses the image itself.
_IMAGE_REFUSED = frozenset(error_code(n) for n in ("INVALID_IMAGE", "NO_BINARY_FOR_GPU", "INVALID_PTX",
                                                   "UNSUPPORTED_PTX_VERSION"))


def _image(b, spec: KernelSpec, info: DeviceInfo, rebuild: bool = False) -> bytes:
    """What ``b`` executes of ``spec``, built for ``info``'s device (``Backend.kernel_images``)."""
    images = b.kernel_images
    if images in ("checked", "none"):  # the backend runs its own implementation of the symbol
        if images == "checked" and _toolchain.current() is not None:  # built only to be checked
            return build_image(spec, info.cc, fast=True, driver_version=info.driver_version,
                               rebuild=rebuild)
        return b"gpuarray-sim-placeholder\0" + spec.symbol.encode() + b"\0"
    return build_image(spec, info.cc, driver_version=info.driver_version, ptx=images == "ptx",
                       rebuild=rebuild)


def get_function(spec: KernelSpec, backend=None) -> int:
    """The function handle of ``spec`` in the current context (see :func:`get_kernel`)."""
    return get_kernel(spec, backend)[0]


def forget_loaded(backend=None) -> None:
    """Drop cached function handles (of one backend, or all); modules stay loaded."""
    with _lock:
        if backend is None:
            _functions.clear()
            _devices.clear()
        else:
            _functions.pop(backend, None)
            _devices.pop(backend, None)
