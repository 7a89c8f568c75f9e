"""Numba's remaining host-side helpers: version support, ``require_context``, the profiler.

One concern: the ``numba.cuda`` names that are neither arrays nor contexts
-- ``is_supported_version()``, ``require_context``, ``profile_start()``,
``profile_stop()`` and ``profiling()`` -- answered by gpuarray's layers: the
device layer makes a context current, the driver interface starts and stops
the profiler (``cuProfilerStart``/``cuProfilerStop``), and the kernels layer
knows the NVRTC in use and whether the driver can load its code.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ._device import _Attach, _backend_ready, get_device
from ._driver import get_backend
from ._driver._finalize import raise_pending
from .errors import CudaUnavailableError

__all__ = ["is_supported_version", "require_context", "profile_start", "profile_stop",
           "profiling"]

# CUDA major versions gpuarray is built and tested for: those of its cu12 and
# cu13 extras (cuda-bindings and NVRTC of that major; see pyproject.toml).
SUPPORTED_CUDA_MAJORS = (12, 13)

_F = TypeVar("_F", bound=Callable[..., Any])


def _bindings_major() -> int | None:
    """Major version of the installed cuda-bindings (package metadata; nothing is imported)."""
    import importlib.metadata  # here: importing it costs ~20 ms, and `import gpuarray` must not

    try:
        return int(importlib.metadata.version("cuda-bindings").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def _nvrtc_version() -> tuple[int, int] | None:
    from ._kernels import _toolchain

    tc = _toolchain.current()
    return None if tc is None else tc.version


def _versions_supported(driver_version: int, bindings_major: int | None,
                       nvrtc_version: tuple[int, int] | None) -> bool:
    """The rule of :func:`is_supported_version`, on given versions (no CUDA call).

    True when cuda-bindings and NVRTC are installed, both of a major in
    ``SUPPORTED_CUDA_MAJORS``, and neither newer than the driver's CUDA
    major (``driver_version // 1000``): a driver runs code of its own CUDA
    major and older, not newer.
    """
    driver_major = int(driver_version) // 1000
    if bindings_major is None or nvrtc_version is None:
        return False
    if bindings_major not in SUPPORTED_CUDA_MAJORS or nvrtc_version[0] not in SUPPORTED_CUDA_MAJORS:
        return False
    from ._kernels._toolchain import check_driver
    from .errors import NvrtcVersionError

    try:
        check_driver(nvrtc_version, driver_version)  # the kernels layer's own refusal
    except NvrtcVersionError:
        return False
    return bindings_major <= driver_major


def is_supported_version() -> bool:
    """Whether gpuarray supports the installed CUDA versions (Numba's ``cuda.is_supported_version()``).

    Numba answers whether the CUDA toolkit it finds (the NVRTC major) is one
    it was tested with.  gpuarray answers the same question for everything
    it uses: True when the driver is available, the installed cuda-bindings
    and NVRTC both have a major gpuarray supports (12 or 13:
    ``pip install "gpuarray[cu12]"`` or ``"gpuarray[cu13]"``), and neither is
    newer than the driver's CUDA major (a CUDA 12 driver cannot load code
    from NVRTC 13, and cuda-bindings 13 needs a CUDA 13 driver).  A newer
    driver is fine: drivers run code of older CUDA majors.  As in Numba,
    False does not mean that nothing works, only that this combination is
    not one gpuarray is built and tested for; the caller decides whether to
    continue, warn or stop.  With the simulator, the driver is the
    simulator's (CUDA 13.5: ``sim._images.DRIVER_VERSION``).

    Returns
    -------
    bool
        False also when there is no driver or device (see :func:`detect` for
        why) or no NVRTC.

    Raises
    ------
    CudaError
        If initialising the driver fails for another reason than a missing
        driver or device.

    Examples
    --------
    >>> gpuarray.is_supported_version()
    True
    """
    try:
        driver = _backend_ready().driver_version()
    except CudaUnavailableError:
        return False
    return _versions_supported(driver, _bindings_major(), _nvrtc_version())


def require_context(fn: _F) -> _F:
    """Decorate ``fn`` so that a context is current while it runs (Numba's ``cuda.require_context``).

    The wrapper makes the current device's primary context current on the
    calling thread before calling ``fn`` -- device 0's when no context is
    current, and that one stays current afterwards, as in Numba and as after
    any gpuarray call.  When another context is current, it is used.  An
    error first seen by a finalizer is raised here, as by every gpuarray
    operation.  As in Numba, ``fn`` may not switch to another device: ``with
    gpus[i]:`` or :func:`select_device` of another device inside it raises
    ``RuntimeError("Cannot switch CUDA-context. ...")`` (gpuarray's own
    operations on arrays of other devices still work).

    Parameters
    ----------
    fn : callable
        The function to wrap.

    Returns
    -------
    callable
        ``fn`` wrapped (``functools.wraps``: same name and docstring).

    Raises
    ------
    TypeError
        If ``fn`` is not callable.
    RuntimeError
        From the wrapped call, when ``fn`` switches to another device.

    Examples
    --------
    >>> @gpuarray.require_context
    ... def free_bytes():
    ...     return gpuarray.current_context().get_memory_info().free
    >>> free_bytes() > 0
    True
    """
    if not callable(fn):
        raise TypeError(f"require_context decorates a callable, got {type(fn).__name__} {fn!r}")

    @functools.wraps(fn)
    def with_context(*args: Any, **kwargs: Any) -> Any:
        raise_pending()  # an error first seen by a finalizer, as every operation
        # get_device() makes device 0's primary context current when none is;
        # the call may not switch to another device (Numba's attached context)
        with _Attach(get_device()):
            return fn(*args, **kwargs)

    return with_context  # type: ignore[return-value]


@require_context
def profile_start() -> None:
    """Enable profile collection in the current context (Numba's ``cuda.profile_start()``).

    ``cuProfilerStart``: the profiling tool that runs the program (Nsight
    Systems with ``--capture-range=cudaProfilerApi``, Nsight Compute with
    ``--profile-from-start off``) records from here on.  Without such a tool
    it has no effect; calling it while collection is on has none either.  A
    context is made current first, as by :func:`require_context`.

    Raises
    ------
    CudaError
        If the driver refuses the call.

    Examples
    --------
    >>> gpuarray.profile_start()
    >>> gpuarray.profile_stop()
    """
    get_backend().profiler_start()


@require_context
def profile_stop() -> None:
    """Disable profile collection in the current context (Numba's ``cuda.profile_stop()``).

    ``cuProfilerStop``; no effect when collection is off.  A context is made
    current first, as by :func:`require_context`.

    Raises
    ------
    CudaError
        If the driver refuses the call.

    Examples
    --------
    >>> gpuarray.profile_start()
    >>> gpuarray.profile_stop()
    """
    get_backend().profiler_stop()


@contextlib.contextmanager
def profiling() -> Iterator[None]:
    """Collect a profile for the ``with`` block (Numba's ``cuda.profiling()``).

    :func:`profile_start` on entry and :func:`profile_stop` on exit, in the
    context that was current on entry even if the block switches devices.
    Unlike Numba's, collection also stops when the block raises.

    Yields
    ------
    None

    Raises
    ------
    CudaError
        If the driver refuses to start or stop collection.

    Examples
    --------
    >>> with gpuarray.profiling():
    ...     d = gpuarray.to_device(np.arange(4))
    >>> d.copy_to_host()
    array([0, 1, 2, 3])
    """
    device = get_device()
    with device.activate():
        get_backend().profiler_start()
    try:
        yield
    finally:
        with device.activate():
            get_backend().profiler_stop()
