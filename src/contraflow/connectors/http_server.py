"""`http_server`: each HTTP request is an event; its response waits for delivery or for a reply.

Config: `url` (`"http://host:port"` or `"host:port"`, required), `tls`
(`{"cert", "key"}`, optional `"cafile"` to require client certificates:
`contraflow.connectors.base.tls`; `$request.url.scheme` is then `https`),
`mime_mapping` (Tremor's: the codec of a request body by its Content-Type, and
of a reply by the Content-Type it is sent with: `contraflow.connectors.base.mime`).

Source: the request body is the event's data (decoded by the connector's
codec and preprocessors, one stream per request; an empty body is the event
`null`). Metadata, as Tremor's:
`$request = {"method", "url": {"scheme", "host", "port", "path", "query"},
"protocol", "headers": {name: [values]}}`, the same under
`$http_server.request`, and `$http_server.request_id`.

Response, whichever comes first:
- a reply event on the `in` port carrying the request's
  `$http_server.request_id` (a pipeline that passes `$` on keeps it): its encoded frames
  are the body, `$response = {"status", "headers"}` (or
  `$http_server.response`) set status and headers (default 200 and the
  codec's content type);
- the runtime acks the request's token, i.e. every event derived from it was
  delivered downstream: 200 with an empty body;
- the runtime fails the token: 503, so the client can retry.
A request still waiting when the connector closes gets 503. A reply that has
no request waiting for it (already answered, or no `$http_server.request_id`)
becomes an error event on this connector's `err` port. Requests are
queued in a bounded inbox: when the flow does not keep up (breaker open,
back-pressure), new requests wait in it, i.e. the server slows down its
clients instead of buffering without limit.

Reconnects: if the port cannot be bound, `connect` raises `ConnectionLost`
and the runtime retries by the `reconnect` policy.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from contraflow.codecs import CodecError
from contraflow.connectors.base import (
    Connector,
    ConnectorContext,
    SinkEvent,
    SourceData,
    register,
)
from contraflow.connectors.base.asgiserver import AsgiServer, Receive, Scope, Send
from contraflow.connectors.base.inbox import Inbox
from contraflow.connectors.base.mime import MimeCodecs, content_type_of, read_mime_mapping
from contraflow.connectors.base.netaddr import Endpoint, endpoint
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.tls import ServerTls, loaded_tls, server_tls
from contraflow.connectors.base.undelivered import report_undelivered

QUEUED_REQUESTS = 128


@dataclass
class Response:
    status: int = 200
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""


def headers_of_pairs(pairs: Iterable[tuple[bytes, bytes]]) -> dict[str, list[str]]:
    """Raw header pairs as Tremor's header meta: lower-case name -> list of values."""
    headers: dict[str, list[str]] = {}
    for name, value in pairs:
        headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return headers


def response_headers(spec: Any) -> list[tuple[bytes, bytes]]:
    """`{"name": "v"}` or `{"name": ["v1", "v2"]}` as ASGI header pairs; other shapes are ignored."""
    pairs: list[tuple[bytes, bytes]] = []
    if isinstance(spec, dict):
        for name, value in spec.items():
            for item in value if isinstance(value, list) else [value]:
                pairs.append((str(name).lower().encode("latin-1"), str(item).encode("latin-1")))
    return pairs


@dataclass(frozen=True)
class HttpServerOptions:
    url: Endpoint
    tls: ServerTls | None
    mime_mapping: dict[str, str] | None = None


