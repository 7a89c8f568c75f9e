"""The CPU simulator of the driver interface (``GPUARRAY_BACKEND=sim``).

It lets every test and the command line run without a GPU while still
catching what makes CUDA code wrong: device addresses that host code cannot
dereference, bounds and use-after-free checks, asynchronous per-stream queues,
CUDA's legacy / per-thread / blocking / non-blocking stream rules, events, and
a race detector for unordered cross-stream access.  gpuarray's kernels run
as their CUDA source compiled for the host (``_hostrt``: fibers, checked
memory), or as NumPy references where no C++ compiler exists.
"""

from ._backend import SimBackend

__all__ = ["SimBackend"]
