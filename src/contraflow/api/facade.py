"""What the REST API needs from the runtime, as plain data.

The API never reaches into runtime objects (tasks, Spark queries, SPU
clients): it talks to a `RuntimeFacade`, which the runtime implements and
the API tests implement in memory. Everything crossing this line is an
immutable dataclass of strings, so the HTTP layer can render it without
locking or awaiting anything else.

Errors: the facade raises `UnknownFlow` / `UnknownConnector` for ids it does
not know (404), `InvalidTransition` when a status change is not allowed in
the current state (400), `FlowExists` when a deployment would reuse a
running flow id (409), `contraflow.lang.errors.LangError` / `LangErrors`
for Troy compile errors and any other `contraflow.errors.UserError` for
deployment mistakes such as bad connector config (400); `SparkUnavailable`
when a deployment needs a Spark query and Spark did not start (503).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry

from contraflow.errors import UserError
from contraflow.lang.graph import FlowGraph

# Tremor's instance states; a flow and each of its connectors has one.
State = Literal["initializing", "running", "paused", "draining", "stopped", "failed"]
STATES: tuple[State, ...] = ("initializing", "running", "paused", "draining", "stopped", "failed")

# The only states a user may ask for (PATCH); everything else is driven by the runtime.
DesiredState = Literal["running", "paused"]

# Whether a connector currently has a working connection to the outside world.
Connectivity = Literal["connected", "disconnected"]

# A circuit breaker of a connector: open while what it delivers to cannot take events.
BreakerState = Literal["open", "closed"]

# Flow priorities, most urgent first (the reserved flow arg `priority`).
Priority = Literal["critical", "high", "normal", "low", "background"]

# Where the runtime's Spark session is (`contraflow.runtime.spark_on_demand`): only flows that run a
# query wait for it; "not started" in a runtime that starts it on first use.
SparkState = Literal["not started", "starting", "running", "failed", "stopped"]

# States in which a flow counts as healthy for `GET /v1/status`.
HEALTHY_STATES: frozenset[str] = frozenset({"initializing", "running", "paused"})


@dataclass(frozen=True)
class PipelineEndpoint:
    """One end of a connection from a connector port: a pipeline alias and its port."""

    alias: str
    port: str


@dataclass(frozen=True)
class ConnectorStatus:
    """A connector instance of a flow as the API reports it.

    `pipelines` maps each of the connector's ports (`out`, `err`, `in`) to
    the pipeline endpoints connected to it, as in Tremor's status report.
    """

    alias: str
    kind: str
    status: State
    connectivity: Connectivity
    pipelines: dict[str, list[PipelineEndpoint]] = field(default_factory=dict)
    breaker: BreakerState = "closed"
    breaker_reason: str | None = None
    held_by: list[str] = field(default_factory=list)  # why the connector's loop is held (pause, breaker...)


@dataclass(frozen=True)
class NodeRef:
    """A node of the flow graph: `kind` is "connector" or "pipeline"."""

    kind: str
    alias: str
    port: str


@dataclass(frozen=True)
class ChannelStatus:
    """One channel (edge) of a flow: where it comes from, who reads it, and how full it is.

    `name` is `producer_alias/port` (how flow args name it), `topic` its SPU
    topic; `appended` counts every event ever appended (its end offset) and
    `events_per_s` is its append rate over the monitor's last second.
    """

    name: str
    topic: str
    source: NodeRef
    readers: list[NodeRef]
    depth: int = 0
    backpressure: bool = False
    appended: int = 0
    events_per_s: float = 0.0


@dataclass(frozen=True)
class FlowStatus:
    """A deployed flow instance: its id (the `deploy flow` alias), state and parts.

    `definition` is the name of the `define flow` it instantiates;
    `pipelines` lists the aliases of its pipeline instances.
    """

    id: str
    status: State
    definition: str
    connectors: list[ConnectorStatus] = field(default_factory=list)
    pipelines: list[str] = field(default_factory=list)
    priority: Priority = "normal"
    channels: list[ChannelStatus] = field(default_factory=list)

    def connector(self, alias: str) -> ConnectorStatus | None:
        """The connector called `alias`, or None."""
        return next((c for c in self.connectors if c.alias == alias), None)


def connector_pipelines(graph: FlowGraph, alias: str) -> dict[str, list[PipelineEndpoint]]:
    """Tremor's `pipelines` of a connector: for each of its ports, the pipeline ports wired to it."""
    out: dict[str, list[PipelineEndpoint]] = {}
    for c in graph.connections:
        if c.from_kind == "connector" and c.from_alias == alias and c.to_kind == "pipeline":
            out.setdefault(c.from_port, []).append(PipelineEndpoint(c.to_alias, c.to_port))
        if c.to_kind == "connector" and c.to_alias == alias and c.from_kind == "pipeline":
            out.setdefault(c.to_port, []).append(PipelineEndpoint(c.from_alias, c.from_port))
    return out


