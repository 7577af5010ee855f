"""The FastAPI application: Tremor's `/v1` API over a `RuntimeFacade`, plus deploy, undeploy and metrics.

Routes:
  GET    /v1/version                       version and build kind
  GET    /v1/status                        200 when every flow is healthy, 503 otherwise
  GET    /v1/flows                         every flow
  POST   /v1/flows                         deploy Troy source -> 201 {"flows": [...]}
  GET    /v1/flows/{id}                    one flow
  PATCH  /v1/flows/{id}                    {"status": "paused"|"running"}
  DELETE /v1/flows/{id}                    quiesce and undeploy
  GET    /v1/flows/{id}/connectors         the flow's connectors
  GET    /v1/flows/{id}/connectors/{c}     one connector
  PATCH  /v1/flows/{id}/connectors/{c}     pause/resume one connector
  GET    /v1/events                        runtime events as Server-Sent Events (`flow` filter, Last-Event-ID)
  GET    /metrics                          Prometheus exposition
  GET    /                                 the live flow page (served from the package, no network)
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import APIRouter, FastAPI, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client.exposition import choose_encoder
from sse_starlette import EventSourceResponse, ServerSentEvent

from contraflow.api import bodies
from contraflow.api.auth import BearerAuth
from contraflow.api.errors import ApiError, install_error_handlers
from contraflow.api.facade import (
    HEALTHY_STATES,
    ConnectorStatus,
    InvalidTransition,
    RuntimeFacade,
    State,
    UnknownConnector,
)
from contraflow.api.models import (
    NON_BLANK,
    ConnectorReport,
    DeployRequest,
    DeployResponse,
    ErrorBody,
    FlowReport,
    RuntimeStatusReport,
    StatusPatch,
    VersionReport,
)
from contraflow.api.page import add_page_routes
from contraflow.api.paths import PLUGINS_UNDER_PATH_POLICY, PathPolicy, python_operators_in
from contraflow.connectors.base import plugins_refused
from contraflow.lang.nesting import parse_budget
from contraflow.lang.troy.compiler import compile_source

# How long parsing a deployed source may take: it runs in a thread, but holds the GIL meanwhile.
DEPLOY_PARSE_BUDGET_S = 5.0

F = TypeVar("F", bound=Callable[..., Any])

# The only changes a PATCH may ask for; asking for the current state is a no-op.
ALLOWED_TRANSITIONS: frozenset[tuple[str, str]] = frozenset({("running", "paused"), ("paused", "running")})


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for error replies, all with the ErrorBody schema."""
    return {code: {"model": ErrorBody} for code in codes}


def _json_body(model: type[Any], *media: str) -> dict[str, Any]:
    """OpenAPI `requestBody` for a route that reads its body itself (see `bodies`); `media` carry
    the source as text, which must not be blank."""
    content: dict[str, Any] = {"application/json": {"schema": model.model_json_schema()}}
    for m in media:
        content[m] = {"schema": {"type": "string", **NON_BLANK}}
    return {"requestBody": {"required": True, "content": content}}


def _status_patch(router: APIRouter, path: str, report: type[Any], tag: str) -> Callable[[F], F]:
    """A PATCH route whose JSON body is a `StatusPatch` (pause or resume) and that answers `report`."""
    return router.patch(
        path,
        response_model=report,
        responses=_errors(400, 404, 413, 415),
        openapi_extra=_json_body(StatusPatch),
        tags=[tag],
    )


def needs_change(what: str, current: State, desired: State) -> bool:
    """False for a no-op (already in `desired`); raise InvalidTransition unless running<->paused."""
    if current == desired:
        return False
    if (current, desired) not in ALLOWED_TRANSITIONS:
        raise InvalidTransition(what, current, desired)
    return True


async def deploy_source(request: Request) -> tuple[str, str]:
    """(Troy source, file name) from a text body or a JSON {"troy", "name"} body."""
    media = bodies.media_type(request)
    if bodies.is_json(media):
        req = bodies.validate(
            DeployRequest, bodies.parse_json(await bodies.read_body(request, bodies.MAX_SOURCE_BYTES))
        )
        source, name = req.troy, req.name
    elif not media or media.startswith("text/") or media in bodies.TEXT_LIKE:
        source = bodies.decode_text(await bodies.read_body(request, bodies.MAX_SOURCE_BYTES))
        name = "<api>"
    else:
        raise ApiError(
            415, f"unsupported media type '{media}': send Troy as text/plain or JSON {{\"troy\": ...}}"
        )
    if not source.strip():
        raise ApiError(400, "no Troy source in the request body")
    return source, name


