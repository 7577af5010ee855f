"""`otel_server`: an OTLP/gRPC receiver (Tremor's); each export request is an event, answered on delivery.

Config (`base.otel_options`): `url` (`localhost:4317`), `logs`, `metrics`,
`trace` (true): the services served (one switched off answers UNIMPLEMENTED,
as a collector without it does); `compression` (`none`, `gzip`) of the answers.

Each export request becomes one event in Tremor's shape (`base.otlp`):
`{"logs": [...]}`, `{"metrics": [...]}` or `{"trace": [...]}`, with
`$otel_server = {"peer": gRPC's peer address}`. The call is answered only once
the runtime acks the event (delivered downstream, or persisted in the log
with `ack = "persisted"`): a sender that got OK may forget its data. A failed
delivery answers UNAVAILABLE, the status OTLP senders retry; so does a call
that arrives or is still waiting while the flow stops. A request with no
resource records is answered at once without an event. A body that is not an
export request is answered INVALID_ARGUMENT, the server going on. Requests wait in a bounded
inbox, so a flow that does not keep up slows its senders down.

The server is grpc.aio's, in the runtime's loop; a port that cannot be bound
is a `ConnectionLost`, retried by the `reconnect` policy.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from contraflow.connectors.base import ConnectionLost, ConnectorContext, SourceData, register
from contraflow.connectors.base.inbox import Inbox
from contraflow.connectors.base.otel_options import OtelConnector
from contraflow.connectors.base.otlp import Signal, request_to_event

QUEUED_REQUESTS = 128
# How long `close` lets calls still being answered finish.
GRACE_S = 1.0


def _service(connector: OtelServerConnector, signal: Signal) -> grpc.GenericRpcHandler:
    """One signal's service, its `Export` taking the request's bytes: the connector parses them, so
    a body that is not a request is INVALID_ARGUMENT (gRPC's own parsing would answer UNKNOWN)."""

    async def export(body: bytes, context: grpc.aio.ServicerContext) -> Message:
        return await connector.export(signal, body, context)

    handler = grpc.unary_unary_rpc_method_handler(
        export, response_serializer=lambda response: response.SerializeToString()
    )
    return grpc.method_handlers_generic_handler(signal.service, {"Export": handler})


@register("otel_server")
class OtelServerConnector(OtelConnector):
    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.inbox = Inbox(ctx.quiescing, QUEUED_REQUESTS)
        self._server: grpc.aio.Server | None = None
        self._port = 0
        self._pending: dict[int, asyncio.Future[bool]] = {}
        self._ids = itertools.count(1)

    @property
    def port(self) -> int:
        """The port listened on (the one the system chose for port 0)."""
        return self._port

    async def connect(self) -> None:
        if self._server is not None:
            return
        # no SO_REUSEPORT (gRPC's default): a second server on a taken port must fail, not share it
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)], compression=self.options.compression)
        server.add_generic_rpc_handlers([_service(self, signal) for signal in self.options.signals])
        url = self.options.url
        try:
            port = server.add_insecure_port(f"{url.host}:{url.port}")
        except RuntimeError as err:
            port, reason = 0, str(err)
        else:
            reason = "the port is taken or the address is not local"
        if not port:
            await server.stop(None)
            raise ConnectionLost(f"cannot listen on {url}: {reason}")
        await server.start()
        self._server, self._port = server, port
        self.ctx.logger.info("OTLP/gRPC server listening on %s:%d", url.host, port)

    async def export(self, signal: Signal, body: bytes, context: grpc.aio.ServicerContext) -> Message:
        """Answer one export call once its event is delivered; UNAVAILABLE when it cannot be."""
        try:
            request = signal.request.FromString(body)
        except DecodeError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not an OTLP {signal.key} request: {err}")
        event = request_to_event(signal, request)
        if not event[signal.key]:
            return signal.response()
        if self.ctx.quiescing.is_set():
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the flow is stopping")
        rid = next(self._ids)
        delivered: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending[rid] = delivered
        try:
            meta = {"otel_server": {"peer": context.peer()}}
            await self.inbox.put(SourceData(events=[(event, meta)], token=rid))
            ok = await delivered
        finally:
            self._pending.pop(rid, None)
        if not ok:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the request could not be delivered")
        return signal.response()

    async def pull(self) -> SourceData | None:
        return await self.inbox.get()

    async def ack(self, token: Any) -> None:
        self._answer(token, True)

    async def fail(self, token: Any) -> None:
        self._answer(token, False)

    def _answer(self, rid: Any, delivered: bool) -> None:
        waiting = self._pending.get(rid) if isinstance(rid, int) else None
        if waiting is not None and not waiting.done():
            waiting.set_result(delivered)

    async def close(self) -> None:
        for rid in list(self._pending):
            self._answer(rid, False)
        if self._server is not None:
            server, self._server = self._server, None
            await server.stop(GRACE_S)

    def status(self) -> dict[str, Any]:
        return {"pending_requests": len(self._pending), "port": self._port}
