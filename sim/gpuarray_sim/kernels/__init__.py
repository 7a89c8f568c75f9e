"""The simulator's kernels: what it runs when a module's function is a gpuarray kernel.

The simulator backend looks a kernel's symbol name up here when a module's
function is requested.  Two sources answer, in this order:

1. names registered with :func:`register` (tests register small kernels of
   their own this way);
2. the resolver (:func:`set_resolver`), by default :func:`gpuarray_kernel`,
   which turns any gpuarray kernel symbol into its :class:`SimKernel` -- the
   host build of ``kernels/`` (``_host``) or the NumPy reference
   (``_reference``), as ``GPUARRAY_SIM_KERNELS`` chooses -- so the simulator
   finds gpuarray's kernels whoever loaded the module (the ``sim`` backend,
   or the ``cuda`` backend over the stand-in driver).

gpuarray's kernels layer knows none of this: it asks the backend what it
executes (``Backend.kernel_images``) and builds that.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gpuarray._kernels._specs import parse_symbol

from .. import _host_toolchain

__all__ = ["SimKernel", "SimMemoryAccess", "register", "set_resolver", "lookup", "gpuarray_kernel",
           "mode"]


class SimMemoryAccess(Protocol):
    """What a simulator kernel reference implementation may do to memory.

    Every access is bounds-checked against its allocation; an access outside
    any live allocation raises ``CudaError(CUDA_ERROR_ILLEGAL_ADDRESS)``.
    Addresses may be device pointers of the launching device (or of a peer
    with peer access enabled) or device pointers of mapped host memory.
    """

    def read(self, address: int, nbytes: int) -> Any:
        """Return a *copy* of ``nbytes`` bytes at ``address`` as a 1-D ``numpy.uint8`` array."""

    def write(self, address: int, data: Any) -> None:
        """Write the bytes of ``data`` (a 1-D ``numpy.uint8`` array or bytes-like) at ``address``."""


class SimKernel(Protocol):
    """A kernel's reference implementation, run by the simulator on launch.

    Register one per kernel symbol name with
    :func:`register` (or answer names through
    :func:`set_resolver`); the simulator's
    ``module_get_function(module, name)`` finds it by that name.
    """

    #: The ctypes type of each kernel parameter, in order: what a caller that
    #: holds only ``void **kernelParams`` (the stand-in driver) decodes.
    param_types: tuple[type, ...]

    def accesses(self, params: Sequence[Any]) -> list[tuple[int, int, bool]]:
        """Byte ranges the launch will touch: ``[(start_address, nbytes, is_write), ...]``.

        Used at enqueue time by the race detector; ranges may be conservative
        (the extent of a strided access).
        """

    def run(self, mem: SimMemoryAccess, grid: tuple[int, int, int], block: tuple[int, int, int],
            shared_mem: int, params: Sequence[Any]) -> None:
        """Perform the kernel's effect on memory (called when the stream runs it)."""



_lock = threading.Lock()
_registry: dict[str, Any] = {}
_resolver: Callable[[str], Any] | None = None


def register(name: str, impl: Any) -> None:
    """Register ``impl`` (a ``SimKernel``) as the reference for symbol ``name``.

    Registering the same name again replaces the earlier implementation.
    """
    if not hasattr(impl, "run") or not hasattr(impl, "accesses"):
        raise TypeError(f"sim kernel {name!r} must have run() and accesses(), got {impl!r}")
    with _lock:
        _registry[name] = impl


def set_resolver(resolver: Callable[[str], Any] | None) -> None:
    """Set the function that makes the implementation of a name nobody registered.

    ``resolver(name)`` returns a ``SimKernel`` or None (not a kernel it
    knows); ``None`` removes the resolver.
    """
    global _resolver
    with _lock:
        _resolver = resolver


def lookup(name: str) -> Any | None:
    """The implementation of kernel ``name``: registered, else resolved, else None."""
    with _lock:
        impl = _registry.get(name)
        resolver = _resolver
    if impl is None and resolver is not None:
        impl = resolver(name)
    return impl


_made: dict[tuple[str, str], object] = {}


def mode() -> str:
    """``"host"``, ``"reference"`` or ``"ptx"``: what runs gpuarray's kernels (``GPUARRAY_SIM_KERNELS``)."""
    from . import _host

    return _host.mode()


def gpuarray_kernel(symbol: str):
    """The simulator's implementation of gpuarray kernel ``symbol``, or None.

    The default resolver: a name that is not a gpuarray kernel symbol
    (``gpuarray._kernels._specs.parse_symbol``) is None, so the simulator
    reports it as an unknown kernel.  ``GPUARRAY_SIM_KERNELS``
    (:func:`._host.mode`) chooses the implementation: the host build of the
    CUDA source (:func:`._host.host_kernel`, compiled or loaded now; a compile
    error raises :class:`._host.HostCompileError`) or the NumPy reference; in
    PTX mode None (the simulator runs the PTX of the image).  One object per
    symbol and choice.
    """
    from . import _host

    m = _host.mode()
    if m == "ptx":
        return None
    impl = _made.get((m, symbol))
    if impl is None:
        try:
            spec = parse_symbol(symbol)
        except ValueError:
            return None
        if m == "host":
            made: object = _host.host_kernel(spec)
        else:
            from ._reference import reference_kernel

            made = reference_kernel(spec)
        impl = _made.setdefault((m, symbol), made)
    return impl


def _ptx_toolchain():
    # the PTX executor builds with the host build's toolchain (compiler, flags, cache)
    from ._host import PTX_TOOLCHAIN

    return PTX_TOOLCHAIN


_resolver = gpuarray_kernel
_host_toolchain.set_toolchain(_ptx_toolchain)