def add_runtime_routes(router: APIRouter, runtime: RuntimeFacade, paths: PathPolicy | None = None) -> None:
    """The `/v1` routes bound to one runtime.

    Added straight to the app's router (not an included sub-router) so that a
    405 can list every method of a path in its Allow header.
    """

    @router.get("/v1/version", response_model=VersionReport, tags=["version"])
    async def get_version() -> VersionReport:
        """The contraflow version; `debug` is true under Python's development mode (-X dev)."""
        return VersionReport(version=runtime.version(), debug=sys.flags.dev_mode)

    @router.get(
        "/v1/status",
        response_model=RuntimeStatusReport,
        responses={503: {"model": RuntimeStatusReport, "description": "some flow is not running or paused"}},
        tags=["status"],
    )
    async def get_status() -> JSONResponse:
        """Summary of all flows: 200 when each is initializing, running or paused, else 503."""
        flows = await runtime.list_flows()
        counts = Counter(f.status for f in flows)
        report = RuntimeStatusReport(
            all_running=all(f.status == "running" for f in flows),
            num_flows=len(flows),
            flows=dict(counts),
            flow_status={f.id: f.status for f in flows},
            spark=runtime.spark_state(),
        )
        healthy = all(f.status in HEALTHY_STATES for f in flows)
        return JSONResponse(report.model_dump(), status_code=200 if healthy else 503)

    @router.get("/v1/flows", response_model=list[FlowReport], tags=["flows"])
    async def list_flows() -> list[FlowReport]:
        """Every deployed flow."""
        return [FlowReport.of(f) for f in await runtime.list_flows()]

    @router.post(
        "/v1/flows",
        status_code=201,
        response_model=DeployResponse,
        responses=_errors(400, 403, 409, 413, 415, 503),
        openapi_extra=_json_body(DeployRequest, "text/plain"),
        tags=["flows"],
    )
    async def deploy(request: Request) -> DeployResponse:
        """Deploy every `deploy flow` of Troy source (text/plain, or JSON {"troy": ..., "name": ...}).
        Files its connectors name must lie in the allowed directories (403 otherwise). Parsing
        runs off the event loop and may take at most DEPLOY_PARSE_BUDGET_S (400 past it)."""
        source, name = await deploy_source(request)
        with parse_budget(DEPLOY_PARSE_BUDGET_S):
            if paths is None:
                return DeployResponse(flows=await runtime.deploy(source, name))
            with plugins_refused(PLUGINS_UNDER_PATH_POLICY):  # their code could reach any file
                await asyncio.to_thread(check_path_policy, source, name, paths)
                return DeployResponse(flows=await runtime.deploy(source, name))

    @router.get("/v1/flows/{flow_id}", response_model=FlowReport, responses=_errors(404), tags=["flows"])
    async def get_flow(flow_id: str) -> FlowReport:
        """One flow."""
        return FlowReport.of(await runtime.get_flow(flow_id))

    @_status_patch(router, "/v1/flows/{flow_id}", FlowReport, "flows")
    async def patch_flow(flow_id: str, request: Request) -> FlowReport:
        """Pause or resume a flow; asking for its current status changes nothing."""
        patch = await bodies.structured_body(request, StatusPatch)
        flow = await runtime.get_flow(flow_id)
        if needs_change(f"flow '{flow_id}'", flow.status, patch.status):
            assert patch.status in ("running", "paused")
            flow = await runtime.set_flow_status(flow_id, patch.status)
        return FlowReport.of(flow)

    @router.delete("/v1/flows/{flow_id}", response_model=FlowReport, responses=_errors(404), tags=["flows"])
    async def undeploy(flow_id: str) -> FlowReport:
        """Quiesce a flow (sources stop, pipelines and sinks drain, offsets commit) and remove it."""
        return FlowReport.of(await runtime.undeploy(flow_id))

    @router.get(
        "/v1/flows/{flow_id}/connectors",
        response_model=list[ConnectorReport],
        responses=_errors(404),
        tags=["connectors"],
    )
    async def list_connectors(flow_id: str) -> list[ConnectorReport]:
        """The connectors of a flow."""
        return [ConnectorReport.of(c) for c in (await runtime.get_flow(flow_id)).connectors]

    @router.get(
        "/v1/flows/{flow_id}/connectors/{alias}",
        response_model=ConnectorReport,
        responses=_errors(404),
        tags=["connectors"],
    )
    async def get_connector(flow_id: str, alias: str) -> ConnectorReport:
        """One connector of a flow."""
        return ConnectorReport.of(await _connector(runtime, flow_id, alias))

    @_status_patch(router, "/v1/flows/{flow_id}/connectors/{alias}", ConnectorReport, "connectors")
    async def patch_connector(flow_id: str, alias: str, request: Request) -> ConnectorReport:
        """Pause or resume one connector; asking for its current status changes nothing."""
        patch = await bodies.structured_body(request, StatusPatch)
        connector = await _connector(runtime, flow_id, alias)
        if needs_change(f"connector '{alias}' of flow '{flow_id}'", connector.status, patch.status):
            assert patch.status in ("running", "paused")
            connector = await runtime.set_connector_status(flow_id, alias, patch.status)
        return ConnectorReport.of(connector)


