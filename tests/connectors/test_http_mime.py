"""Tremor's `mime_mapping` on http_server (httpx as the client) and http_client (a real HTTP server):
each body is decoded and encoded with the codec of its Content-Type."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import yaml

from contraflow.connectors.base.asgiserver import AsgiServer, Receive, Scope, Send
from contraflow.connectors.http_client import HttpClientConnector
from contraflow.connectors.http_server import HttpServerConnector
from tests.connectors.support import make, run, sink_event

MAPPING = {"application/json": "json", "application/yaml": "yaml", "*/*": "string"}


async def pulled(inbox_owner: HttpServerConnector | HttpClientConnector) -> Any:
    item = await asyncio.wait_for(inbox_owner.pull(), 5)
    assert item is not None
    return item


def test_server_decodes_each_request_and_encodes_each_reply_by_content_type() -> None:
    async def body() -> None:
        conn = make("http_server", {"url": "http://127.0.0.1:0", "mime_mapping": MAPPING})
        assert isinstance(conn, HttpServerConnector)
        await conn.connect()
        url = f"http://127.0.0.1:{conn.port}/"
        async with httpx.AsyncClient() as client:

            def post(content: bytes, content_type: str) -> asyncio.Task[httpx.Response]:
                return asyncio.create_task(
                    client.post(url, content=content, headers={"content-type": content_type})
                )

            as_yaml = post(b"a: 1\nb: [x]\n", "Application/YAML; charset=utf-8")
            item = await pulled(conn)  # the yaml codec made the event, the token is the request's
            assert item.data is None and item.token == item.stream
            assert [value for value, _ in item.events] == [{"a": 1, "b": ["x"]}]
            meta = item.events[0][1]
            yaml_reply = {**meta, "response": {"headers": {"content-type": "application/yaml"}}}
            await conn.send([sink_event({"ok": [1, 2]}, yaml_reply)])  # frames are json: re-encoded
            answer = await asyncio.wait_for(as_yaml, 5)
            assert answer.headers["content-type"] == "application/yaml"
            assert yaml.safe_load(answer.content) == {"ok": [1, 2]}

            as_text = post(b"hello", "text/plain")  # not listed: `*/*`
            item = await pulled(conn)
            assert [value for value, _ in item.events] == ["hello"]
            await conn.ack(item.token)
            assert (await asyncio.wait_for(as_text, 5)).status_code == 200

            as_json = post(b'{"j":1}', "application/json")  # the connector's own codec: the runtime's path
            item = await pulled(conn)
            assert item.data == b'{"j":1}' and item.events is None
            await conn.send([sink_event({"j": 2}, item.meta, frames=[b'{"j":2}\n'])])
            answer = await asyncio.wait_for(as_json, 5)
            assert answer.content == b'{"j":2}\n' and answer.headers["content-type"] == "application/json"

            broken = post(b"a: [", "application/yaml")
            error = await pulled(conn)  # the frame that failed goes to err, with the request's meta
            assert error.port == "err" and "invalid yaml" in error.events[0][0]["error"]
            assert error.events[0][0]["data"] == "a: [" and error.token is None
            item = await pulled(conn)
            assert item.events == [] and item.token is not None  # no event, but acked once err has it
            await conn.ack(item.token)
            assert (await asyncio.wait_for(broken, 5)).status_code == 200
        await conn.close()

    run(body())


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers with the request's body and Content-Type."""
    message = await receive()
    content_type = dict(scope["headers"]).get(b"content-type", b"")
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]})
    await send({"type": "http.response.body", "body": message.get("body", b"")})


def test_client_encodes_each_request_and_decodes_each_response_by_content_type() -> None:
    async def body() -> None:
        upstream = AsgiServer(echo, "127.0.0.1", 0)
        await upstream.start()
        config = {"url": f"http://127.0.0.1:{upstream.port}/", "mime_mapping": MAPPING}
        conn = make("http_client", config)
        assert isinstance(conn, HttpClientConnector)
        await conn.connect()
        as_yaml = {"http_client": {"request": {"headers": {"Content-Type": "application/yaml"}}}}
        await conn.send([sink_event({"n": [1, 2]}, as_yaml, offset=0)])
        item = await pulled(conn)  # the body went as yaml and came back as yaml: the same value
        assert [value for value, _ in item.events] == [{"n": [1, 2]}]
        assert item.events[0][1]["http_client"]["response"]["headers"]["content-type"] == ["application/yaml"]
        await conn.send([sink_event({"n": 3}, offset=1)])  # no header: the codec's type, json as it is
        item = await pulled(conn)
        assert item.data == orjson.dumps({"n": 3}) + b"\n" and item.events is None
        await conn.close()
        await upstream.stop()

    run(body())
