"""Minimum vertex cut on a DAG (max-flow with node splitting), for repairing leaking cuts.

Each vertex ``v`` becomes an edge ``v.in -> v.out`` whose capacity is its cost; each DAG edge
``u -> v`` becomes ``u.out -> v.in`` with infinite capacity. A source feeds ``S -> v.out`` (it
produces a value), a sink drains ``v.in -> T`` (it consumes its inputs). By the max-flow
min-cut theorem the saturated vertex edges of a maximum flow form a smallest vertex set whose
removal disconnects every source from every sink.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, TypeVar

__all__ = ["min_vertex_cut"]

V = TypeVar("V", bound=Hashable)
_S, _T = ("source",), ("sink",)


def min_vertex_cut(
    preds: Mapping[V, Iterable[V]],
    sources: Iterable[V],
    sinks: Iterable[V],
    cost: Mapping[V, int | None],
) -> list[V] | None:
    """The cheapest vertices separating ``sources`` from ``sinks``, closest to the sinks.

    Args:
        preds: each vertex's predecessors (its inputs); the key order is the result's order.
        sources, sinks: a source's output and a sink's inputs must be disconnected.
        cost: per vertex, ``0`` (already cut, free), ``1`` (may be cut) or ``None`` (may not).

    Returns the vertices of cost 1 in the cut, or ``None`` when no finite cut exists.

    >>> dag = {"x": [], "a": ["x"], "b": ["a"], "c": ["a"], "y": ["b", "c"]}
    >>> min_vertex_cut(dag, ["x"], ["y"], {"x": None, "a": 1, "b": 0, "c": 1, "y": None})
    ['c']
    >>> min_vertex_cut({"x": [], "y": ["x"]}, ["x"], ["y"], {"x": None, "y": None}) is None
    True
    """
    infinite = len(preds) + 1  # more than any finite cut
    cap: dict[Any, dict[Any, int]] = {_S: {}, _T: {}}

    def edge(u: Any, v: Any, c: int) -> None:
        cap.setdefault(u, {})[v] = cap.get(u, {}).get(v, 0) + c
        cap.setdefault(v, {}).setdefault(u, 0)  # residual reverse edge

    for v, inputs in preds.items():
        c = cost.get(v)
        edge((v, "in"), (v, "out"), infinite if c is None else c)
        for u in inputs:
            edge((u, "out"), (v, "in"), infinite)
    for v in sources:
        edge(_S, (v, "out"), infinite)
    for v in sinks:
        edge((v, "in"), _T, infinite)

    flow = 0
    while flow < infinite and (path := _augmenting_path(cap)):
        bottleneck = min(cap[u][v] for u, v in path)
        for u, v in path:
            cap[u][v] -= bottleneck
            cap[v][u] += bottleneck
        flow += bottleneck
    if flow >= infinite:
        return None
    # Vertices that still reach T in the residual graph: the cut edges enter this set, and of
    # all minimum cuts this one lies closest to the sinks (it keeps the cut model smallest).
    reaches_sink = _reaching(cap, _T)
    return [
        v
        for v in preds
        if cost.get(v) == 1 and (v, "out") in reaches_sink and (v, "in") not in reaches_sink
    ]


def _augmenting_path(cap: dict[Any, dict[Any, int]]) -> list[tuple[Any, Any]]:
    """Shortest ``S -> T`` path of positive residual capacity (Edmonds-Karp), as edges."""
    parent: dict[Any, Any] = {_S: None}
    queue = deque([_S])
    while queue:
        u = queue.popleft()
        for v, c in cap[u].items():
            if c > 0 and v not in parent:
                parent[v] = u
                if v == _T:
                    path = []
                    while parent[v] is not None:
                        path.append((parent[v], v))
                        v = parent[v]
                    return path[::-1]
                queue.append(v)
    return []


def _reaching(cap: dict[Any, dict[Any, int]], target: Any) -> set[Any]:
    """Vertices with a positive-residual path to ``target``."""
    seen = {target}
    queue = deque([target])
    while queue:
        v = queue.popleft()
        for u in cap[v]:  # every neighbour has an entry both ways
            if u not in seen and cap[u][v] > 0:
                seen.add(u)
                queue.append(u)
    return seen
