"""gpuarray-sim: CUDA without a GPU, beneath gpuarray's driver interface.

The CPU simulator of the driver interface (``GPUARRAY_BACKEND=sim``) lets
every test and the command line run without a GPU while still catching what
makes CUDA code wrong: device addresses that host code cannot dereference,
bounds and use-after-free checks, asynchronous per-stream queues, CUDA's
legacy / per-thread / blocking / non-blocking stream rules, events, and a
race detector for unordered cross-stream access.  gpuarray's kernels run as
their CUDA source compiled for the host (``kernels``: the host build over
the fiber runtime ``_hostrt``, checked memory), or as NumPy references where
no C++ compiler exists; foreign kernels run as PTX (``ptx``); the stand-in
``libcuda.so.1`` (``standin``) serves the driver API from the simulator.

gpuarray finds this package through its entry points (``gpuarray.backends``,
``gpuarray.commands``, ``gpuarray.info``): gpuarray never imports it.
"""

from ._backend import SimBackend

__all__ = ["SimBackend", "backend", "info_lines"]


def backend() -> SimBackend:
    """The simulator configured by the ``GPUARRAY_SIM_*`` environment (entry point ``sim``)."""
    return SimBackend.from_environment()


def info_lines() -> list[str]:
    """What ``python -m gpuarray info`` says of the simulator: which kernels it runs."""
    from .kernels import _host

    return [f"simulator kernels: {_host.describe()}"]