@register("http_server")
class HttpServerConnector(Connector[HttpServerOptions]):
    config_keys = frozenset({"url", "tls", "mime_mapping"})
    required_keys = frozenset({"url"})

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.inbox = Inbox(ctx.quiescing, QUEUED_REQUESTS)
        loaded_tls(self.options)  # uvicorn reads the files itself; a bad one fails the deploy here
        self.content_type = ctx.codec().mime_types[0].encode()
        self.mime = MimeCodecs.of(ctx, self.options.mime_mapping)
        self._server: AsgiServer | None = None
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._ids = itertools.count(1)

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> HttpServerOptions:
        return HttpServerOptions(endpoint(cfg, scheme="http"), server_tls(cfg), read_mime_mapping(cfg))

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.port

    async def connect(self) -> None:
        if self._server is None:
            url = self.options.url
            server = AsgiServer(self._handle, url.host, url.port, self.options.tls)
            await server.start()
            self._server = server
            self.ctx.logger.info(
                "HTTP%s server listening on %s:%d", "S" if self.options.tls else "", url.host, server.port
            )

    # -- requests ----------------------------------------------------------------------------------

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        if self.ctx.quiescing.is_set():
            await _respond(send, Response(503, body=b"shutting down"))
            return
        rid = next(self._ids)
        answer: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[rid] = answer
        try:
            await self._enqueue(rid, self._meta(scope, rid), body)
            response = await answer
        finally:
            self._pending.pop(rid, None)
        await _respond(send, response)

    def _meta(self, scope: Scope, rid: int) -> dict[str, Any]:
        headers = headers_of_pairs(scope["headers"])
        host, port = _authority(headers, scope.get("server") or (self.options.url.host, self.port))
        request = {
            "method": scope["method"],
            "url": {
                "scheme": scope.get("scheme", "http"),
                "host": host,
                "port": port,
                "path": unquote(scope["path"]),
                "query": scope["query_string"].decode("latin-1") or None,
            },
            "protocol": f"HTTP/{scope.get('http_version', '1.1')}",
            "headers": headers,
        }
        return {"request": request, "http_server": {"request_id": rid, "request": request}}

    async def _enqueue(self, rid: int, meta: dict[str, Any], body: bytes) -> None:
        if not body:
            await self.inbox.put(SourceData(events=[(None, meta)], stream=rid, meta=meta, token=rid))
            return
        decoded = self.mime.decoded(body, _content_type(meta), meta) if self.mime else None
        if decoded is not None:  # a codec of the mime_mapping other than the connector's
            *errors, events = decoded
            for error in errors:
                await self.inbox.put(error)
            events.stream, events.token = rid, rid
            await self.inbox.put(events)
            return
        # The body is a whole stream: it ends with its data, so the preprocessors flush it.
        await self.inbox.put(SourceData(data=body, stream=rid, meta=meta, token=rid, end_stream=True))

    async def pull(self) -> SourceData | None:
        return await self.inbox.get()

    async def ack(self, token: Any) -> None:
        self._answer(token, Response(200))

    async def fail(self, token: Any) -> None:
        self._answer(token, Response(503, body=b"the request could not be delivered"))

    def _answer(self, rid: Any, response: Response) -> bool:
        answer = self._pending.get(rid) if isinstance(rid, int) else None
        if answer is None or answer.done():
            return False
        answer.set_result(response)
        return True

    # -- replies -----------------------------------------------------------------------------------

    async def send(self, events: Sequence[SinkEvent]) -> None:
        """Answer each event's request; a reply nobody waits for (answered already, client gone, no
        request id) becomes an error event on `err` while the rest of the batch is delivered; so does one
        its mime_mapping codec cannot encode (its request gets a 500)."""
        for event in events:
            rid = _request_id(event.meta)
            try:
                response = self._response(event)
            except CodecError as err:
                self._answer(rid, Response(500, body=b"the reply could not be encoded"))
                report_undelivered(self.ctx, self.inbox, f"the reply cannot be encoded: {err}", event)
                continue
            if not self._answer(rid, response):
                report_undelivered(self.ctx, self.inbox, f"no request {rid} is waiting for a response", event)

    def _response(self, event: SinkEvent) -> Response:
        spec = event.meta.get("response")
        if not isinstance(spec, dict):
            nested = event.meta.get("http_server")
            spec = nested.get("response") if isinstance(nested, dict) else None
        spec = spec if isinstance(spec, dict) else {}
        status = spec.get("status", 200)
        headers = [h for h in response_headers(spec.get("headers")) if h[0] != b"content-length"]
        content_type = next((value for name, value in headers if name == b"content-type"), None)
        if content_type is None:
            content_type = self.content_type
            headers.append((b"content-type", content_type))
        valid = isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599
        body = (
            self.mime.encoded(event, content_type.decode("latin-1")) if self.mime else b"".join(event.frames)
        )
        return Response(status if valid else 500, headers, body)

    async def close(self) -> None:
        for answer in self._pending.values():
            if not answer.done():
                answer.set_result(Response(503, body=b"shutting down"))
        if self._server is not None:
            server, self._server = self._server, None
            await server.stop()

    def status(self) -> dict[str, Any]:
        return {"pending_requests": len(self._pending)}


def _authority(headers: Mapping[str, list[str]], server: Sequence[Any]) -> tuple[str, int]:
    """Host and port the client addressed (its Host header), else the listening address."""
    host_header = headers.get("host", [""])[0]
    host, sep, port = host_header.rpartition(":")
    if sep and port.isdigit() and host:
        return host.strip("[]"), int(port)
    if host_header and not sep:
        return host_header, int(server[1])
    return str(server[0]), int(server[1])


def _content_type(meta: Mapping[str, Any]) -> str | None:
    request = meta.get("request")
    return content_type_of(request.get("headers")) if isinstance(request, dict) else None


def _request_id(meta: Mapping[str, Any]) -> Any:
    nested = meta.get("http_server")
    return nested.get("request_id") if isinstance(nested, dict) else None


async def _read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(parts)


async def _respond(send: Send, response: Response) -> None:
    headers = [*response.headers, (b"content-length", str(len(response.body)).encode())]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})
