"""Runtime events on a real flow: streamed at `/v1/events`, kept in `contraflow.events`, reflected in `/v1/flows`."""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path
from typing import Any

import httpx
import orjson

from contraflow.api.app import create_app
from contraflow.api.server import ApiServer
from contraflow.runtime.channels import channel_topic, consumer_name
from contraflow.runtime.event_stream import EVENTS_TOPIC, EventStream
from contraflow.spu.api import read_topic
from contraflow.spu.client import SpuClient
from tests.cli_process import run_cli
from tests.runtime.harness import flow_id, running, troy, wait_for, write_events
from tests.runtime.http_target import Target
from tests.runtime.spinning import SPIN, kill, spinning_flow, spinning_worker
from tests.runtime.test_contraflow import free_port, http_sink

TICK_NS = 20_000_000  # 50 events per second


async def collect_sse(api: httpx.AsyncClient, path: str, into: list[dict[str, Any]]) -> None:
    """Append every `data:` line of a Server-Sent Events stream to `into` until cancelled."""
    async with api.stream("GET", path, timeout=None) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        async for line in reply.aiter_lines():
            if line.startswith("data:"):
                into.append(orjson.loads(line.removeprefix("data:").strip()))


def kinds(events: list[dict[str, Any]], kind: str, **fields: Any) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind and all(e.get(k) == v for k, v in fields.items())]


def test_transitions_are_streamed_logged_to_the_topic_and_shown_in_flows(
    spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path
) -> None:
    target = Target()
    target.port = free_port()
    target.start()
    fid = flow_id("events")
    other = flow_id("quiet")
    source = troy(
        fid,
        f"""
  define connector ticks from metronome with config = {{"interval": {TICK_NS}}} end;
  create connector ticks;
  {http_sink(target.url)}
  create pipeline pass;
  connect /connector/ticks to /pipeline/pass;
  connect /pipeline/pass to /connector/sink;
""",
        # `pass` stays a Spark query: its micro-batches land several events at once, so back-pressure
        # (depth >= 3) comes at once; aliased, an http sink keeps up with 50 events/s and it came by chance.
        args='channels = {"default": {"capacity": 3}}, pipelines = {"pass": {"route_in_log": 0}}',
    )

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", source) as runtime:
            server = ApiServer(create_app(runtime), "127.0.0.1", 0)
            base = f"http://{await server.start()}"
            mine: list[dict[str, Any]] = []
            everything: list[dict[str, Any]] = []
            async with httpx.AsyncClient(base_url=base) as api:
                readers = [
                    asyncio.create_task(collect_sse(api, f"/v1/events?flow={fid}", mine)),
                    asyncio.create_task(collect_sse(api, "/v1/events", everything)),
                ]
                try:
                    await wait_for(lambda: bool(kinds(mine, "deploy")), what="the deploy event (history)")
                    await wait_for(
                        lambda: bool(kinds(mine, "breaker", connector="sink", state="closed")),
                        what="the sink's breaker closing once connected",
                    )
                    await wait_for(
                        lambda: bool(kinds(mine, "backpressure", state="on")), what="back-pressure on"
                    )
                    on = kinds(mine, "backpressure", state="on")[0]
                    assert on["depth"] >= 3 and on["channel"] in ("ticks/out", "pass/out")
                    await wait_for(
                        lambda: bool(kinds(mine, "backpressure", state="off")), what="back-pressure off"
                    )

                    target.stop()
                    await wait_for(
                        lambda: bool(kinds(mine, "breaker", connector="sink", state="open")),
                        what="the breaker opening",
                    )
                    opened = kinds(mine, "breaker", state="open")[-1]
                    # Issue 32: the cause follows the colon (it was missing: `POST http://...: `)
                    assert re.fullmatch(r"connection lost: POST http://\S+: \S.*", opened["reason"]), opened

                    flows = (await api.get("/v1/flows")).json()
                    report = next(f for f in flows if f["alias"] == fid)
                    assert report["breakers"]["sink"]["state"] == "open"
                    assert report["breakers"]["sink"]["reason"] == opened["reason"]
                    assert report["breakers"]["ticks"] == {"state": "closed", "reason": None}
                    assert report["priority"] == "normal"
                    channels = {c["name"]: c for c in report["channels"]}
                    assert set(channels) == {"ticks/out", "pass/out"}
                    assert channels["ticks/out"]["source"] == {
                        "kind": "connector",
                        "alias": "ticks",
                        "port": "out",
                    }
                    assert channels["ticks/out"]["readers"] == [
                        {"kind": "pipeline", "alias": "pass", "port": "in"}
                    ]
                    assert channels["ticks/out"]["appended"] > 0
                    assert all(
                        isinstance(c["depth"], int) and isinstance(c["backpressure"], bool)
                        for c in channels.values()
                    )
                    connector = (await api.get(f"/v1/flows/{fid}/connectors/ticks")).json()
                    assert any("breaker open: sink" in why for why in connector["held_by"])

                    target.start()
                    await wait_for(
                        lambda: len(kinds(mine, "breaker", connector="sink", state="closed")) >= 2,
                        what="the breaker closing again",
                    )
                    assert (await api.patch(f"/v1/flows/{fid}", json={"status": "paused"})).status_code == 200
                    assert (
                        await api.patch(f"/v1/flows/{fid}", json={"status": "running"})
                    ).status_code == 200
                    await wait_for(lambda: bool(kinds(mine, "resume")), what="pause and resume events")
                    assert (
                        kinds(mine, "pause")
                        and kinds(mine, "pause")[0]["seq"] < kinds(mine, "resume")[0]["seq"]
                    )

                    await runtime.deploy(
                        troy(
                            other, 'create connector sink from lines with path = "x", mode = "truncate" end;'
                        ),
                        "<t>",
                    )
                    await wait_for(lambda: bool(kinds(everything, "deploy", flow=other)), what="other deploy")
                    await runtime.undeploy(other)
                    await wait_for(lambda: bool(kinds(everything, "undeploy", flow=other)), what="undeploy")
                    assert all(e.get("flow") == fid for e in mine), "the flow filter let others through"
                finally:
                    for reader in readers:
                        reader.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await reader
                    await server.stop()
            for event in mine:
                assert event["ts"].endswith("Z") and isinstance(event["ts_ms"], int)

    try:
        asyncio.run(scenario())
    finally:
        target.stop()
    logged = [orjson.loads(r.value) for r in read_topic(spu, EVENTS_TOPIC)]
    ours = [e for e in logged if e.get("flow") == fid]
    assert {"deploy", "breaker", "backpressure", "pause", "resume"} <= {e["kind"] for e in ours}
    assert [e["seq"] for e in ours] == sorted(e["seq"] for e in ours)


