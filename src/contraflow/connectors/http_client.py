"""`http_client`: every event becomes an HTTP request; responses come back as events on `out`.

Config (Tremor's): `url` (required), `method` (default `POST`), `headers`
(`{name: value | [values]}`), `concurrency` (requests in flight at once,
default 4), `timeout` (nanoseconds per request; default none), `tls` (`true`,
or `{"cafile", "domain", "cert", "key"}`: `contraflow.connectors.base.tls`; on
with the system's CAs for `https://` urls; `domain` is the name the server's
certificate must carry, sent as SNI), `mime_mapping` (Tremor's: the codec of a
request body by the Content-Type it is sent with, and of a response body by its
Content-Type: `contraflow.connectors.base.mime`).

Per event, `$http_client.request = {"method", "url", "headers"}` overrides
the config. The body is the event's encoded frames, with the codec's content
type unless a header sets one. Responses are events on `out` (body decoded
by the codec) with `$http_client.response = {"status", "headers"}`,
`$http_client.request = {"method", "url"}` and the request's
`$correlation`, so a pipeline can match answers to what it sent.

Delivery, as the runtime sees it:
- the server cannot be reached (refused, reset, DNS): `ConnectionLost`;
  the breaker opens, every source upstream stops, and the runtime calls
  `connect()` (which probes the server with a TCP connection) by its
  `reconnect` policy until the server is back, then sends the batch again.
  Requests of the batch that had already succeeded are not sent twice;
- never more than `concurrency` requests in flight; when requests have waited
  for a slot while none came free for `SATURATION_S` (1 s: the server is
  saturated at this concurrency), the breaker opens until none waits (Tremor's
  "at capacity" signal), without failing anything. Waiting alone is normal:
  the runtime hands over batches larger than the concurrency, and a slow box
  makes a long batch, not a stalled server;
- a timeout, a 5xx or a 429: `DeliveryFailed(retryable=True)`: retried
  with backoff by the runtime, then the `err` port;
- any other status is an answer: it is delivered as a response event.
Responses are queued for `pull()` in a bounded queue (a full queue holds
sending back) when `out` is connected, and not kept at all when it is not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from contraflow.codecs import CodecError
from contraflow.connectors.base import (
    ConnectionLost,
    Connector,
    ConnectorContext,
    DeliveryFailed,
    SinkEvent,
    SourceData,
    reason_of,
    register,
)
from contraflow.connectors.base.inbox import Inbox
from contraflow.connectors.base.mime import MimeCodecs, read_mime_mapping
from contraflow.connectors.base.netaddr import Endpoint, endpoint
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.tls import ClientTls, client_tls
from contraflow.connectors.http_server import headers_of_pairs

NS_PER_S = 1_000_000_000
RETRYABLE_STATUS = frozenset({429})
QUEUED_RESPONSES = 256
SATURATION_S = 1.0


@dataclass(frozen=True)
class ClientOptions:
    url: str
    target: Endpoint
    method: str
    headers: dict[str, list[str]]
    concurrency: int
    timeout_s: float | None
    tls: ClientTls | None
    mime_mapping: dict[str, str] | None

    @classmethod
    def read(cls, cfg: ConfigReader) -> ClientOptions:
        target = endpoint(cfg, scheme="http")
        if target.scheme not in ("http", "https"):
            raise cfg.error("url", f"must be an http:// or https:// URL, got {cfg.config['url']!r}")
        headers: dict[str, list[str]] = {}
        for name, value in cfg.record("headers").items():
            values = value if isinstance(value, list) else [value]
            if not all(isinstance(v, str) for v in values):
                raise cfg.error(
                    "headers", f"values must be strings or arrays of strings, got {value!r} for {name!r}"
                )
            headers[str(name).lower()] = values
        timeout = cfg.optional_integer("timeout", minimum=1)
        url = cfg.string("url")
        return cls(
            url if "://" in url else f"http://{url}",
            target,
            cfg.string("method", "POST").upper(),
            headers,
            cfg.integer("concurrency", 4, minimum=1),
            None if timeout is None else timeout / NS_PER_S,
            client_tls(cfg, target.host, default=target.scheme == "https"),
            read_mime_mapping(cfg),
        )


@register("http_client")
class HttpClientConnector(Connector[ClientOptions]):
    config_keys = frozenset({"url", "method", "headers", "concurrency", "timeout", "tls", "mime_mapping"})
    required_keys = frozenset({"url"})
    # Requests must wait for a slot this long without a break before the breaker opens.
    saturation_s = SATURATION_S

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.content_type = ctx.codec().mime_types[0]
        self.mime = MimeCodecs.of(ctx, self.options.mime_mapping)
        self.inbox = Inbox(ctx.quiescing, QUEUED_RESPONSES)
        self.tls_context = (
            self.options.tls.context() if self.options.tls else None
        )  # a bad file fails the deploy
        self._client: httpx.AsyncClient | None = None
        self._slots = asyncio.Semaphore(self.options.concurrency)
        self._at_capacity = False
        self._saturation: asyncio.TimerHandle | None = None
        self._in_flight = 0
        self._waiting = 0
        self._delivered: set[int] = set()  # events of the current batch already answered

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> ClientOptions:
        return ClientOptions.read(cfg)

    async def connect(self) -> None:
        """Probe the server with a TCP connection: the breaker closes only when it is reachable."""
        target = self.options.target
        try:
            async with asyncio.timeout(5.0):  # not wait_for, which may swallow a cancel (3.11)
                _, writer = await asyncio.open_connection(target.host, target.port)
        except (OSError, TimeoutError) as err:
            raise ConnectionLost(f"cannot reach {target}: {reason_of(err)}") from err
        writer.close()
        if self._client is None:
            limits = httpx.Limits(max_connections=self.options.concurrency)
            self._client = httpx.AsyncClient(
                timeout=self.options.timeout_s, limits=limits, verify=self.tls_context or True
            )

    # -- sink --------------------------------------------------------------------------------------

    async def send(self, events: Sequence[SinkEvent]) -> None:
        if self._client is None:
            raise ConnectionLost(f"not connected to {self.options.target}")
        if not any(_key(e) in self._delivered for e in events):
            self._delivered.clear()  # a new batch, not the retry of a partly delivered one
        pending = [e for e in events if _key(e) not in self._delivered]
        results = await asyncio.gather(*(self._one(e) for e in pending), return_exceptions=True)
        for result in results:  # the most serious problem decides what the runtime does
            if isinstance(result, ConnectionLost):
                raise result
        for result in results:
            if isinstance(result, BaseException):
                raise result
        self._delivered.clear()

    async def _one(self, event: SinkEvent) -> None:
        await self._acquire()
        try:
            response = await self._request(event)
        finally:
            self._release()
        self._delivered.add(_key(event))
        await self._emit(event, response)

    async def _acquire(self) -> None:
        """A request slot. Requests waiting for one without a break for `saturation_s` open the
        breaker (the server is saturated at this concurrency); it closes when none waits."""
        self._waiting += 1
        if self._waiting == 1 and self._in_flight >= self.options.concurrency:
            self._wait_for_saturation()
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
            if self._waiting == 0:
                self._unsaturated()
        self._in_flight += 1

    def _release(self) -> None:
        self._in_flight -= 1
        self._slots.release()
        if self._saturation is not None:  # progress: the wait for a slot starts again
            self._saturation.cancel()
            self._wait_for_saturation()

    def _wait_for_saturation(self) -> None:
        """`saturation_s` from now with no slot freed, the server counts as saturated."""
        self._saturation = asyncio.get_running_loop().call_later(self.saturation_s, self._saturated)

    def _saturated(self) -> None:
        self._at_capacity = True
        self.ctx.open_breaker(f"{self.options.concurrency} requests in flight (concurrency limit)")

    def _unsaturated(self) -> None:
        if self._saturation is not None:
            self._saturation.cancel()
            self._saturation = None
        if self._at_capacity:
            self._at_capacity = False
            self.ctx.close_breaker()

    async def _request(self, event: SinkEvent) -> httpx.Response:
        assert self._client is not None
        method, url, headers = self._target(event)
        try:
            response = await self._client.request(
                method, url, headers=headers, content=self._body(event, headers), extensions=self._extensions
            )
        except httpx.ConnectTimeout as err:
            raise ConnectionLost(f"{method} {url}: connecting timed out") from err
        except httpx.TimeoutException as err:
            raise DeliveryFailed(f"{method} {url}: timed out", retryable=True) from err
        except (httpx.TransportError, OSError) as err:
            raise ConnectionLost(f"{method} {url}: {reason_of(err)}") from err
        if response.status_code >= 500 or response.status_code in RETRYABLE_STATUS:
            raise DeliveryFailed(f"{method} {url}: HTTP {response.status_code}", retryable=True)
        return response

    def _body(self, event: SinkEvent, headers: list[tuple[str, str]]) -> bytes:
        if self.mime is None:
            return b"".join(event.frames)
        content_type = next(value for name, value in headers if name == "content-type")
        try:
            return self.mime.encoded(event, content_type)
        except CodecError as err:
            raise DeliveryFailed(f"the request body cannot be encoded: {err}", retryable=False) from err

    def _target(self, event: SinkEvent) -> tuple[str, str, list[tuple[str, str]]]:
        nested = event.meta.get("http_client")
        override = nested.get("request") if isinstance(nested, dict) else None
        override = override if isinstance(override, dict) else {}
        method, url = override.get("method"), override.get("url")
        method = method if isinstance(method, str) else self.options.method
        url = url if isinstance(url, str) else self.options.url
        headers = dict(self.options.headers)
        for name, value in (override.get("headers") or {}).items():
            headers[str(name).lower()] = [str(v) for v in (value if isinstance(value, list) else [value])]
        headers.setdefault("content-type", [self.content_type])
        return method.upper(), url, [(name, v) for name, values in headers.items() for v in values]

    @property
    def _extensions(self) -> dict[str, Any]:
        """httpcore's per-request settings: the TLS name to verify when `tls.domain` is set."""
        tls = self.options.tls
        return {"sni_hostname": tls.domain} if tls and tls.domain else {}

    async def _emit(self, event: SinkEvent, response: httpx.Response) -> None:
        meta: dict[str, Any] = {
            "http_client": {
                "response": {
                    "status": response.status_code,
                    "headers": headers_of_pairs(response.headers.raw),
                },
                "request": {"method": response.request.method, "url": str(response.request.url)},
            }
        }
        if "correlation" in event.meta:
            meta["correlation"] = event.meta["correlation"]
        if "out" in self.ctx.outputs:  # a full queue holds sending back: the flow reads responses slower
            for item in self._response_data(response, meta):
                await self.inbox.put(item)

    def _response_data(self, response: httpx.Response, meta: dict[str, Any]) -> list[SourceData]:
        if not response.content:
            return [SourceData(events=[(None, meta)])]
        if self.mime is not None:
            decoded = self.mime.decoded(response.content, response.headers.get("content-type"), meta)
            if decoded is not None:  # a codec of the mime_mapping other than the connector's
                return decoded
        return [SourceData(data=response.content, meta=meta)]

    # -- source ------------------------------------------------------------------------------------

    async def pull(self) -> SourceData | None:
        return await self.inbox.get()

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def status(self) -> dict[str, Any]:
        return {"in_flight": self._in_flight}


def _key(event: SinkEvent) -> int:
    return event.offset if event.offset >= 0 else id(event)
