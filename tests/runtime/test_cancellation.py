"""Undeploying a stuck flow is bounded: a sink whose server never answers, a source whose pull blocks.

The flow's `tcp_client` source is connected to a server that accepts and never
sends (its pull never returns), its metronome feeds a pipeline whose
`http_client` sink posts to that server, which never answers. `DELETE
/v1/flows/{id}` must return within the flow's `cancel` ceiling, report each
tier, leave the other flow running, and leave what was not delivered in the
log for the next start.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from contraflow.api.app import create_app
from contraflow.api.server import ApiServer
from contraflow.errors import UserError
from contraflow.runtime.cancellation import QueryStops, TieredCancel
from contraflow.runtime.channels import channel_topic, consumer_name
from contraflow.runtime.event_stream import EventStream
from contraflow.spu.api import read_topic
from contraflow.spu.client import SpuClient
from tests.runtime.harness import flow_id, read_events, running, troy, wait_for, write_events
from tests.runtime.silent_server import SilentServer, stalled_flow
from tests.runtime.spinning import QUICK, SPIN, alive, kill, running_jobs, spinning_flow, spinning_worker
from tests.runtime.test_contraflow import emitted, metronome_to

CEILING_S = 3.0
SENT = 5


def test_undeploy_of_a_stuck_flow_stays_within_its_ceiling(
    spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path
) -> None:
    server = SilentServer()
    stuck, alive = flow_id("stuck"), flow_id("alive")
    stuck_flow = troy(
        stuck,
        stalled_flow(server, interval_ns=100_000_000),
        args=f'cancel = {{"ceiling_s": {CEILING_S}}}, pipelines = {{"pass": {{"route_in_log": 0}}}}',
    )
    out = tmp_path / "alive.jsonl"
    alive_flow = metronome_to(
        alive, f'create connector sink from lines with path = "{out}", mode = "truncate" end;'
    )
    output = channel_topic(stuck, "pass", "out")

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", alive_flow) as runtime:
            await runtime.deploy(stuck_flow, "<stuck>")
            api_server = ApiServer(create_app(runtime), "127.0.0.1", 0)
            base = f"http://{await api_server.start()}"
            try:
                flow = runtime.flows[stuck]
                await wait_for(
                    lambda: flow.monitor is not None and flow.monitor.states[output].end >= SENT,
                    what="ticks through the pipeline",
                )
                await wait_for(
                    lambda: len(server.connections) >= 2, what="source and sink at the silent server"
                )
                async with httpx.AsyncClient(base_url=base, timeout=30) as api:
                    began = time.monotonic()
                    reply = await api.delete(f"/v1/flows/{stuck}")
                    took = time.monotonic() - began
                assert reply.status_code == 200 and reply.json()["status"] == "stopped"
                assert took < CEILING_S + 0.5, f"undeploy took {took:.2f}s with a ceiling of {CEILING_S}s"
                tiers = [e for e in runtime.events.recent if e.get("flow") == stuck and e["kind"] == "cancel"]
                assert [t["tier"] for t in tiers] == [
                    "cooperative",
                    "cancel_jobs",
                    "stop_queries",
                    "cancel_tasks",
                ]
                assert tiers[0]["outcome"] == "timed out"  # the sink never delivers: no drain
                assert tiers[-1]["total_s"] <= CEILING_S + 0.1
                assert stuck not in runtime.flows

                other = runtime.flows[alive]
                before = emitted(other)
                await wait_for(lambda: emitted(other) > before + 10, what="the other flow to keep running")
            finally:
                await api_server.stop()

    try:
        asyncio.run(scenario())
    finally:
        server.close()
    committed = spu.fetch_offset(consumer_name(stuck, "sink", "in"), output, 0) or 0
    assert committed == 0, "nothing was delivered, so nothing may be committed"
    end = spu.describe_topic(output).partitions[0].high_watermark
    undelivered = [orjson.loads(r.value) for r in read_topic(spu, output)]
    assert end >= SENT and len(undelivered) == end, "the undelivered events must stay in the log"
    assert [e["id"] for e in undelivered] == list(range(end))


def test_a_second_ctrl_c_ends_the_cooperative_tier_at_once() -> None:
    """`cut_short` (set by a second Ctrl-C) ends a drain that would run to its deadline; the next
    tier then has its own budget, as if the drain had timed out."""

    async def scenario() -> tuple[str, float, list[dict[str, Any]]]:
        events = EventStream(None)
        tiers = TieredCancel("f", 100.0, events)
        cut_short = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, cut_short.set)
        began = time.monotonic()
        outcome = await tiers.run("cooperative", asyncio.sleep(60), cut_short)
        took = time.monotonic() - began
        await tiers.run("cancel_jobs", asyncio.sleep(0))
        return outcome, took, list(events.recent)

    outcome, took, events = asyncio.run(scenario())
    assert outcome == "timed out" and took < 5, f"{outcome} after {took:.1f}s"
    assert [(e["tier"], e["outcome"]) for e in events] == [
        ("cooperative", "timed out"),
        ("cancel_jobs", "done"),
    ]
    assert events[1]["deadline_s"] > 90  # up to 95.5 s of the ceiling: nothing used by the cut drain


BUSY_CEILING_S = 10.0


def test_undeploy_cancels_a_busy_spark_batch_and_the_flow_restarts_with_nothing_lost(
    spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path
) -> None:
    """A micro-batch really running in a Spark Python worker: the cooperative tier runs out, the
    job group is cancelled and the worker killed within their tiers, undeploy stays within the
    ceiling; the same flow deployed again processes every input event exactly once."""
    fid = flow_id("busy")
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    sent = write_events(source, 5)
    busy = spinning_flow(fid, source, output, SPIN, BUSY_CEILING_S)
    spun = channel_topic(fid, "spin", "out")
    spinners: list[int] = []

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", busy) as runtime:
            worker = await spinning_worker(runtime, spark, fid)
            spinners.append(worker)
            run_id = runtime.flows[fid].pipelines["spin"].run_id
            began = time.monotonic()
            await runtime.undeploy(fid)
            took = time.monotonic() - began
            assert took < BUSY_CEILING_S + 0.5, f"undeploy took {took:.2f}s"
            # Spark's DAG scheduler ends a cancelled job on its own event loop, after the request
            # returned: on a loaded box the job is still listed for a moment (seen in a clean-clone run).
            await wait_for(lambda: not running_jobs(spark, run_id), 15, "the busy batch's job to end")
            tiers = {
                e["tier"]: e for e in runtime.events.recent if e.get("flow") == fid and e["kind"] == "cancel"
            }
            assert list(tiers) == ["cooperative", "cancel_jobs", "stop_queries", "cancel_tasks"]
            assert tiers["cooperative"]["outcome"] == "timed out"  # the batch never finishes by itself
            assert tiers["cancel_jobs"]["outcome"] == "done"  # within its deadline
            assert tiers["cancel_tasks"]["total_s"] <= BUSY_CEILING_S + 0.1
            await wait_for(lambda: not alive(worker), 15, "the spinning Python worker to be killed")
            assert spu.describe_topic(spun).partitions[0].high_watermark == 0, "no batch may have landed"

            await runtime.deploy(spinning_flow(fid, source, output, QUICK, BUSY_CEILING_S), "<again>")
            await wait_for(lambda: len(read_events(output)) >= len(sent), 120, "the restarted flow's output")
            # Leaving `running` quiesces the flow: its pipeline and sink drain what is in their
            # channels, so anything delivered twice is in the output read below.

    try:
        asyncio.run(scenario())
    finally:
        for worker in spinners:  # left spinning only if the test failed
            kill(worker)
    assert read_events(output) == sent
    assert [orjson.loads(r.value) for r in read_topic(spu, spun)] == sent


def test_a_redeploy_waits_for_a_query_stop_that_outlived_its_tier() -> None:
    """A stop a tier gave up on goes on; starting the same pipeline again waits for it, and is
    refused with a clear error if it takes too long (Spark refuses a second active query)."""

    async def scenario() -> None:
        stops = QueryStops()
        finished = asyncio.Event()

        async def slow_stop() -> None:
            await asyncio.sleep(0.3)
            finished.set()

        tier = TieredCancel("f", 0.1, EventStream(None))
        tracked = stops.track("f/p", slow_stop())
        assert await tier.run("stop_queries", asyncio.shield(tracked)) == "timed out"
        await stops.wait_for("f/p", 5)
        assert finished.is_set()
        await stops.wait_for("f/p", 0)  # nothing under way: at once

        stops.track("f/q", asyncio.sleep(5))
        with pytest.raises(UserError, match="pipeline f/q is still stopping"):
            await stops.wait_for("f/q", 0.1)

    asyncio.run(scenario())
