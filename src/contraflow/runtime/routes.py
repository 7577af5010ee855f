"""Where an event can go from a point of a flow, through pipelines' own graphs: what contraflow walks.

The topology alone sees a pipeline as one node, so a source would stop when
any sink behind it opens its breaker. Inside a pipeline, a `qos::roundrobin`
node routes around an unavailable output, so the question "which open
breakers stop this event?" has a finer answer:

- a sink stops it when its breaker is open;
- a channel, or a node's port feeding several edges (a fan-out), is stopped
  by whatever stops any of its readers: the event must reach all of them;
- a `qos::roundrobin` node is stopped only when each of its output ports is
  (then by all of them: any one recovering frees it);
- a nested pipeline is walked from its input node to its output nodes and
  back out through its node's ports.

Every explicit edge counts, `err` included (an error event needs its sink
too); the implicit routing of unconnected `err` ports to the pipeline's `err`
output is not followed. Graphs are small and breakers change rarely, so the
walk is recomputed on every change rather than maintained incrementally.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from contraflow.lang.graph import Edge, OperatorSpec, PipelineGraph
from contraflow.runtime.topology import Topology

ROUNDROBIN = "qos::roundrobin"

Blockers = frozenset[str]
NONE: Blockers = frozenset()


@dataclass(frozen=True)
class Scope:
    """A graph being walked: the flow pipeline it belongs to and the node path of its nesting."""

    alias: str  # the pipeline alias in the flow
    prefix: str  # "" at the top level, "outer/" inside the nested pipeline node `outer`
    graph: PipelineGraph
    parent: Scope | None = None
    node: str = ""  # the nested pipeline node of `parent` this graph runs in

    def nested(self, name: str, graph: PipelineGraph) -> Scope:
        """The scope of nested pipeline node `name` of this graph."""
        return Scope(self.alias, f"{self.prefix}{name}/", graph, self, name)


def qos_nodes(alias: str, graph: PipelineGraph, kinds: frozenset[str]) -> Iterator[tuple[Scope, str]]:
    """Every operator node of one of `kinds` in pipeline `alias` (nested ones too), with its scope."""
    yield from _operator_nodes(Scope(alias, "", graph), kinds)


def _operator_nodes(scope: Scope, kinds: frozenset[str]) -> Iterator[tuple[Scope, str]]:
    for name, node in scope.graph.nodes.items():
        if isinstance(node.spec, PipelineGraph):
            yield from _operator_nodes(scope.nested(name, node.spec), kinds)
        elif isinstance(node.spec, OperatorSpec) and node.spec.kind in kinds:
            yield scope, name


class Routes:
    """Answers, for a set of open sinks, which of them stop events at a given point of the flow."""

    def __init__(self, topology: Topology, pipelines: dict[str, PipelineGraph]) -> None:
        self.topology = topology
        self.pipelines = pipelines
        self.open: frozenset[str] = NONE
        self._memo: dict[object, Blockers] = {}
        self._visiting: set[object] = set()

    def with_open(self, open_sinks: frozenset[str]) -> Routes:
        """Start a fresh walk for these open sinks (answers are memoized per set)."""
        self.open = open_sinks
        self._memo.clear()
        return self

    # -- entry points --------------------------------------------------------------------------

    def of_source(self, alias: str) -> Blockers:
        """The open sinks that stop events of source connector `alias`: it must hold while any is."""
        return _union(self.of_channel(c.topic) for c in self.topology.outputs_of("connector", alias).values())

    def of_port(self, scope: Scope, node: str, port: str) -> Blockers:
        """The open sinks that stop events leaving `node` on `port` in `scope`."""
        return self._cached(
            ("port", scope.alias, scope.prefix, node, port),
            lambda: _union(self._entering(scope, e.to_node, e.to_port) for e in _edges(scope, node, port)),
        )

    def of_channel(self, topic: str) -> Blockers:
        """The open sinks that stop events appended to channel `topic`."""
        return self._cached(("channel", topic), lambda: self._channel(topic))

    def sinks_of_port(self, scope: Scope, node: str, ports: list[str]) -> set[tuple[str, str]]:
        """(sink alias, input channel topic) pairs reachable from `node`'s `ports` (every edge followed)."""
        found: set[tuple[str, str]] = set()
        seen: set[object] = set()
        todo: list[tuple[Scope, str, str]] = [(scope, node, p) for p in ports]
        while todo:
            where, name, port = todo.pop()
            for edge in _edges(where, name, port):
                for nxt in self._steps(where, edge.to_node, edge.to_port, found):
                    key = (nxt[0].alias, nxt[0].prefix, nxt[1], nxt[2])
                    if key not in seen:
                        seen.add(key)
                        todo.append(nxt)
        return found

    # -- the walk ------------------------------------------------------------------------------

    def _channel(self, topic: str) -> Blockers:
        channel = self.topology.channels.get(topic)
        if channel is None:
            return NONE
        parts = []
        for reader in channel.readers:
            if reader.to.kind == "connector":
                parts.append(frozenset({reader.to.alias}) & self.open)
            else:
                graph = self.pipelines[reader.to.alias]
                parts.append(self._entering(Scope(reader.to.alias, "", graph), reader.to.port, "in"))
        return _union(parts)

    def _entering(self, scope: Scope, name: str, port: str) -> Blockers:
        """Events entering `name` (on `port`) in `scope`: input nodes are entered by their own name."""
        node = scope.graph.nodes[name]
        if node.kind == "output":
            return self._leaving(scope, name)
        if isinstance(node.spec, PipelineGraph):
            inner = scope.nested(name, node.spec)
            return self._entering(inner, port, "in") if port in node.spec.nodes else NONE
        if node.kind == "input":
            return _union(self.of_port(scope, name, p) for p in node.outputs)
        if isinstance(node.spec, OperatorSpec) and node.spec.kind == ROUNDROBIN:
            ports = [self.of_port(scope, name, p) for p in node.outputs if p != "err"]
            return NONE if any(not p for p in ports) else _union(ports)
        return _union(self.of_port(scope, name, p) for p in node.outputs)

    def _leaving(self, scope: Scope, output: str) -> Blockers:
        """Events reaching output node `output` of `scope` leave its pipeline (or its nesting node)."""
        if scope.parent is None:
            channel = self.topology.outputs_of("pipeline", scope.alias).get(output)
            return self.of_channel(channel.topic) if channel is not None else NONE
        return self.of_port(scope.parent, scope.node, output)

    def _steps(
        self, scope: Scope, name: str, port: str, found: set[tuple[str, str]]
    ) -> list[tuple[Scope, str, str]]:
        """The (scope, node, output port) places an event entering `name` reaches next; sinks go to `found`."""
        node = scope.graph.nodes[name]
        if node.kind == "output":
            if scope.parent is not None:
                return [(scope.parent, scope.node, name)]
            channel = self.topology.outputs_of("pipeline", scope.alias).get(name)
            if channel is None:
                return []
            steps = []
            for reader in channel.readers:
                if reader.to.kind == "connector":
                    found.add((reader.to.alias, channel.topic))
                else:
                    top = Scope(reader.to.alias, "", self.pipelines[reader.to.alias])
                    steps.extend(self._steps(top, reader.to.port, "in", found))
            return steps
        if isinstance(node.spec, PipelineGraph):
            inner = scope.nested(name, node.spec)
            return self._steps(inner, port, "in", found) if port in node.spec.nodes else []
        return [(scope, name, p) for p in node.outputs]

    def _cached(self, key: object, compute: Callable[[], Blockers]) -> Blockers:
        if key in self._memo:
            return self._memo[key]
        if key in self._visiting:  # a cycle through channels: the rest of the walk decides
            return NONE
        self._visiting.add(key)
        try:
            result = compute()
        finally:
            self._visiting.discard(key)
        self._memo[key] = result
        return result


def _edges(scope: Scope, node: str, port: str) -> list[Edge]:
    return [e for e in scope.graph.successors(node) if e.from_port == port]


def _union(parts: Iterable[Blockers]) -> Blockers:
    result: set[str] = set()
    for part in parts:
        result |= part
    return frozenset(result)
