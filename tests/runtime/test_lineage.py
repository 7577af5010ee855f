"""Lineage: the Spark listener's batches, the SPU ledger's outputs, and acks that never precede delivery."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from contraflow.pipeline.local import compile_query
from contraflow.pipeline.spark.listener import (
    BatchProgress,
    QueryListener,
    query_listener,
    records_read,
)
from contraflow.pipeline.spark.query import start_pipeline
from contraflow.pipeline.spark.run import PipelineInput, PipelineRun, topics_by_port
from contraflow.runtime.channels import channel_topic
from contraflow.runtime.lineage import BatchLineage, PipelineLineage, ledger_ends
from contraflow.spark.checkpoint import last_committed_ends, parse_offsets
from contraflow.spu.client import SpuClient
from contraflow.spu.protocol.topics import TopicConfig
from tests.runtime.harness import flow_id, read_events, running, troy, wait_for, write_events

_names = itertools.count()


def test_batches_settle_in_order_and_one_writing_nothing_waits_for_earlier_outputs() -> None:
    lineage = PipelineLineage()
    lineage.add(BatchLineage({"in": 10}, {"out": 7, "err": 1}))
    lineage.add(BatchLineage({"in": 15}, {}))  # wrote nothing (filtered out)
    lineage.add(BatchLineage({"in": 20}, {"out": 12}))
    delivered = {"out": 7, "err": 0}
    lineage.advance(lambda topic: delivered.get(topic, 0))
    assert lineage.frontier("in") == 0 and lineage.consumed("in") == 20 and lineage.pending == 3
    delivered["err"] = 1
    lineage.advance(lambda topic: delivered.get(topic, 0))
    assert lineage.frontier("in") == 15 and lineage.pending == 1
    delivered["out"] = 12
    lineage.advance(lambda topic: delivered.get(topic, 0))
    assert lineage.frontier("in") == 20 and lineage.pending == 0


def test_ledger_and_progress_offsets_are_read_per_topic() -> None:
    assert ledger_ends({("a", 0): 4, ("a", 1): 9, ("b", 0): 2}) == {"a": 9, "b": 2}
    assert ledger_ends(None) == {}
    assert parse_offsets('{"0": 12, "1": 3}') == {0: 12, 1: 3}
    assert parse_offsets({"0": 5}) == {0: 5}
    assert parse_offsets("None") == {} and parse_offsets(None) == {}


def test_a_batch_maps_its_sources_to_topics_in_union_order_or_not_at_all() -> None:
    inputs = [
        PipelineInput("in", "f.a.out", "f.p.in"),
        PipelineInput("ctl", "f.c.out", "f.p.ctl"),
        PipelineInput("in", "f.b.out", "f.p.in"),
    ]
    assert topics_by_port(inputs) == {"in": ["f.a.out", "f.b.out"], "ctl": ["f.c.out"]}
    run = PipelineRun("f", "p", inputs, {"out": "f.p.out"}, None, QueryListener(), "run")

    def batch(*ends: dict[int, int]) -> BatchProgress:
        return BatchProgress("q", "run", 0, ends, 3, 3, 0.1)

    assert run.consumed(batch({0: 4}, {0: 7}, {0: 1})) == {"f.a.out": 4, "f.b.out": 7, "f.c.out": 1}
    assert run.consumed(batch({0: 4}, {0: 7})) is None  # a source Spark left out: unknown, not guessed


def _batches(listener: QueryListener, run_id: str, rows: int, timeout_s: float = 30) -> list[BatchProgress]:
    """The run's batches until they account for `rows` input rows (the listener bus is asynchronous)."""
    taken: list[BatchProgress] = []
    deadline = time.monotonic() + timeout_s
    while sum(b.rows_in for b in taken) < rows:
        assert time.monotonic() < deadline, f"the listener reported {taken}"
        time.sleep(0.1)
        taken += listener.take(run_id)
    return taken


