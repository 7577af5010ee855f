"""A flow graph seen as channels: who appends to each topic, who reads it, and the reversed graph.

Every connection `from/port -> to/port` becomes a channel topic named after its
producer (`channel_topic(flow, from, port)`); a fan-out shares the topic and
each reader has its own consumer name. The reversed graph answers the
contraflow questions: which sources feed a sink (they stop when its breaker
opens) and which sinks a source reaches (it starts only when they are up).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contraflow.lang.graph import FlowGraph
from contraflow.runtime.channels import channel_topic, consumer_name


@dataclass(frozen=True)
class Endpoint:
    """One side of a connection: a connector or pipeline alias and its port."""

    kind: str  # "connector" | "pipeline"
    alias: str
    port: str

    def __str__(self) -> str:
        return f"/{self.kind}/{self.alias}/{self.port}"


@dataclass(frozen=True)
class Reader:
    """A consumer of a channel: the endpoint it feeds and the consumer name it commits under."""

    to: Endpoint
    consumer: str


@dataclass
class Channel:
    """One channel topic: its producer endpoint and every reader."""

    topic: str
    producer: Endpoint
    readers: list[Reader] = field(default_factory=list)

    @property
    def name(self) -> str:
        """`alias/port` of the producer, how flow args and status lines name a channel."""
        return f"{self.producer.alias}/{self.producer.port}"


@dataclass
class Topology:
    """The channels of one flow instance and the graph between its nodes."""

    flow_id: str
    channels: dict[str, Channel] = field(default_factory=dict)

    @classmethod
    def of(cls, flow_id: str, graph: FlowGraph) -> Topology:
        topo = cls(flow_id)
        for conn in graph.connections:
            producer = Endpoint(conn.from_kind, conn.from_alias, conn.from_port)
            topic = channel_topic(flow_id, conn.from_alias, conn.from_port)
            channel = topo.channels.setdefault(topic, Channel(topic, producer))
            to = Endpoint(conn.to_kind, conn.to_alias, conn.to_port)
            if all(r.to != to for r in channel.readers):
                channel.readers.append(Reader(to, consumer_name(flow_id, conn.to_alias, conn.to_port)))
        return topo

    def outputs_of(self, kind: str, alias: str) -> dict[str, Channel]:
        """The channels `alias` appends to, by its output port."""
        return {
            c.producer.port: c
            for c in self.channels.values()
            if c.producer.kind == kind and c.producer.alias == alias
        }

    def inputs_of(self, kind: str, alias: str) -> list[tuple[Channel, Reader]]:
        """The channels `alias` reads, with its reader entry (port and consumer name)."""
        return [
            (c, r)
            for c in self.channels.values()
            for r in c.readers
            if r.to.kind == kind and r.to.alias == alias
        ]

    def _successors(self, kind: str, alias: str) -> set[tuple[str, str]]:
        return {(r.to.kind, r.to.alias) for c in self.outputs_of(kind, alias).values() for r in c.readers}

    def _predecessors(self, kind: str, alias: str) -> set[tuple[str, str]]:
        return {(c.producer.kind, c.producer.alias) for c, _ in self.inputs_of(kind, alias)}

    def downstream_connectors(self, alias: str) -> set[str]:
        """Connectors reachable from connector `alias` (through pipelines): the sinks it needs up."""
        return self._reach(("connector", alias), self._successors)

    def upstream_connectors(self, alias: str) -> set[str]:
        """Connectors that reach connector `alias`: the sources its breaker stops (the reversed graph)."""
        return self._reach(("connector", alias), self._predecessors)

    def feeding_pipeline(self, alias: str) -> set[str]:
        """Connectors that reach pipeline `alias`: the sources a pause of its QoS nodes holds."""
        return self._reach(("pipeline", alias), self._predecessors)

    @staticmethod
    def _reach(start: tuple[str, str], step: object) -> set[str]:
        assert callable(step)
        seen: set[tuple[str, str]] = set()
        todo = [start]
        while todo:
            node = todo.pop()
            for nxt in step(*node):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return {alias for kind, alias in seen if kind == "connector" and (kind, alias) != start}
