"""The stand-in driver's graph identity calls (CUDA 13.1): graph, executable graph and node ids.

One concern: ``cuGraphGetId``, ``cuGraphExecGetId``, ``cuGraphNodeGetLocalId``,
``cuGraphNodeGetToolsId`` and ``cuGraphNodeGetContainingGraph``, over the
simulator's graph model (``sim/_graph.py``, ``sim/_graph_build.py``), which
names graphs and nodes by their handles only.

The ids are given here, on first asking, and kept with the graph or node
object (weakly: they go with it): a graph or executable graph gets the next
number of one process-wide sequence from 1, so no two live ones share an id;
a node's local id is its position among the nodes its graph has ever held
(0, 1, 2 ... in the order the nodes were added), so it is unique within its
graph, and its tools id is the graph's id and the local id together (graph id
in the high 32 bits).  cuda.h promises no more than that uniqueness
("the local nodeId and graphId together can uniquely identify the node").
``cuGraphDebugDotPrint`` names graphs and nodes by handle, not by these ids.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

from ._support import _U32, _U64, _out, backend

#: Ids of graphs and executable graphs: one sequence, from 1.
_next_id = itertools.count(1)
_ids: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
#: Per graph: node handle -> local id (every node the graph has held: ids are never reused).
_local: weakref.WeakKeyDictionary[Any, dict[int, int]] = weakref.WeakKeyDictionary()


_lock = threading.Lock()


def _id_of(obj: Any) -> int:
    with _lock:
        got = _ids.get(obj)
        if got is None:
            got = _ids[obj] = next(_next_id)
        return got


def _local_id(node: Any) -> int:
    with _lock:
        table = _local.setdefault(node.graph, {})
        for n in node.graph.nodes:  # number every node so far in the order they were added
            table.setdefault(n.handle, len(table))
        return table[node.handle]


def cuGraphGetId(graph: int, p: int) -> None:
    call = "cuGraphGetId"
    _out(call, p, _U32, _id_of(backend()._graph(graph, call)))


def cuGraphExecGetId(graph_exec: int, p: int) -> None:
    call = "cuGraphExecGetId"
    _out(call, p, _U32, _id_of(backend()._exec(graph_exec, call)))


def cuGraphNodeGetLocalId(node: int, p: int) -> None:
    call = "cuGraphNodeGetLocalId"
    _out(call, p, _U32, _local_id(backend()._node(node, call)))


def cuGraphNodeGetToolsId(node: int, p: int) -> None:
    call = "cuGraphNodeGetToolsId"
    n = backend()._node(node, call)
    _out(call, p, _U64, (_id_of(n.graph) << 32) | _local_id(n))


def cuGraphNodeGetContainingGraph(node: int, p: int) -> None:
    call = "cuGraphNodeGetContainingGraph"
    _out(call, p, _U64, backend()._node(node, call).graph.handle)