def test_the_listener_reports_each_fan_in_batch_and_the_ledger_its_outputs(
    spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path
) -> None:
    prefix = f"lineage{next(_names)}"
    left, right, out = f"{prefix}.left", f"{prefix}.right", f"{prefix}.out"
    for topic in (left, right, out):
        spu.create_topic(topic, TopicConfig(partitions=1))
    listener = query_listener(spark)
    assert query_listener(spark) is listener, "one listener per session"
    query = start_pipeline(
        spark,
        compile_query('select {"n": event.n, "seen": true} from in into out;'),
        spu=spu_addr,
        inputs={"in": [left, right]},
        outputs={"out": out},
        checkpoint=str(tmp_path / "checkpoint"),
        name=prefix,
        consumer=f"{prefix}.consumer",
    )
    try:
        spu.produce(left, 0, [orjson.dumps({"n": n}) for n in range(120)])
        spu.produce(right, 0, [orjson.dumps({"n": n}) for n in range(120, 200)])
        query.processAllAvailable()
        batches = _batches(listener, str(query.runId), 200)
        assert [b.batch_id for b in batches] == list(range(len(batches)))
        assert all(b.query_id == str(query.id) for b in batches)
        assert batches[-1].input_ends == ({0: 120}, {0: 80})  # sources in the order the port lists them
        assert sum(b.rows_out for b in batches) == 200
        ledger = [spu.ledger(str(query.id), b.batch_id) for b in batches]
        ends = [e[(out, 0)] for e in ledger if e is not None]
        assert ends == sorted(ends) and ends[-1] == 200
        assert spu.describe_topic(out).partitions[0].high_watermark == 200
        spu.produce(right, 0, [orjson.dumps({"n": 200})])
        query.processAllAvailable()
        (late,) = _batches(listener, str(query.runId), 1)
        assert late.input_ends == ({0: 120}, {0: 81}) and late.batch_id == batches[-1].batch_id + 1
        assert spu.ledger(str(query.id), late.batch_id) == {(out, 0): 201}
    finally:
        query.stop()
    assert sorted(orjson.loads(value)["n"] for value in _values(spu, out)) == list(range(201))
    # Spark commits the last batch's offsets to the source only when it plans another one;
    # the checkpoint knows where a restarted query's earlier batches ended.
    assert spu.fetch_offset(f"{prefix}.consumer", right, 0) == 80
    assert last_committed_ends(tmp_path / "checkpoint") == ({0: 120}, {0: 81})


def _values(spu: SpuClient, topic: str) -> list[bytes]:
    values: list[bytes] = []
    offset, end = 0, spu.describe_topic(topic).partitions[0].high_watermark
    while offset < end:
        result = spu.fetch(topic, 0, offset)
        values += [bytes(r.value) for b in result.batches for r in b.records(start_offset=offset)]
        offset = result.next_offset
    return values


def test_a_failed_query_is_reported_by_the_listener(
    spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path
) -> None:
    topic = f"lineage{next(_names)}.in"
    spu.create_topic(topic, TopicConfig(partitions=1))
    listener = query_listener(spark)
    query = start_pipeline(
        spark,
        compile_query("select event from in into out;"),
        spu=spu_addr,
        inputs={"in": topic},
        outputs={"out": f"{topic}.missing"},  # never created: the sink fails the batch
        checkpoint=str(tmp_path / "checkpoint"),
        name=f"{topic}-failing",
        consumer="failing",
    )
    spu.produce(topic, 0, [b'{"n": 1}'])
    deadline = time.monotonic() + 60
    while listener.failure(str(query.runId)) is None:
        assert time.monotonic() < deadline, "no failure reported"
        time.sleep(0.2)
    assert "missing" in (listener.failure(str(query.runId)) or "")
    assert not query.isActive


def _file_flow(fid: str, inputs: list[Path], out: Path, args: str = "") -> str:
    sources = "\n".join(
        f'  create connector in{i} from lines with path = "{path}" end;\n'
        f"  connect /connector/in{i} to /pipeline/pass;"
        for i, path in enumerate(inputs)
    )
    return troy(
        fid,
        f"""
{sources}
  create connector output from lines with path = "{out}", mode = "truncate" end;
  create pipeline pass;
  connect /pipeline/pass to /connector/output;
""",
        args=args,
    )


