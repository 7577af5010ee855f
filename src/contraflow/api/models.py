"""Request and response bodies of the REST API (they make up the OpenAPI schema).

Response shapes follow Tremor's API (`alias`, `status`, `connectors`,
`connectivity`, `pipelines`; `{"code", "error"}` for errors); fields Tremor
does not have (`kind`, `definition`, `pipelines` of a flow, `flow_status`)
are additions a Tremor client simply ignores.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from contraflow.api.facade import Connectivity, ConnectorStatus, FlowStatus, State


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

    @classmethod
    def of(cls, c: ConnectorStatus) -> ConnectorReport:
        pipelines = {
            port: [PipelineRef(alias=p.alias, port=p.port) for p in ends]
            for port, ends in c.pipelines.items()
        }
        return cls(
            alias=c.alias, kind=c.kind, status=c.status, connectivity=c.connectivity, pipelines=pipelines
        )


class FlowReport(BaseModel):
    """A deployed flow: Tremor lists its connectors by alias."""

    alias: str = Field(description="flow id (the alias of its `deploy flow`)")
    status: State
    connectors: list[str] = Field(description="aliases of the flow's connectors")
    definition: str = Field(description="name of the `define flow` it instantiates")
    pipelines: list[str] = Field(description="aliases of the flow's pipelines")

    @classmethod
    def of(cls, f: FlowStatus) -> FlowReport:
        return cls(
            alias=f.id,
            status=f.status,
            connectors=[c.alias for c in f.connectors],
            definition=f.definition,
            pipelines=list(f.pipelines),
        )


class StatusPatch(BaseModel):
    """`PATCH` body: the desired status; only `running` <-> `paused` changes are allowed."""

    model_config = ConfigDict(extra="forbid", strict=True)

    status: State


class DeployRequest(BaseModel):
    """`POST /v1/flows` JSON body (the Troy source may also be sent as text/plain)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    troy: str = Field(description="Troy source with one or more `deploy flow` statements")
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
