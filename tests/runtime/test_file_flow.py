"""file -> pipeline (Spark query) -> file, in this process, with acks checkpointing the source."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from tests.runtime.harness import files_through_pass, flow_id, read_events, running, wait_for, write_events


def test_every_event_arrives_once_in_order_and_the_source_is_acked(spark, spu_addr, tmp_path: Path) -> None:
    sent = write_events(tmp_path / "in.jsonl", 500)
    out = tmp_path / "out.jsonl"
    fid = flow_id("files")
    source = files_through_pass(
        fid, tmp_path / "in.jsonl", out, args='pipelines = {"pass": {"trigger_ms": 200, "route_in_log": 0}}'
    )

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", source) as runtime:
            await wait_for(lambda: len(read_events(out)) >= len(sent), what="all events in the sink")
            flow = runtime.flows[fid]
            # The flow's `pipelines` arg reached Spark: a batch every 200 ms, not back to back.
            trigger = flow.pipelines["pass"].query._jsq.streamingQuery().trigger().toString()
            assert trigger == "ProcessingTimeTrigger(200)", trigger
            # Acked once delivered: the file source checkpoints the end of the file.
            await wait_for(lambda: flow.acks["input"].pending == 0, what="acks")
            assert flow.acks["input"].acked > 0 and flow.acks["input"].failed == 0
            status = await runtime.get_flow(fid)
            assert status.status == "running"
            assert {c.alias: c.connectivity for c in status.connectors}["output"] == "connected"

    asyncio.run(scenario())
    assert read_events(out) == sent
    checkpoint = orjson.loads((tmp_path / "data/connectors" / fid / "input" / "input.file.json").read_bytes())
    assert checkpoint["position"] == (tmp_path / "in.jsonl").stat().st_size
