"""Devices and their primary contexts; the current device of each thread.

gpuarray uses each device's *primary context* (the one the CUDA runtime,
CuPy, PyTorch and JAX use), so pointers and streams are shared with them.
The current device of a thread is the device of the driver's current context
on that thread (so a device chosen through CuPy or PyTorch is seen here too);
with no context current, it is device 0.  The driver is initialised on the
first call that needs it, never at import.
"""

from __future__ import annotations

import threading

from . import _driver
from ._driver import _fork, get_backend
from ._driver._finalize import _pending as _finalizer_errors
from ._driver._finalize import raise_pending

__all__ = ["Device", "get_device", "select_device", "device_count"]

_lock = threading.Lock()
_devices: dict[int, Device] = {}
#: The devices made so far, by the handle of their primary context.
_by_context: dict[int, Device] = {}
_initialised = False


def _backend_ready():
    global _initialised
    b = get_backend()
    if not _initialised:
        b.init()
        _fork.note_init()
        _initialised = True
    return b


def _reset_for_tests() -> None:
    """Forget cached devices (the backend was replaced)."""
    global _initialised
    with _lock:
        _devices.clear()
        _by_context.clear()
        _initialised = False


class Device:
    """A CUDA device.

    Obtain devices with :func:`get_device`; the constructor is not public.

    Attributes
    ----------
    id : int
        The device ordinal.
    name : str
    compute_capability : tuple of int
        ``(major, minor)``.
    total_memory : int
        Bytes of device memory.

    Examples
    --------
    >>> dev = gpuarray.get_device()          # doctest: +SKIP
    >>> with dev:                             # doctest: +SKIP
    ...     a = gpuarray.zeros(3)
    """

    def __init__(self, ordinal: int, _token: object = None) -> None:
        if _token is not _TOKEN:
            raise TypeError("Device objects are made by gpuarray.get_device(ordinal)")
        b = _backend_ready()
        self.id = int(ordinal)
        self.name = b.device_name(self.id)
        self.compute_capability = (
            b.device_attribute("compute_capability_major", self.id),
            b.device_attribute("compute_capability_minor", self.id),
        )
        self.total_memory = b.device_total_memory(self.id)
        self._ctx = b.primary_ctx_retain(self.id)
        self._scratch = threading.local()

    # The primary context handle; retained for the life of the process.
    @property
    def context_handle(self) -> int:
        """The handle of the device's primary context."""
        return self._ctx

    def attribute(self, name: str) -> int:
        """Return a device attribute.

        Parameters
        ----------
        name : str
            One of ``gpuarray._driver._base.DEVICE_ATTRIBUTES``, e.g.
            ``"multiprocessor_count"``.

        Returns
        -------
        int

        Raises
        ------
        ValueError
            For an unknown attribute name.
        """
        return get_backend().device_attribute(name, self.id)

    @property
    def uuid(self) -> bytes:
        """The device's 16-byte UUID."""
        return get_backend().device_uuid(self.id)

    def make_current(self) -> None:
        """Make this device's primary context current on the calling thread."""
        b = get_backend()
        if b.ctx_get_current() != self._ctx:
            b.ctx_set_current(self._ctx)

    def activate(self) -> _Activation:
        """Make this device current for a ``with`` block, then restore the previous context.

        Every operation enters it before calling the driver, so it is also
        where an error first seen by a finalizer is raised (once), unless it
        is entered by a release (see ``gpuarray/_driver/_finalize.py``).
        """
        return _Activation(self._ctx)

    def __enter__(self) -> Device:
        _check_switch(self)  # ``with gpus[i]:`` inside a require_context call
        return self._push()

    def _push(self) -> Device:
        if _finalizer_errors:
            raise_pending()
        b = get_backend()
        stack = getattr(self._scratch, "stack", None)
        if stack is None:
            stack = self._scratch.stack = []
        stack.append(b.ctx_get_current())
        b.ctx_set_current(self._ctx)
        return self

    def __exit__(self, *exc) -> None:
        get_backend().ctx_set_current(self._scratch.stack.pop())

    def synchronize(self) -> None:
        """Wait for all work queued on this device (``cuCtxSynchronize``)."""
        with self.activate():
            get_backend().ctx_synchronize()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self) -> int:
        return hash(("gpuarray.Device", self.id))

    def __repr__(self) -> str:
        major, minor = self.compute_capability
        return f"<gpuarray.Device {self.id} '{self.name}' sm_{major}{minor}>"

    def __reduce__(self):
        return (get_device, (self.id,))


_TOKEN = object()


