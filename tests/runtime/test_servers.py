"""Request/response through a pipeline: a TCP echo and an HTTP server answering with the pipeline's output."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import orjson

from tests.runtime.harness import flow_id, running, troy
from tests.runtime.test_contraflow import free_port


def echo_flow(fid: str, kind: str, url: str, codec_settings: str) -> str:
    return troy(
        fid,
        f"""
  define connector server from {kind} with codec = "json", {codec_settings} config = {{"url": "{url}"}} end;
  create connector server;
  create pipeline pass;
  connect /connector/server to /pipeline/pass;
  connect /pipeline/pass to /connector/server;
""",
    )


async def listening(port: int) -> None:
    """Wait until the flow's server accepts connections (it binds once the flow started)."""
    for _ in range(300):
        try:
            (await asyncio.open_connection("127.0.0.1", port))[1].close()
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port}")


def test_tcp_echo_answers_each_connection_on_its_own(spark, spu_addr, tmp_path: Path) -> None:
    port = free_port()
    fid = flow_id("echo")
    source = echo_flow(
        fid, "tcp_server", f"127.0.0.1:{port}", 'preprocessors = ["separate"], postprocessors = ["separate"],'
    )

    async def client(name: str, count: int) -> list[dict[str, object]]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # One write with several lines and a line split across writes: framing is per connection.
        writer.write(b"".join(orjson.dumps({"from": name, "n": i}) + b"\n" for i in range(count - 1)))
        last = orjson.dumps({"from": name, "n": count - 1})
        writer.write(last[:5])
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(last[5:] + b"\n")
        await writer.drain()
        lines = [orjson.loads(await asyncio.wait_for(reader.readline(), 60)) for _ in range(count)]
        writer.close()
        return lines

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", source):
            await listening(port)
            a, b = await asyncio.gather(client("a", 5), client("b", 3))
        assert a == [{"from": "a", "n": i} for i in range(5)]
        assert b == [{"from": "b", "n": i} for i in range(3)]

    asyncio.run(scenario())


def test_http_server_replies_with_what_the_pipeline_made_of_the_request(
    spark, spu_addr, tmp_path: Path
) -> None:
    port = free_port()
    fid = flow_id("http")
    source = echo_flow(fid, "http_server", f"http://127.0.0.1:{port}", "")

    async def scenario() -> None:
        async with (
            running(spu_addr, spark, tmp_path / "data", source),
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http,
        ):
            await listening(port)
            replies = await asyncio.gather(*(http.post("/x", json={"ask": i}) for i in range(3)))
        assert [r.status_code for r in replies] == [200, 200, 200]
        assert [r.json() for r in replies] == [{"ask": i} for i in range(3)]

    asyncio.run(scenario())
