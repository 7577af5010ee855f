"""http_client against a real HTTP server on 127.0.0.1: responses, breaker when down, recovery, limits."""

from __future__ import annotations

import asyncio
import errno
import os
import re
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from contraflow.connectors.base import ConnectionLost, ConnectorConfigError, DeliveryFailed, reason_of
from contraflow.connectors.base.asgiserver import AsgiServer, Receive, Scope, Send
from contraflow.connectors.http_client import HttpClientConnector
from tests.connectors.support import make, run, sink_event


@dataclass
class Upstream:
    """A small HTTP server that records requests and answers with a status chosen per request."""

    statuses: list[int] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    gate: asyncio.Event | None = None
    delay: float = 0.0  # seconds each request takes
    in_flight: int = 0
    server: AsgiServer | None = None

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.in_flight += 1
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(self.delay)
        self.in_flight -= 1
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.requests.append(
            {"method": scope["method"], "path": scope["path"], "headers": headers, "body": body}
        )
        status = self.statuses.pop(0) if self.statuses else 200
        reply = orjson.dumps({"got": len(self.requests)})
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"x-upstream", b"yes")],
            }
        )
        await send({"type": "http.response.body", "body": reply})

    async def start(self, port: int = 0) -> int:
        self.server = AsgiServer(self.app, "127.0.0.1", port)
        await self.server.start()
        return self.server.port

    async def stop(self) -> None:
        assert self.server is not None
        await self.server.stop()


def client(port: int, **config: Any) -> HttpClientConnector:
    conn = make("http_client", {"url": f"http://127.0.0.1:{port}/in", **config})
    assert isinstance(conn, HttpClientConnector)
    return conn


def test_events_become_requests_and_responses_become_events() -> None:
    async def body() -> None:
        upstream = Upstream()
        port = await upstream.start()
        conn = client(port, method="put", headers={"X-Token": "abc"})
        await conn.connect()
        override = {"http_client": {"request": {"method": "PATCH", "url": f"http://127.0.0.1:{port}/other"}}}
        await conn.send(
            [
                sink_event({"n": 1}, {"correlation": "c-1"}, offset=0),
                sink_event({"n": 2}, override, offset=1),
            ]
        )
        assert sorted((r["method"], r["path"]) for r in upstream.requests) == [
            ("PATCH", "/other"),
            ("PUT", "/in"),
        ]
        put = next(r for r in upstream.requests if r["method"] == "PUT")
        assert put["body"] == b'{"n":1}\n' and put["headers"]["x-token"] == "abc"
        assert put["headers"]["content-type"] == "application/json"
        answers = [await conn.pull(), await conn.pull()]
        metas = sorted(
            (a.meta for a in answers if a is not None), key=lambda m: m["http_client"]["request"]["method"]
        )
        assert [m["http_client"]["response"]["status"] for m in metas] == [200, 200]
        assert metas[1]["correlation"] == "c-1" and metas[1]["http_client"]["request"]["method"] == "PUT"
        assert metas[0]["http_client"]["response"]["headers"]["x-upstream"] == ["yes"]
        assert all(a is not None and a.data is not None and a.data.startswith(b'{"got":') for a in answers)
        await conn.close()
        await upstream.stop()

    run(body())


def test_the_reason_of_a_lost_connection_is_never_empty() -> None:
    """httpx's ConnectError may carry no message of its own; the OSError under it does."""
    try:
        try:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "")
        except OSError as refused:
            raise httpx.ConnectError("") from refused
    except httpx.ConnectError as err:
        assert reason_of(err) == os.strerror(errno.ECONNREFUSED)
    assert reason_of(TimeoutError()) == "TimeoutError"


def test_breaker_signal_while_the_server_is_down_and_recovery_when_it_is_back() -> None:
    async def body() -> None:
        upstream = Upstream()
        port = await upstream.start()
        conn = client(port)
        await conn.connect()
        await conn.send([sink_event({"n": 0}, offset=0)])
        await upstream.stop()  # the server goes away
        with pytest.raises(ConnectionLost) as lost:
            await conn.send([sink_event({"n": 1}, offset=1)])
        # Issue 32: the cause after the colon (it was empty: `POST http://...: `).
        assert re.fullmatch(rf"POST http://127\.0\.0\.1:{port}/\S*: \S.*", str(lost.value)), str(lost.value)
        with pytest.raises(ConnectionLost):
            await conn.connect()  # the runtime's reconnect probe fails while it is down
        back = Upstream()
        await back.start(port)  # back on the same port
        await conn.connect()
        await conn.send([sink_event({"n": 1}, offset=1)])  # the runtime resends the batch
        assert [r["body"] for r in back.requests] == [b'{"n":1}\n']
        await conn.close()
        await back.stop()

    run(body())


def test_server_errors_are_retryable_and_a_retry_skips_what_was_delivered() -> None:
    async def body() -> None:
        upstream = Upstream(statuses=[200, 503])
        port = await upstream.start()
        conn = client(port, concurrency=1)  # one at a time: the first request gets 200, the second 503
        await conn.connect()
        batch = [sink_event({"n": 1}, offset=10), sink_event({"n": 2}, offset=11)]
        with pytest.raises(DeliveryFailed) as err:
            await conn.send(batch)
        assert err.value.retryable
        await conn.send(batch)  # the runtime's retry
        assert [r["body"] for r in upstream.requests] == [b'{"n":1}\n', b'{"n":2}\n', b'{"n":2}\n']
        upstream.statuses = [404]
        await conn.send([sink_event({"n": 3}, offset=12)])  # a 4xx is an answer, not a failure
        statuses = []
        while len(statuses) < 3:
            item = await conn.pull()
            assert item is not None and item.meta is not None
            statuses.append(item.meta["http_client"]["response"]["status"])
        assert statuses == [200, 200, 404]
        await conn.close()
        await upstream.stop()

    run(body())


