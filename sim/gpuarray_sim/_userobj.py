"""User objects in the simulator: reference-counted owners that graphs keep alive.

One concern: ``cuUserObjectCreate``, ``cuUserObjectRetain`` /
``cuUserObjectRelease`` and ``cuGraphRetainUserObject`` /
``cuGraphReleaseUserObject``, as ``cuda.h`` and the programming guide's
"CUDA User Objects" describe them.  A user object carries a destructor and a
reference count; references are owned by the caller or by a graph.  A graph
releases its references when it is destroyed; an executable graph takes new
references to its graph's user objects when it is instantiated (the only
time they propagate) and releases them when it is destroyed -- once the work
of its last launch has run.  When the count reaches zero the destructor runs
on a driver thread, never on the calling thread, and it may not call CUDA
(it runs as a host function does: ``_hostfn.py``).  cuda.core keeps its
graphs' Python owners alive this way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gpuarray.errors import CudaError

from . import _hostfn
from ._core import INVALID_VALUE, SimCore, _locked

_INT_MAX = (1 << 31) - 1


class SimUserObject:
    """One user object: its destructor and reference count."""

    def __init__(self, handle: int, destroy: Callable[[], None], refs: int) -> None:
        self.handle = handle
        self.destroy = destroy
        self.refs = refs


class _Destructor:
    """A user object's destructor as a host function (``fn(status)``): no CUDA call inside."""

    __slots__ = ("destroy",)

    def __init__(self, destroy: Callable[[], None]) -> None:
        self.destroy = destroy

    def __call__(self, _status: int) -> None:
        self.destroy()


def _count(call: str, count: int) -> int:
    if not 0 < int(count) <= _INT_MAX:
        raise CudaError(INVALID_VALUE, call, f"count {count} (must be in 1..INT_MAX)")
    return int(count)


class SimUserObjectCalls(SimCore):
    """The user-object calls of the simulator (the graph calls hand their references here)."""

    def _owner_graph(self, graph: int, call: str) -> Any:
        """A graph, or the graph a capture in progress builds (cuda.core retains on that)."""
        for cap in self._captures.values():
            if cap.graph.handle == graph:
                return cap.graph
        return self._graph(graph, call)

    def _user_object(self, handle: int, call: str) -> SimUserObject:
        obj = self._user_objects.get(handle)
        if obj is None:
            raise CudaError(INVALID_VALUE, call, f"0x{int(handle):x} is not a live user object")
        return obj

    @_locked
    def user_object_create(self, destroy: Callable[[], None], refs: int = 1) -> int:
        """``cuUserObjectCreate`` (``destroy()`` is the destructor called with its pointer)."""
        obj = SimUserObject(self._handle(), destroy, _count("cuUserObjectCreate", refs))
        self._user_objects[obj.handle] = obj
        return obj.handle

    @_locked
    def user_object_retain(self, handle: int, count: int = 1) -> None:
        obj = self._user_object(handle, "cuUserObjectRetain")
        obj.refs += _count("cuUserObjectRetain", count)

    @_locked
    def user_object_release(self, handle: int, count: int = 1) -> None:
        call = "cuUserObjectRelease"
        obj = self._user_object(handle, call)
        self._release_user_refs({obj.handle: _count(call, count)}, call, None)

    @_locked
    def graph_retain_user_object(self, graph: int, handle: int, count: int = 1,
                                 move: bool = False) -> None:
        call = "cuGraphRetainUserObject"
        g = self._owner_graph(graph, call)
        obj = self._user_object(handle, call)
        n = _count(call, count)
        if move:  # the caller's references become the graph's
            if obj.refs < n:
                raise CudaError(INVALID_VALUE, call, f"moves {n} references of user object "
                                                     f"0x{handle:x}, which has {obj.refs}")
        else:
            obj.refs += n
        g.user_refs[obj.handle] = g.user_refs.get(obj.handle, 0) + n

    @_locked
    def graph_release_user_object(self, graph: int, handle: int, count: int = 1) -> None:
        call = "cuGraphReleaseUserObject"
        g = self._owner_graph(graph, call)
        self._user_object(handle, call)
        n = _count(call, count)
        held = g.user_refs.get(handle, 0)
        if held < n:
            raise CudaError(INVALID_VALUE, call, f"graph 0x{graph:x} owns {held} references of "
                                                 f"user object 0x{handle:x}, not {n}")
        if held == n:
            del g.user_refs[handle]
        else:
            g.user_refs[handle] = held - n
        self._release_user_refs({handle: n}, call, None)

    # ----------------------------------------------------- for the graph calls
    def _take_user_refs(self, refs: dict[int, int]) -> dict[int, int]:
        """New references to ``refs`` (an executable graph's, at instantiation)."""
        for handle, n in refs.items():
            self._user_objects[handle].refs += n
        return dict(refs)

    def _release_user_refs(self, refs: dict[int, int], call: str, after: Any) -> None:
        """Release ``refs``; destructors of objects left without references run on a
        driver thread -- after op ``after`` (a launch still queued) when given."""
        for handle, n in refs.items():
            obj = self._user_objects[handle]
            if obj.refs < n:
                raise CudaError(INVALID_VALUE, call, f"releases {n} references of user object "
                                                     f"0x{handle:x}, which has {obj.refs}")
            obj.refs -= n
            if obj.refs:
                continue
            del self._user_objects[handle]
            destroy = obj.destroy
            desc = f"destructor of user object 0x{handle:x}"
            run = _Destructor(destroy)
            if after is not None and not after.done:
                self._queue_host_fn(after.stream, run, desc)
            else:
                self._user_object_worker.submit(functools.partial(_hostfn.call_host_fn, run, 0))
