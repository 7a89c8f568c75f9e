"""Device-side graph calls of the CUDA device runtime, provided by the PTX executor.

One concern: ``cudaGraphSetConditional(handle, value)`` (cuda_device_runtime_api.h),
which PTX calls as an external function ``.extern .func
cudaGraphSetConditional (.param .b64 handle, .param .b32 value)``.  The
simulator's conditional handle is the address of 4 bytes of device memory
its graph owns (``sim/_graph_build.py``), so setting it is a checked 32-bit
global store there: a handle that names no live memory is an illegal
address, as a wrong pointer is.
"""

from __future__ import annotations

from ._context import FuncCtx

__all__ = ["GRAPH_CALLS", "graph_call"]

#: The device runtime's graph functions the executor provides.
GRAPH_CALLS = ("cudaGraphSetConditional",)


def graph_call(ctx: FuncCtx, callee: str, ptrs: list[str], nrets: int, nparams: int,
               line: int) -> str:
    """The C++ of a call of ``callee`` (one of :data:`GRAPH_CALLS`) with ``.param`` pointers."""
    if nrets != 0 or nparams != 2:
        raise ctx.error(f"{callee} called with other than (handle, value)")
    return (f"{{ char* p_ = ptx::gptr(T, ptx::load<uint64_t>({ptrs[0]}), 4, 1, {line}); "
            f"ptx::store<uint32_t>(p_, ptx::load<uint32_t>({ptrs[1]})); }}")