def describe_flow(
    graph: FlowGraph,
    status: State,
    connectors: Mapping[str, tuple[State, Connectivity]] | None = None,
) -> FlowStatus:
    """The `FlowStatus` of a deployed flow graph.

    `connectors` gives each connector's (state, connectivity); a connector
    not listed takes the flow's state and counts as disconnected.
    """
    states = connectors or {}
    reports = []
    for alias, spec in graph.connectors.items():
        state, connectivity = states.get(alias, (status, "disconnected"))
        reports.append(
            ConnectorStatus(alias, spec.kind, state, connectivity, connector_pipelines(graph, alias))
        )
    return FlowStatus(graph.name, status, graph.definition, reports, list(graph.pipelines))


class UnknownFlow(UserError):
    """No deployed flow has this id."""

    def __init__(self, flow_id: str) -> None:
        self.flow_id = flow_id
        super().__init__(f"flow '{flow_id}' not found")


class UnknownConnector(UserError):
    """The flow exists but has no connector with this alias."""

    def __init__(self, flow_id: str, alias: str) -> None:
        self.flow_id = flow_id
        self.alias = alias
        super().__init__(f"connector '{alias}' not found in flow '{flow_id}'")


class InvalidTransition(UserError):
    """A status change the state machine does not allow (e.g. resuming a failed flow)."""

    def __init__(self, what: str, current: str, desired: str) -> None:
        self.current = current
        self.desired = desired
        super().__init__(f"cannot change the status of {what} from {current} to {desired}")


class SparkUnavailable(UserError):
    """A deployment needs a Spark query and the runtime's Spark session did not start (or the
    runtime is stopping): nothing of it was started."""


class FlowExists(UserError):
    """A deployment would create a flow whose id is already deployed."""

    def __init__(self, flow_id: str) -> None:
        self.flow_id = flow_id
        super().__init__(f"flow '{flow_id}' is already deployed; undeploy it first")


@runtime_checkable
class RuntimeFacade(Protocol):
    """Everything the REST API asks of the runtime.

    The coroutines run on the runtime's event loop (the API server is a task
    in that loop), so implementations may touch runtime state directly and
    must not block: long work (compiling, quiescing) is awaited.
    """

    def version(self) -> str:
        """The contraflow version string, e.g. '0.1.0'."""
        ...

    async def list_flows(self) -> list[FlowStatus]:
        """Every deployed flow, in deployment order."""
        ...

    def spark_state(self) -> SparkState:
        """Where the Spark session is (flows that run a query wait for it running)."""
        ...

    async def get_flow(self, flow_id: str) -> FlowStatus:
        """One flow; raises UnknownFlow."""
        ...

    async def set_flow_status(self, flow_id: str, status: DesiredState) -> FlowStatus:
        """Pause (sources first, then sinks) or resume (the reverse) a flow; returns its new status.

        Called only for a real change running<->paused; raises UnknownFlow,
        or InvalidTransition if the flow's state changed meanwhile.
        """
        ...

    async def set_connector_status(self, flow_id: str, alias: str, status: DesiredState) -> ConnectorStatus:
        """Pause or resume a single connector; returns its new status.

        Raises UnknownFlow, UnknownConnector or InvalidTransition.
        """
        ...

    async def deploy(self, source: str, name: str) -> list[str]:
        """Compile Troy `source` (reported as file `name`) and start every `deploy flow` in it.

        Returns the ids of the new flows in source order. Raises LangError or
        LangErrors for compile errors, FlowExists for a clash with a deployed
        flow id, and UserError for any other deployment mistake. Nothing is
        started when an error is raised.
        """
        ...

    async def undeploy(self, flow_id: str) -> FlowStatus:
        """Quiesce a flow (sources stop, pipelines and sinks drain, offsets commit), then remove it.

        Returns the flow's final status (normally `stopped`); raises UnknownFlow.
        """
        ...

    def metrics_registry(self) -> CollectorRegistry:
        """The registry the runtime's `RuntimeMetrics` writes to; `GET /metrics` renders it."""
        ...

    def subscribe_events(
        self, flow: str | None, history: int, after: int | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Runtime events (of `flow` only, when given): the last `history` ones (or, with `after`,
        every recent one whose `seq` is larger), then each new one.

        An async iterator that ends when the runtime shuts down; `GET /v1/events` streams it.
        """
        ...
