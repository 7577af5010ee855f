"""The runtime half of the QoS operators: contraflow feedback in, signals for the pipeline queries out.

Feedback sources (what the runtime already has, nothing new is measured):
- `qos::backpressure` / `qos::percentile`: every delivery attempt of the sinks
  downstream of the node (reached from its `out` port through the pipeline's
  graph and the flow's connections). A delivered event observes latency =
  delivery time - the time it was appended to the sink's input channel (the
  record's log timestamp: it covers queueing in front of a slow sink and the
  send itself); each event of a failed attempt (a retryable failure about to
  be retried, an exhausted retry, a lost connection) observes a failure.
  The governors (`contraflow.pipeline.qos`) apply Tremor's rules. A
  `qos::backpressure` node with `method = "pause"` lets events pass; instead
  the flow holds the sources upstream of its pipeline while the back-off lasts
  (`pauses`), as Tremor's operator pauses them with a circuit breaker event.
- `qos::roundrobin`: the sinks' circuit breakers. An output port is
  unavailable while an event sent there would be stopped by an open breaker
  (`Routes`: a sink it must reach is open, with no round robin to go around it).

Signals go to the Spark workers as the SPU control value of each pipeline
query (`contraflow.pipeline.signals`), only when they changed: breaker
changes on the next monitor tick, governor changes at most every
`PUBLISH_INTERVAL_S`, so a busy sink does not turn into a control write per batch.
Every node's signal is always present, its neutral value included
(`{"unavailable": []}`, `{"perc": 1.0}`...): a worker only updates the nodes a
published value names, so a node left out would keep its last signal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contraflow import control
from contraflow.lang.graph import OperatorSpec, PipelineGraph
from contraflow.pipeline.analysis import has_qos
from contraflow.pipeline.qos import BackpressureGovernor, PercentileGovernor
from contraflow.runtime.routes import ROUNDROBIN, Routes, Scope, qos_nodes

log = logging.getLogger("contraflow.runtime.qos")

PUBLISH_INTERVAL_S = 0.25
GOVERNED = frozenset({"qos::backpressure", "qos::percentile"})


@dataclass
class GovernedNode:
    """A `qos::backpressure` or `qos::percentile` node and the sink channels whose deliveries feed it."""

    alias: str  # the pipeline
    path: str  # the node path inside it (`outer/inner` when nested)
    governor: BackpressureGovernor | PercentileGovernor
    topics: frozenset[str]
    pauses: bool = False  # `qos::backpressure` with `method = "pause"`: hold the sources instead

    @property
    def pause_until_ns(self) -> int:
        """When the sources may pull again (0: this node does not pause them)."""
        if self.pauses and isinstance(self.governor, BackpressureGovernor):
            return self.governor.until_ns
        return 0

    def observe(self, now_ns: int, latency_ms: float | None, failed: bool) -> dict[str, Any]:
        if isinstance(self.governor, BackpressureGovernor):
            return self.governor.observe(now_ns, latency_ms, failed)
        return self.governor.observe(latency_ms, failed)


@dataclass(frozen=True)
class RoundRobinNode:
    """A `qos::roundrobin` node: its scope (for the walk) and its output ports."""

    scope: Scope
    name: str
    ports: tuple[str, ...]

    @property
    def path(self) -> str:
        return f"{self.scope.prefix}{self.name}"


class QosFeed:
    """Keeps the QoS signals of one flow's pipelines and publishes them to the SPU when they change."""

    def __init__(
        self, flow_id: str, pipelines: dict[str, PipelineGraph], routes: Routes, client: Any
    ) -> None:
        """`pipelines`: the running pipelines (alias -> graph); `client`: an `AsyncSpuClient`."""
        self.flow_id = flow_id
        self.routes = routes
        self.client = client
        self.signals: dict[str, dict[str, Any]] = {}  # pipeline alias -> {node path: signal}
        self.governed: list[GovernedNode] = []
        self.roundrobins: dict[str, list[RoundRobinNode]] = {}
        for alias, graph in pipelines.items():
            if has_qos(graph):
                self._add_pipeline(alias, graph)
        self._published: dict[str, dict[str, Any]] = {}
        self._urgent = False
        self._last_publish = 0.0

    def _add_pipeline(self, alias: str, graph: PipelineGraph) -> None:
        self.signals[alias] = {}
        for scope, name in qos_nodes(alias, graph, GOVERNED | {ROUNDROBIN}):
            node = scope.graph.nodes[name]
            spec = node.spec
            assert isinstance(spec, OperatorSpec)
            if spec.kind == ROUNDROBIN:
                ports = tuple(p for p in node.outputs if p != "err")
                self.roundrobins.setdefault(alias, []).append(RoundRobinNode(scope, name, ports))
                continue
            governor = (
                BackpressureGovernor.from_spec(spec)
                if spec.kind == "qos::backpressure"
                else PercentileGovernor.from_spec(spec)
            )
            topics = frozenset(topic for _, topic in self.routes.sinks_of_port(scope, name, ["out"]))
            pauses = spec.kind == "qos::backpressure" and spec.config.get("method") == "pause"
            self.governed.append(GovernedNode(alias, f"{scope.prefix}{name}", governor, topics, pauses))
            self.signals[alias][f"{scope.prefix}{name}"] = governor.signal()

    @property
    def active(self) -> bool:
        """True when some running pipeline has a QoS node (otherwise nothing needs feeding)."""
        return bool(self.signals)

    # -- feedback ------------------------------------------------------------------------------

    def delivery(self, topic: str, appended_ms: Sequence[int], failed: bool) -> None:
        """A sink's delivery attempt of events read from `topic`, appended at `appended_ms`."""
        nodes = [n for n in self.governed if topic in n.topics]
        if not nodes:
            return
        now_ns = time.time_ns()  # wall clock: the operators compare it with events' ingest times
        now_ms = now_ns / 1e6
        for node in nodes:
            signal: dict[str, Any] = {}
            for stamp in appended_ms:
                signal = node.observe(now_ns, None if failed else max(0.0, now_ms - stamp), failed)
            if signal:
                self.signals[node.alias][node.path] = signal

    def breakers(self, open_sinks: frozenset[str]) -> None:
        """The set of sinks with an open breaker changed: recompute round robin availability."""
        routes = self.routes.with_open(open_sinks)
        for alias, nodes in self.roundrobins.items():
            for node in nodes:
                down = [p for p in node.ports if routes.of_port(node.scope, node.name, p)]
                self.signals[alias][node.path] = {"unavailable": down}
        self._urgent = True

    def pauses(self, now_ns: int) -> dict[str, tuple[str, int]]:
        """Back-offs of `method = "pause"` nodes still running at `now_ns`:
        gate key -> (pipeline alias whose sources to hold, until when in wall-clock ns)."""
        return {
            f"qos:{node.alias}/{node.path}": (node.alias, node.pause_until_ns)
            for node in self.governed
            if node.pause_until_ns > now_ns
        }

    # -- publishing ----------------------------------------------------------------------------

    async def publish(self) -> None:
        """Write the signals of every pipeline whose signals changed since they were last written."""
        now = time.monotonic()
        if not self._urgent and now - self._last_publish < PUBLISH_INTERVAL_S:
            return
        self._urgent = False
        self._last_publish = now
        for alias, signals in self.signals.items():
            if self._published.get(alias) == signals:
                continue
            snapshot = {path: dict(signal) for path, signal in signals.items()}
            await control.signals(f"{self.flow_id}.{alias}").set_async(self.client, snapshot)
            self._published[alias] = snapshot
            log.debug("flow %s: pipeline %s signals %s", self.flow_id, alias, snapshot)
