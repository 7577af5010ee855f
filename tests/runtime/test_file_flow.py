"""file -> pipeline (Spark query) -> file, in this process, with acks checkpointing the source; beside
it the same pipeline aliased (no query: its sink reads the source's channel) writes the same lines."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from tests.runtime.harness import flow_id, read_events, running, troy, wait_for, write_events


def test_every_event_arrives_once_in_order_and_the_source_is_acked(spark, spu_addr, tmp_path: Path) -> None:
    sent = write_events(tmp_path / "in.jsonl", 500)
    out, aliased_out = tmp_path / "out.jsonl", tmp_path / "aliased.jsonl"
    fid = flow_id("files")
    source = troy(
        fid,
        f"""
  create connector input from lines with path = "{tmp_path / "in.jsonl"}" end;
  create connector output from lines with path = "{out}", mode = "truncate" end;
  create connector aliased_output from lines with path = "{aliased_out}", mode = "truncate" end;
  create pipeline pass;
  create pipeline aliased from pass;
  connect /connector/input to /pipeline/pass;
  connect /connector/input to /pipeline/aliased;
  connect /pipeline/pass to /connector/output;
  connect /pipeline/aliased to /connector/aliased_output;
""",
        args='pipelines = {"pass": {"trigger_ms": 200, "route_in_log": 0}}',
    )

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", source) as runtime:
            await wait_for(lambda: len(read_events(out)) >= len(sent), what="all events in the sink")
            flow = runtime.flows[fid]
            assert list(flow.pipelines) == ["pass"] and list(flow.aliases.pipelines) == ["aliased"]
            # The flow's `pipelines` arg reached Spark: a batch every 200 ms, not back to back.
            trigger = flow.pipelines["pass"].query._jsq.streamingQuery().trigger().toString()
            assert trigger == "ProcessingTimeTrigger(200)", trigger
            # Acked once delivered by both paths: the file source checkpoints the end of the file.
            await wait_for(lambda: flow.acks["input"].pending == 0, what="acks")
            assert flow.acks["input"].acked > 0 and flow.acks["input"].failed == 0
            status = await runtime.get_flow(fid)
            assert status.status == "running"
            assert {c.alias: c.connectivity for c in status.connectors}["output"] == "connected"
            # Status shows the flow as written; the aliased channel is the source's topic.
            channels = {c.name: c for c in status.channels}
            assert channels["aliased/out"].topic == channels["input/out"].topic
            assert channels["aliased/out"].appended == len(sent)
            metrics = runtime.metrics.registry

            def counted(direction: str) -> float | None:
                labels = {"flow": fid, "pipeline": "aliased", "direction": direction}
                return metrics.get_sample_value("contraflow_pipeline_events_total", labels)

            await wait_for(
                lambda: counted("in") == counted("out") == len(sent), what="the aliased pipeline's counts"
            )

    asyncio.run(scenario())
    assert read_events(out) == sent
    assert aliased_out.read_bytes() == out.read_bytes()  # the same lines, in the same order
    checkpoint = orjson.loads((tmp_path / "data/connectors" / fid / "input" / "input.file.json").read_bytes())
    assert checkpoint["position"] == (tmp_path / "in.jsonl").stat().st_size