class _Activation:
    """``with device.activate():`` -- a class, not a generator: it is on every hot path."""

    __slots__ = ("_ctx", "_prev")

    def __init__(self, ctx: int) -> None:
        self._ctx = ctx
        self._prev: int | None = None

    def __enter__(self) -> None:
        if _finalizer_errors:  # an error first seen by a finalizer: raise it now
            raise_pending()
        b = get_backend()
        prev = b.ctx_get_current()
        if prev != self._ctx:
            b.ctx_set_current(self._ctx)
            self._prev = prev

    def __exit__(self, *exc) -> None:
        if self._prev is not None:
            get_backend().ctx_set_current(self._prev)


def device_count() -> int:
    """Return the number of CUDA devices.

    Returns
    -------
    int

    Raises
    ------
    CudaUnavailableError
        With the ``cuda`` backend on a machine without a driver or device.

    Examples
    --------
    >>> gpuarray.device_count() >= 1   # doctest: +SKIP
    True
    """
    return _backend_ready().device_count()


def _device(ordinal: int) -> Device:
    dev = _devices.get(ordinal)
    if dev is None:
        with _lock:
            dev = _devices.get(ordinal)
            if dev is None:
                n = _backend_ready().device_count()
                if not 0 <= ordinal < n:
                    raise ValueError(f"device ordinal {ordinal} is out of range: "
                                     f"there {'is' if n == 1 else 'are'} {n} device{'s' * (n != 1)}")
                dev = _devices[ordinal] = Device(ordinal, _TOKEN)
                _by_context[dev._ctx] = dev
    return dev


def current_primary() -> Device | None:
    """The device whose primary context is current on this thread, else None (one driver call).

    For hot paths that would otherwise call :func:`get_device` and then
    ``activate()`` the device it returned: when a primary context is
    current, its device is the current device and activating it changes
    nothing.  None means "take the general path" (no context current, a
    non-primary context, or a device not made yet).  Like ``activate()``, it
    first raises an error remembered from a finalizer.
    """
    if _finalizer_errors:
        raise_pending()
    if not _by_context:  # no device made yet (the driver may not be initialised)
        return None
    return _by_context.get((_driver._backend or get_backend()).ctx_get_current())


def get_device(ordinal: int | None = None) -> Device:
    """Return a device: the calling thread's current device, or ``ordinal``.

    Parameters
    ----------
    ordinal : int, optional
        Device number.  When omitted, the device of the driver's current
        context on this thread; device 0 (made current) when none is.

    Returns
    -------
    Device

    Raises
    ------
    ValueError
        If ``ordinal`` is not a device of this machine.
    TypeError
        If ``ordinal`` is not an integer.

    Examples
    --------
    >>> gpuarray.get_device().id   # doctest: +SKIP
    0
    """
    if ordinal is None:
        b = _backend_ready()
        if b.ctx_get_current():
            return _device(b.ctx_get_device())
        dev = _device(0)
        b.ctx_set_current(dev.context_handle)
        return dev
    if isinstance(ordinal, bool) or not hasattr(ordinal, "__index__"):
        raise TypeError(f"device ordinal must be an int, got {ordinal!r}")
    return _device(ordinal.__index__())


def select_device(ordinal: int) -> Device:
    """Make device ``ordinal`` current on the calling thread.

    Parameters
    ----------
    ordinal : int

    Returns
    -------
    Device
        The selected device.

    Raises
    ------
    ValueError
        If ``ordinal`` is not a device of this machine.

    Examples
    --------
    >>> gpuarray.select_device(0)   # doctest: +SKIP
    <gpuarray.Device 0 ...>
    """
    dev = get_device(ordinal)
    _check_switch(dev)
    dev.make_current()
    return dev


# The device a running require_context call attached (Numba's attached
# context): switching to another one inside such a call is refused.
_attached = threading.local()


def _check_switch(dev: Device) -> None:
    held = getattr(_attached, "device", None)
    if held is not None and held is not dev:
        raise RuntimeError(f"Cannot switch CUDA-context. A require_context function is running "
                           f"on device {held.id}: it cannot switch to device {dev.id} (as in Numba)")


class _Attach:
    """``with _Attach(dev):`` -- the body runs with ``dev`` attached (the outermost wins)."""

    __slots__ = ("_dev", "_before")

    def __init__(self, dev: Device) -> None:
        self._dev = dev

    def __enter__(self) -> None:
        self._before = getattr(_attached, "device", None)
        if self._before is None:
            _attached.device = self._dev

    def __exit__(self, *exc: object) -> None:
        _attached.device = self._before