def test_sequence_numbers_and_last_event_id_carry_over_a_restart(spu_addr: str) -> None:
    """A runtime that starts again continues `seq` after the topic's last event, and a subscriber
    resuming from an id of the earlier run gets the rest of that run, then the new events."""
    topic = f"events.restart{flow_id('')}"

    async def scenario() -> None:
        first = EventStream(spu_addr, topic)
        await first.open()
        for n in range(4):
            first.emit("pause", f"f{n}")
        await first.close()

        second = EventStream(spu_addr, topic)
        await second.open()
        assert [e["seq"] for e in second.recent] == [1, 2, 3, 4]
        resumed = second.subscribe(after=2)
        got = [await anext(resumed), await anext(resumed)]
        second.emit("resume", "f0")
        got.append(await anext(resumed))
        await resumed.aclose()
        await second.close()
        assert [(e["seq"], e["kind"], e["flow"]) for e in got] == [
            (3, "pause", "f2"),
            (4, "pause", "f3"),
            (5, "resume", "f0"),
        ]

    asyncio.run(scenario())
    shown = run_cli("consume", topic, "-B", "-d", "--spu", spu_addr)  # the history, as a person reads it
    assert shown.returncode == 0, shown.stderr
    assert [orjson.loads(line)["seq"] for line in shown.stdout.splitlines()] == [1, 2, 3, 4, 5]


def test_a_failed_micro_batch_is_an_event_and_its_input_stays_in_the_log(
    spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path
) -> None:
    """The Python worker running a micro-batch is killed (SIGKILL): the batch fails, which is a
    `batch_failed` event naming the flow, the pipeline and the error, streamed and appended to
    `contraflow.events`; the flow is `failed` and its input is still in the log, unconsumed."""
    fid = flow_id("failing")
    source = tmp_path / "in.jsonl"
    sent = write_events(source, 5)
    flow = spinning_flow(fid, source, tmp_path / "out.jsonl", SPIN, 10.0)
    read_from = channel_topic(fid, "input", "out")

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", flow) as runtime:
            streamed: list[dict[str, Any]] = []

            async def subscriber() -> None:
                async for event in runtime.events.subscribe(flow=fid, history=0):
                    streamed.append(event)

            listening = asyncio.create_task(subscriber())
            kill(await spinning_worker(runtime, spark, fid))
            await wait_for(lambda: bool(kinds(streamed, "batch_failed")), 120, "the batch_failed event")
            listening.cancel()
            [failed] = kinds(streamed, "batch_failed")
            assert failed["pipeline"] == "spin", failed
            assert "Python worker exited unexpectedly" in failed["error"], failed
            assert "\tat " not in failed["error"], "the event carries the error, not its stack"
            assert isinstance(failed["ts_ms"], int)
            assert (await runtime.get_flow(fid)).status == "failed"
            assert (runtime.flows[fid].error or "").startswith(f"pipeline spin: {failed['error']}")
            await runtime.events.flush()

    asyncio.run(scenario())
    logged = [orjson.loads(r.value) for r in read_topic(spu, EVENTS_TOPIC)]
    assert [e["pipeline"] for e in logged if e.get("flow") == fid and e["kind"] == "batch_failed"] == ["spin"]
    assert spu.describe_topic(channel_topic(fid, "spin", "out")).partitions[0].high_watermark == 0
    assert [orjson.loads(r.value) for r in read_topic(spu, read_from)] == sent
    assert not spu.fetch_offset(consumer_name(fid, "spin", "in"), read_from, 0), "the input was not consumed"