def test_saturated_concurrency_limit_opens_and_closes_the_breaker() -> None:
    async def body() -> None:
        signals: list[str] = []
        upstream = Upstream(gate=asyncio.Event())
        port = await upstream.start()
        conn = make("http_client", {"url": f"127.0.0.1:{port}", "concurrency": 2}, breaker=signals)
        await conn.connect()
        sending = asyncio.create_task(conn.send([sink_event({"n": i}, offset=i) for i in range(4)]))
        assert isinstance(conn, HttpClientConnector)
        conn.saturation_s = 0.2
        while upstream.in_flight < 2:
            await asyncio.sleep(0.01)
        assert signals == []  # waiting for a slot is normal at first: batches exceed the concurrency
        await asyncio.sleep(0.3)
        assert upstream.in_flight == 2  # never more than the limit
        assert signals == ["open:2 requests in flight (concurrency limit)"]  # saturated: breaker open
        assert upstream.gate is not None
        upstream.gate.set()
        await asyncio.wait_for(sending, 5)
        # One open while requests kept waiting for a slot, one close when none waits any more.
        assert signals == ["open:2 requests in flight (concurrency limit)", "close"]
        assert len(upstream.requests) == 4
        await conn.close()
        await upstream.stop()

    run(body())


def test_requests_that_keep_completing_keep_the_breaker_closed_however_long_the_batch() -> None:
    """Saturation is no slot freed for `saturation_s`, not a batch that outlasts it (a slow box)."""

    async def body() -> list[str]:
        signals: list[str] = []
        upstream = Upstream(delay=0.05)
        port = await upstream.start()
        conn = make("http_client", {"url": f"127.0.0.1:{port}", "concurrency": 2}, breaker=signals)
        assert isinstance(conn, HttpClientConnector)
        conn.saturation_s = 0.5
        await conn.connect()
        started = asyncio.get_running_loop().time()
        await conn.send([sink_event({"n": i}, offset=i) for i in range(30)])
        assert asyncio.get_running_loop().time() - started > conn.saturation_s  # waited past it
        assert len(upstream.requests) == 30
        await conn.close()
        await upstream.stop()
        return signals

    assert run(body()) == []


def test_timeout_is_a_retryable_failure() -> None:
    async def body() -> None:
        upstream = Upstream(gate=asyncio.Event())
        port = await upstream.start()
        conn = client(port, timeout=100_000_000)  # 100 ms in nanoseconds
        await conn.connect()
        with pytest.raises(DeliveryFailed, match="timed out"):
            await conn.send([sink_event({"n": 1})])
        assert upstream.gate is not None
        upstream.gate.set()
        await conn.close()
        await upstream.stop()

    run(body())


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"url": "ftp://h:1"}, "config key 'url' must be an http:// or https:// URL"),
        ({"url": "h:1", "concurrency": 0}, "config key 'concurrency' must be an integer >= 1"),
        ({"url": "h:1", "headers": {"a": 1}}, "config key 'headers' values must be strings"),
        ({"url": "h:1", "timeout": "1s"}, "config key 'timeout' must be an integer >= 1"),
        (
            {"url": "h:1", "mime_mapping": {"text/plain": "nope"}},
            "config key 'mime_mapping' 'text/plain': unknown codec 'nope'",
        ),
        (
            {"url": "h:1", "mime_mapping": {"*/*": 1}},
            "config key 'mime_mapping' the codec of '\\*/\\*' must be",
        ),
        ({"url": "http:]//127.0.0.1:8139/x"}, "config key 'url' is not a valid URL"),  # found by fuzzing
    ],
)
def test_config_errors(config: dict, message: str) -> None:
    with pytest.raises(ConnectorConfigError, match=f"connector 'c' \\(http_client\\): {message}"):
        HttpClientConnector.check_config("c", config)


def test_responses_are_not_kept_when_nothing_reads_out() -> None:
    async def body() -> None:
        upstream = Upstream()
        port = await upstream.start()
        conn = make("http_client", {"url": f"127.0.0.1:{port}"}, outputs=frozenset({"err"}))
        assert isinstance(conn, HttpClientConnector)
        await conn.connect()
        # More requests than the response queue holds: nothing waits for a reader that does not exist.
        for start in range(0, 300, 100):
            await conn.send([sink_event({"n": i}, offset=i) for i in range(start, start + 100)])
        assert len(upstream.requests) == 300 and conn.inbox.empty()
        await conn.close()
        await upstream.stop()

    run(body())


def test_a_batch_larger_than_the_concurrency_against_a_fast_server_keeps_the_breaker_closed() -> None:
    async def body() -> list[str]:
        signals: list[str] = []
        upstream = Upstream()
        port = await upstream.start()
        conn = make("http_client", {"url": f"127.0.0.1:{port}", "concurrency": 2}, breaker=signals)
        await conn.connect()
        await conn.send([sink_event({"n": i}, offset=i) for i in range(20)])
        assert len(upstream.requests) == 20
        await conn.close()
        await upstream.stop()
        return signals

    assert run(body()) == []
