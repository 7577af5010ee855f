"""http_server with a real HTTP client (httpx) on 127.0.0.1: responses wait for ack, reply or fail."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest

from contraflow.connectors.base import ConnectorConfigError
from contraflow.connectors.http_server import HttpServerConnector
from tests.connectors.support import make, run, sink_event


async def started() -> HttpServerConnector:
    conn = make("http_server", {"url": "http://127.0.0.1:0"})
    assert isinstance(conn, HttpServerConnector)
    await conn.connect()
    return conn


def test_response_is_sent_only_after_the_ack() -> None:
    async def body() -> None:
        conn = await started()
        async with httpx.AsyncClient() as client:
            call = asyncio.create_task(
                client.post(
                    f"http://127.0.0.1:{conn.port}/ingest?x=1", content=b'{"a":1}', headers={"X-Id": "7"}
                )
            )
            item = await conn.pull()
            assert item is not None and item.data == b'{"a":1}' and item.token is not None
            assert item.meta is not None
            request = item.meta["request"]
            assert request["method"] == "POST"
            assert request["url"]["path"] == "/ingest" and request["url"]["query"] == "x=1"
            assert (request["url"]["host"], request["url"]["port"]) == ("127.0.0.1", conn.port)
            assert request["headers"]["x-id"] == ["7"]
            assert item.meta["http_server"]["request_id"] == item.stream == item.token
            assert item.end_stream  # the body is a whole stream
            await asyncio.sleep(0.2)
            assert not call.done()  # not delivered yet: the client is still waiting
            await conn.ack(item.token)
            response = await asyncio.wait_for(call, 5)
            assert response.status_code == 200 and response.content == b""
        await conn.close()

    run(body())


def test_pipeline_reply_sets_status_headers_and_body() -> None:
    async def body() -> None:
        conn = await started()
        async with httpx.AsyncClient() as client:
            call = asyncio.create_task(client.put(f"http://127.0.0.1:{conn.port}/things/1", content=b"[1,2]"))
            item = await conn.pull()
            assert item is not None and item.meta is not None
            reply_meta = {**item.meta, "response": {"status": 201, "headers": {"x-made-by": ["contraflow"]}}}
            await conn.send([sink_event({"created": 2}, reply_meta, frames=[orjson.dumps({"created": 2})])])
            response = await asyncio.wait_for(call, 5)
            assert response.status_code == 201
            assert response.headers["x-made-by"] == "contraflow"
            assert response.headers["content-type"] == "application/json"
            assert response.json() == {"created": 2}
            await conn.ack(item.token)  # the ack that follows delivery of the reply changes nothing
            await conn.send([sink_event("late", reply_meta)])  # a second reply has no request to go to
            error = await conn.pull()
            assert error is not None and error.port == "err" and error.events is not None
            assert error.events[0][0]["error"] == f"no request {item.token} is waiting for a response"
        await conn.close()

    run(body())


def test_failed_delivery_answers_503_and_empty_get_is_a_null_event() -> None:
    async def body() -> None:
        conn = await started()
        async with httpx.AsyncClient() as client:
            call = asyncio.create_task(client.get(f"http://127.0.0.1:{conn.port}/health"))
            item = await conn.pull()
            assert item is not None and item.data is None
            assert item.events is not None and item.events[0][0] is None
            assert item.events[0][1]["request"]["method"] == "GET"
            await conn.fail(item.token)
            response = await asyncio.wait_for(call, 5)
            assert response.status_code == 503
        await conn.close()

    run(body())


def test_waiting_requests_get_503_when_the_connector_closes() -> None:
    async def body() -> None:
        conn = await started()
        async with httpx.AsyncClient() as client:
            call = asyncio.create_task(client.post(f"http://127.0.0.1:{conn.port}/", content=b"1"))
            assert await conn.pull() is not None
            await conn.close()
            response = await asyncio.wait_for(call, 5)
            assert response.status_code == 503

    run(body())


def test_port_in_use_is_reported_and_config_is_checked() -> None:
    async def body() -> None:
        first = await started()
        second = make("http_server", {"url": f"127.0.0.1:{first.port}"})
        with pytest.raises(Exception, match="cannot listen"):
            await second.connect()
        await first.close()

    run(body())
    with pytest.raises(
        ConnectorConfigError, match="connector 'c' \\(http_server\\): unknown config key 'host'"
    ):
        HttpServerConnector.check_config("c", {"url": "127.0.0.1:1", "host": "x"})
