"""Request and response bodies of the REST API (they make up the OpenAPI schema).

Response shapes follow Tremor's API (`alias`, `status`, `connectors`,
`connectivity`, `pipelines`; `{"code", "error"}` for errors); fields Tremor
does not have (`kind`, `definition`, `pipelines` of a flow, `flow_status`)
are additions a Tremor client simply ignores.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contraflow.api.facade import (
    BreakerState,
    ChannelStatus,
    Connectivity,
    ConnectorStatus,
    DesiredState,
    FlowStatus,
    NodeRef,
    Priority,
    SparkState,
    State,
)


class VersionReport(BaseModel):
    """`GET /v1/version`."""

    version: str = Field(description="contraflow version")
    debug: bool = Field(description="true when running a development (debug) build")


class RuntimeStatusReport(BaseModel):
    """`GET /v1/status`: Tremor's summary plus the status of each flow."""

    all_running: bool = Field(description="true when every flow is running")
    num_flows: int = Field(description="number of deployed flows")
    flows: dict[State, int] = Field(description="number of flows in each state")
    flow_status: dict[str, State] = Field(description="state of each flow by id")
    spark: SparkState = Field(
        description="the Spark session; a flow that runs a Spark query is deployed once it runs"
    )


class PipelineRef(BaseModel):
    """A pipeline port a connector port is connected to."""

    alias: str
    port: str


class ConnectorReport(BaseModel):
    """A connector of a flow."""

    alias: str
    kind: str = Field(description="connector type, e.g. file, http_client")
    status: State
    connectivity: Connectivity
    pipelines: dict[str, list[PipelineRef]] = Field(
        description="for each connector port, the pipeline ports connected to it"
    )
    breaker: BreakerState = Field(description="open while the connector cannot deliver (a sink's breaker)")
    breaker_reason: str | None = Field(description="why the breaker is open")
    held_by: list[str] = Field(description="why the connector's loop is held: pause, breaker, back-pressure")

    @classmethod
    def of(cls, c: ConnectorStatus) -> ConnectorReport:
        pipelines = {
            port: [PipelineRef(alias=p.alias, port=p.port) for p in ends]
            for port, ends in c.pipelines.items()
        }
        return cls(
            alias=c.alias,
            kind=c.kind,
            status=c.status,
            connectivity=c.connectivity,
            pipelines=pipelines,
            breaker=c.breaker,
            breaker_reason=c.breaker_reason,
            held_by=list(c.held_by),
        )


class BreakerReport(BaseModel):
    """A connector's circuit breaker."""

    state: BreakerState
    reason: str | None = None


class NodeReport(BaseModel):
    """A connector or pipeline port, one end of a channel."""

    kind: str = Field(description="connector or pipeline")
    alias: str
    port: str

    @classmethod
    def of(cls, n: NodeRef) -> NodeReport:
        return cls(kind=n.kind, alias=n.alias, port=n.port)


class ChannelReport(BaseModel):
    """A channel (an edge of the flow graph) with its depth and back-pressure state."""

    name: str = Field(description="producer_alias/port, as flow args name it")
    topic: str = Field(description="the SPU topic holding the channel")
    source: NodeReport = Field(description="the port that appends to it")
    readers: list[NodeReport] = Field(description="the ports that read it")
    depth: int = Field(description="events not yet read by the slowest reader")
    backpressure: bool = Field(description="true while its producer is stopped at the high watermark")
    appended: int = Field(description="events ever appended (the topic's end offset)")
    events_per_s: float = Field(description="append rate over the last second")

    @classmethod
    def of(cls, c: ChannelStatus) -> ChannelReport:
        return cls(
            name=c.name,
            topic=c.topic,
            source=NodeReport.of(c.source),
            readers=[NodeReport.of(r) for r in c.readers],
            depth=c.depth,
            backpressure=c.backpressure,
            appended=c.appended,
            events_per_s=c.events_per_s,
        )


class FlowReport(BaseModel):
    """A deployed flow: Tremor lists its connectors by alias."""

    alias: str = Field(description="flow id (the alias of its `deploy flow`)")
    status: State
    connectors: list[str] = Field(description="aliases of the flow's connectors")
    definition: str = Field(description="name of the `define flow` it instantiates")
    pipelines: list[str] = Field(description="aliases of the flow's pipelines")
    priority: Priority = Field(description="the flow's scheduling priority")
    breakers: dict[str, BreakerReport] = Field(description="each connector's circuit breaker, by alias")
    channels: list[ChannelReport] = Field(description="each channel with its depth and back-pressure")

    @classmethod
    def of(cls, f: FlowStatus) -> FlowReport:
        return cls(
            alias=f.id,
            status=f.status,
            connectors=[c.alias for c in f.connectors],
            definition=f.definition,
            pipelines=list(f.pipelines),
            priority=f.priority,
            breakers={c.alias: BreakerReport(state=c.breaker, reason=c.breaker_reason) for c in f.connectors},
            channels=[ChannelReport.of(c) for c in f.channels],
        )


class StatusPatch(BaseModel):
    """`PATCH` body: the desired status, `running` or `paused` (the only states a user may ask for;
    the others are the runtime's to reach)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    status: DesiredState


# JSON schema of a string that holds something besides white space (a Troy source).
NON_BLANK: dict[str, Any] = {"minLength": 1, "pattern": "\\S"}


class DeployRequest(BaseModel):
    """`POST /v1/flows` JSON body (the Troy source may also be sent as text/plain)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    troy: str = Field(
        description="Troy source with one or more `deploy flow` statements",
        json_schema_extra=NON_BLANK,  # a blank source is answered 400 "no Troy source"
    )
    name: str = Field(default="<api>", description="file name used in error messages")


class DeployResponse(BaseModel):
    """`POST /v1/flows` reply: the ids of the flows just deployed."""

    flows: list[str]


class CompileErrorDetail(BaseModel):
    """One Troy compile error, located in the source."""

    file: str
    line: int
    column: int
    message: str
    hint: str


class ErrorBody(BaseModel):
    """Every error reply; `errors` is present only for Troy compile errors."""

    code: int = Field(description="HTTP status code, repeated")
    error: str = Field(
        description="what went wrong; for compile errors file:line:column, the line, a caret, a hint"
    )
    errors: list[CompileErrorDetail] | None = None
