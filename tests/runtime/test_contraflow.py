"""Contraflow on real sockets: controlled start, the circuit breaker of an HTTP sink, pause/resume over the API."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx

from contraflow.api.app import create_app
from contraflow.api.server import ApiServer
from contraflow.runtime.channels import channel_topic
from contraflow.runtime.flow import FlowInstance
from tests.runtime.harness import flow_id, read_events, running, troy, wait_for
from tests.runtime.http_target import Target

TICK_NS = 20_000_000  # the metronome emits 50 events per second


def metronome_to(fid: str, sink: str) -> str:
    return troy(
        fid,
        f"""
  define connector ticks from metronome with config = {{"interval": {TICK_NS}}} end;
  create connector ticks;
  {sink}
  create pipeline pass;
  connect /connector/ticks to /pipeline/pass;
  connect /pipeline/pass to /connector/sink;
""",
    )


def http_sink(url: str) -> str:
    return f"""
  define connector poster from http_client
  with codec = "json", config = {{"url": "{url}"}},
       reconnect = {{"retry": {{"interval_ms": 100, "growth_rate": 1, "max_retries": 1000}}}}
  end;
  create connector sink from poster;
"""


def emitted(flow: FlowInstance, alias: str = "ticks") -> int:
    return flow.connectors[alias].ctx.metrics.by_port.get("out", [0])[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_sources_wait_for_their_sinks_and_stop_while_the_breaker_is_open(
    spark, spu, spu_addr, tmp_path: Path
) -> None:
    target = Target()
    target.port = free_port()  # nothing listens yet: controlled start must hold the source
    fid = flow_id("breaker")

    async def scenario() -> None:
        async with running(
            spu_addr, spark, tmp_path / "data", metronome_to(fid, http_sink(target.url))
        ) as runtime:
            flow = runtime.flows[fid]
            await asyncio.sleep(1.5)
            assert emitted(flow) == 0 and "sink" in flow.breakers
            assert spu.describe_topic(channel_topic(fid, "ticks", "out")).partitions[0].high_watermark == 0
            assert any("sink" in why for why in flow.connectors["ticks"].gate.reasons)

            target.start()
            await wait_for(lambda: len(target.received()) >= 30, what="events at the HTTP server")
            assert not flow.breakers

            target.stop()  # the sink's server goes down
            await wait_for(
                lambda: "connection lost" in flow.breakers.get("sink", ""), what="the breaker to open"
            )
            await asyncio.sleep(0.3)
            stopped_at = emitted(flow)
            await asyncio.sleep(1.5)
            assert emitted(flow) == stopped_at, "the source kept pulling with the breaker open"

            target.start()
            await wait_for(lambda: not flow.breakers, what="the breaker to close")
            await wait_for(lambda: emitted(flow) > stopped_at + 20, what="the source to resume")
        total = emitted(flow)
        ids = {e["id"] for e in target.received()}  # type: ignore[index]
        assert ids == set(range(total)), f"lost {sorted(set(range(total)) - ids)[:10]}"

    try:
        asyncio.run(scenario())
    finally:
        target.stop()


def test_pause_and_resume_over_the_api_stop_and_restart_the_flow(spark, spu_addr, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    fid = flow_id("pausing")
    sink = f'create connector sink from lines with path = "{out}", mode = "truncate" end;'

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", metronome_to(fid, sink)) as runtime:
            server = ApiServer(create_app(runtime), "127.0.0.1", 0)
            base = f"http://{await server.start()}"
            flow = runtime.flows[fid]
            # A routing-only pipeline runs no query: its sink reads the source's channel, and the
            # flow's pause must hold that delivery as it holds a query's.
            assert "pass" in flow.aliases.pipelines and not flow.pipelines
            try:
                async with httpx.AsyncClient(base_url=base) as api:
                    await wait_for(lambda: len(read_events(out)) >= 10, what="first events in the file")
                    reply = await api.patch(f"/v1/flows/{fid}", json={"status": "paused"})
                    assert reply.status_code == 200 and reply.json()["status"] == "paused"
                    await asyncio.sleep(0.5)  # a pull or a delivery already under way completes
                    paused_at = emitted(flow)
                    lines_at = len(read_events(out))
                    await asyncio.sleep(1.5)
                    assert emitted(flow) == paused_at and len(read_events(out)) == lines_at
                    assert (await api.get(f"/v1/flows/{fid}")).json()["status"] == "paused"

                    reply = await api.patch(f"/v1/flows/{fid}", json={"status": "running"})
                    assert reply.status_code == 200 and reply.json()["status"] == "running"
                    await wait_for(lambda: len(read_events(out)) > lines_at + 10, what="events after resume")
            finally:
                await server.stop()
        ids = [e["id"] for e in read_events(out)]
        assert ids == list(range(emitted(flow))), "events lost or reordered across pause/resume"

    asyncio.run(scenario())


def test_exhausted_retries_send_events_to_the_err_port(spark, spu_addr, tmp_path: Path) -> None:
    target = Target(status=503).start()  # always "unavailable": retryable, never delivered
    failed = tmp_path / "failed.jsonl"
    fid = flow_id("retries")
    source = troy(
        fid,
        f"""
  define connector ticks from metronome with config = {{"interval": 200000000}} end;
  create connector ticks;
  {http_sink(target.url)}
  create connector failed from lines with path = "{failed}", mode = "truncate" end;
  create pipeline pass;
  define pipeline errors pipeline select event from in into out; end;
  create pipeline errors;
  connect /connector/ticks to /pipeline/pass;
  connect /pipeline/pass to /connector/sink;
  connect /connector/sink/err to /pipeline/errors;
  connect /pipeline/errors to /connector/failed;
""",
        args='delivery = {"retries": 2, "backoff_ms": 20}',
    )

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", source):
            await wait_for(
                lambda: len(read_events(failed)) >= 3, what="error events for undeliverable events"
            )
        errors = read_events(failed)
        assert [e["event"]["id"] for e in errors[:3]] == [0, 1, 2]
        assert all("503" in e["error"] and e["connector"] == f"{fid}/sink" for e in errors)
        assert target.attempts >= 3 * len(errors[:3])  # first try + 2 retries each

    try:
        asyncio.run(scenario())
    finally:
        target.stop()