def check_path_policy(source: str, name: str, paths: PathPolicy) -> None:
    """Raise ApiError unless `source` compiles, has no Python operators and names only allowed
    files: compiling is seconds of work for a large source, so it runs in a thread."""
    deployment = compile_source(source, name)
    operators = python_operators_in(deployment)
    if operators:
        raise ApiError(400, f"{PLUGINS_UNDER_PATH_POLICY}: {', '.join(operators)}")
    refused = paths.refusals(deployment)
    if refused:
        raise ApiError(403, "; ".join(map(str, refused)))


async def _connector(runtime: RuntimeFacade, flow_id: str, alias: str) -> ConnectorStatus:
    """A connector of a flow; 404 when either is unknown."""
    connector = (await runtime.get_flow(flow_id)).connector(alias)
    if connector is None:
        raise UnknownConnector(flow_id, alias)
    return connector


def add_metrics_route(router: APIRouter, runtime: RuntimeFacade) -> None:
    """`GET /metrics` in the Prometheus text format (OpenMetrics when the scraper asks for it)."""

    @router.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
        tags=["metrics"],
    )
    async def metrics(request: Request) -> Response:
        """Counters, gauges and histograms of connectors, channels and pipelines."""
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(runtime.metrics_registry()), media_type=content_type)


# Seconds between keep-alive comments on an idle event stream (proxies drop silent connections).
EVENTS_PING_S = 15


# One event of `GET /v1/events`, as Open API before 3.2 describes a `text/event-stream`: the
# schema covers each event, not the (endless) body. `data` is one JSON object, `id` its `seq`.
EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {"type": "string", "contentMediaType": "application/json", "description": "the event"},
        "id": {"type": "string", "pattern": "^[0-9]*$", "description": "its `seq` (for Last-Event-ID)"},
        "event": {"type": "string", "enum": ["message"]},
    },
}


def add_events_route(router: APIRouter, runtime: RuntimeFacade) -> None:
    """`GET /v1/events`: runtime events as Server-Sent Events, each `data:` one JSON object."""

    @router.get(
        "/v1/events",
        response_class=EventSourceResponse,
        responses={200: {"content": {"text/event-stream": {"schema": EVENT_SCHEMA}}}, **_errors(400)},
        tags=["events"],
    )
    async def events(
        flow: Annotated[str | None, Query(description="only events of this flow id")] = None,
        history: Annotated[int, Query(ge=0, le=500, description="recent events sent first")] = 50,
        last_event_id: Annotated[
            int | None,
            Header(
                alias="Last-Event-ID",
                ge=0,
                description="resume: every event after this id still held (replaces `history`)",
            ),
        ] = None,
    ) -> EventSourceResponse:
        """Back-pressure, breakers, watchdog, cancellation tiers, deploy/pause/resume, failed batches.

        A client that reconnects with `Last-Event-ID` (browsers' EventSource does) gets the events
        it missed, from the runtime's last 500 (kept across restarts), then the live ones."""

        async def stream() -> AsyncIterator[ServerSentEvent]:
            async for event in runtime.subscribe_events(flow, history, last_event_id):
                yield ServerSentEvent(data=orjson.dumps(event).decode(), id=str(event.get("seq", "")))

        return EventSourceResponse(stream(), ping=EVENTS_PING_S)


def create_app(
    runtime: RuntimeFacade, *, token: str | None = None, allowed_paths: PathPolicy | None = None
) -> FastAPI:
    """The API application for `runtime`; serve it with `contraflow.api.server`.
    `token`: every request needs it as a Bearer token; `allowed_paths`: where deployed
    flows may read and write files (None: anywhere)."""
    app = FastAPI(
        title="contraflow",
        version=runtime.version(),
        description="Tremor-compatible control API of the contraflow runtime, plus deployment and metrics.",
    )
    install_error_handlers(app)
    add_runtime_routes(app.router, runtime, allowed_paths)
    add_metrics_route(app.router, runtime)
    add_events_route(app.router, runtime)
    add_page_routes(app)
    _tidy_openapi(app)
    if token is not None:
        app.add_middleware(BearerAuth, token=token)
    return app


def _tidy_openapi(app: FastAPI) -> None:
    """What FastAPI generates, corrected to what the server does: no 422 (this API answers 400
    instead), and an optional parameter is absent or a value, never `null` (FastAPI documents
    `x: int | None = None` as "an int or null", and `Last-Event-ID: null` is a 400)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            for operations in schema["paths"].values():
                for operation in operations.values():
                    operation["responses"].pop("422", None)
                    for parameter in operation.get("parameters", []):
                        _drop_null(parameter["schema"])
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]


def _drop_null(schema: dict[str, Any]) -> None:
    """`{"anyOf": [X, {"type": "null"}], ...}` becomes `{**X, ...}`."""
    choices = [c for c in schema.get("anyOf", []) if c != {"type": "null"}]
    if "anyOf" in schema and len(choices) == 1:
        del schema["anyOf"]
        schema.update(choices[0])