def _checkpoint(data: Path, fid: str, alias: str) -> int:
    path = data / "connectors" / fid / alias / f"{alias}.file.json"
    return int(orjson.loads(path.read_bytes())["position"]) if path.exists() else 0


@pytest.mark.parametrize("aliased", [False, True], ids=["query", "aliased"])
def test_acks_wait_until_the_pipeline_output_is_delivered(
    spark: Any, spu_addr: str, tmp_path: Path, aliased: bool
) -> None:
    """Through a Spark query (its batches' lineage) and aliased (the sink reads the source's channel)."""
    sent = write_events(tmp_path / "in.jsonl", 300)
    out, data = tmp_path / "out.jsonl", tmp_path / "data"
    fid = flow_id("lineage")
    args = "" if aliased else 'pipelines = {"pass": {"route_in_log": 0}}'

    async def scenario() -> None:
        async with running(
            spu_addr, spark, data, _file_flow(fid, [tmp_path / "in.jsonl"], out, args)
        ) as runtime:
            flow = runtime.flows[fid]
            await flow.set_connector_paused("output", True)  # before the first micro-batch ends
            assert flow.monitor is not None
            states = flow.monitor.states
            processed = channel_topic(fid, "in0" if aliased else "pass", "out")
            assert (processed in states) and (channel_topic(fid, "pass", "out") in states) != aliased
            await wait_for(lambda: states[processed].end == len(sent), what="the pipeline's output")
            await asyncio.sleep(1.0)  # ten monitor ticks: acks would have happened by now
            assert read_events(out) == [] and flow.acks["in0"].acked == 0 and flow.acks["in0"].pending > 0
            assert _checkpoint(data, fid, "in0") == 0
            if not aliased:
                assert flow.monitor.lineage["pass"].consumed(channel_topic(fid, "in0", "out")) == len(sent)

            await flow.set_connector_paused("output", False)
            await wait_for(lambda: flow.acks["in0"].pending == 0, what="acks after delivery")
            assert read_events(out) == sent and flow.acks["in0"].failed == 0

    asyncio.run(scenario())
    assert _checkpoint(data, fid, "in0") == (tmp_path / "in.jsonl").stat().st_size


def test_fan_in_two_sources_into_one_port_deliver_every_event_once(
    spark: Any, spu_addr: str, tmp_path: Path
) -> None:
    first = write_events(tmp_path / "a.jsonl", 200)
    second = write_events(tmp_path / "b.jsonl", 150, start=1000)
    out, data = tmp_path / "out.jsonl", tmp_path / "data"
    fid = flow_id("fanin")
    source = _file_flow(fid, [tmp_path / "a.jsonl", tmp_path / "b.jsonl"], out)

    async def scenario() -> None:
        async with running(spu_addr, spark, data, source) as runtime:
            flow = runtime.flows[fid]
            assert [i.topic for i in flow.pipelines["pass"].inputs] == [
                channel_topic(fid, "in0", "out"),
                channel_topic(fid, "in1", "out"),
            ]
            await wait_for(lambda: len(read_events(out)) >= 350, what="both sources' events in the sink")
            await wait_for(
                lambda: flow.acks["in0"].pending == 0 and flow.acks["in1"].pending == 0, what="acks"
            )

    asyncio.run(scenario())
    received = read_events(out)
    assert sorted(received, key=lambda e: e["n"]) == first + second
    assert [e for e in received if e["n"] < 1000] == first, "one source's events were reordered"
    assert _checkpoint(data, fid, "in0") == (tmp_path / "a.jsonl").stat().st_size
    assert _checkpoint(data, fid, "in1") == (tmp_path / "b.jsonl").stat().st_size


def test_records_read_is_the_advance_of_the_offsets_not_the_rows_spark_saw() -> None:
    source = {"startOffset": '{"0": 5, "1": 2}', "endOffset": '{"0": 15, "1": 2, "2": 4}', "numInputRows": 3}
    assert records_read(source) == 10 + 0 + 4
    # A new query's first batch: from offset 0, not its rows (a read task's envelopes are rows).
    assert records_read({"startOffset": None, "endOffset": '{"0": 9, "1": 3}', "numInputRows": 2}) == 12
