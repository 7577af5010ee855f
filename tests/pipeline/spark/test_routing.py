"""Routing-only pipelines on Spark move log batches as envelopes (`contraflow.spark.log_envelopes`).

Each test runs a real routed pipeline with `start_pipeline` between real SPU
topics: it must write exactly what the per-row query (the source's `value` and
packed `headers` through the sink) writes, every record once, in order per
input partition, and a micro-batch Spark replays must add nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contraflow.events import META_HEADER
from contraflow.lang.troy.compiler import compile_source
from contraflow.pipeline.local import compile_query
from contraflow.pipeline.spark.listener import query_listener
from contraflow.spu.api import read_topic
from contraflow.spu.client import SpuClient
from contraflow.spu.protocol.batch import Record
from contraflow.spu.protocol.compression import Compression
from contraflow.spu.protocol.range_stage import MIN_RECORDS
from contraflow.spu.protocol.topics import TopicConfig
from tests.pipeline.spark.harness import SparkPipeline, poll

ROUTE = "select event from in into out;"


@pytest.fixture()
def pipeline(spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path) -> Iterator[Any]:
    made: list[SparkPipeline] = []

    def make(graph: Any, partitions: dict[str, int] | None = None) -> SparkPipeline:
        made.append(SparkPipeline(spark, spu, spu_addr, graph, tmp_path, partitions))
        return made[-1]

    yield make
    for p in made:
        p.stop()


def feed_mixed(spu: SpuClient, topic: str, partition: int) -> list[bytes]:
    """Every kind of stored batch: large ones with and without headers (forwarded as they are),
    small ones (merged), one with keys and one compressed (re-encoded). Returns the values fed."""
    fed: list[bytes] = []

    def produce(count: int, **options: Any) -> None:
        values = [b'{"p":%d,"i":%d}' % (partition, len(fed) + i) for i in range(count)]
        spu.produce(topic, partition, values, **options)
        fed.extend(values)

    big = MIN_RECORDS + 100
    produce(big, headers=[[(META_HEADER, b'{"k":%d}' % i)] if i % 5 else [] for i in range(big)])
    for _ in range(4):
        produce(3)
    produce(big)
    produce(20, keys=[b"key-%d" % i for i in range(20)], headers=[[("x", b"y")]] * 20)
    produce(big, compression=Compression.ZSTD)
    produce(7, headers=[[(META_HEADER, b"{}")]] * 7)
    return fed


def written(records: list[Record]) -> list[tuple[bytes, bytes | None, list[tuple[str, bytes]]]]:
    return [(r.value, r.key, r.headers) for r in records]


def by_partition(records: list[Record]) -> dict[int, list[bytes]]:
    """Output values grouped by the input partition each came from (in output order)."""
    groups: dict[int, list[bytes]] = {}
    for r in records:
        groups.setdefault(int(r.value.split(b",")[0].split(b":")[1]), []).append(r.value)
    return groups


def per_row_query(spark: Any, spu_addr: str, source: str, target: str, checkpoint: str) -> Any:
    """The routed query as it ran before envelopes: one Spark row per event, value and headers."""
    return (
        spark.readStream.format("contraflow")
        .option("spu", spu_addr)
        .option("topic", source)
        .option("columns", "payload")
        .load()
        .writeStream.format("contraflow")
        .option("spu", spu_addr)
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def test_a_routed_pipeline_writes_what_the_per_row_query_writes(
    pipeline, spark, spu: SpuClient, spu_addr: str, tmp_path: Path
) -> None:
    p = pipeline(compile_query(ROUTE), {"in": 2})
    fed = {partition: feed_mixed(spu, p.inputs["in"], partition) for partition in (0, 1)}
    p.start().drain()
    reference = f"{p.prefix}.reference"
    spu.create_topic(reference, TopicConfig(partitions=1))
    per_row_query(spark, spu_addr, p.inputs["in"], reference, str(tmp_path / "reference")).awaitTermination()

    routed, expected = read_topic(spu, p.outputs["out"]), read_topic(spu, reference)
    assert by_partition(routed) == fed  # every record once, in order per input partition
    assert sorted(written(routed)) == sorted(written(expected))  # same values, keys (none), headers
    assert by_partition(expected) == fed
    assert all(r.key is None for r in routed)


def test_records_are_stamped_when_written_without_a_producer(pipeline, spu: SpuClient) -> None:
    p = pipeline(compile_query(ROUTE))
    p.feed(*[{"i": i} for i in range(MIN_RECORDS)])
    fed_at = max(r.timestamp for r in read_topic(spu, p.inputs["in"]))
    p.start().drain()
    out = spu.fetch(p.outputs["out"], 0, 0).batches
    assert all(b.header.producer_id == -1 for b in out)
    assert min(t for b in out for t in b.timestamps()) >= fed_at


TWO_ROUTES = """
define flow main
flow
  define pipeline fork
  from in, control, ignored
  into out, alerts, dropped
  pipeline
    select event from in into out;
    select event from control into alerts;
    select event from ignored into dropped;
  end;
  create pipeline fork;
end;
deploy flow main;
"""


def test_several_inputs_route_to_several_outputs(pipeline, spark, spu: SpuClient) -> None:
    p = pipeline(compile_source(TWO_ROUTES).flows["main"].pipelines["fork"])
    p.outputs = {"out": p.outputs["out"], "alerts": p.outputs["alerts"]}  # `dropped` is not wired
    listener = query_listener(spark)
    p.start()
    p.feed(*[{"in": i} for i in range(MIN_RECORDS + 1)])
    p.feed({"control": "go"}, {"control": "stop"}, port="control")
    p.feed({"ignored": 1}, port="ignored")
    p.drain()
    p.feed({"in": "late"})
    p.drain()
    assert p.values() == [{"in": i} for i in range(MIN_RECORDS + 1)] + [{"in": "late"}]
    assert p.values("alerts") == [{"control": "go"}, {"control": "stop"}]
    assert read_topic(spu, f"{p.prefix}.dropped") == []
    assert p.query.lastProgress["numInputRows"] < 10  # envelopes, not events, crossed the JVM
    # The runtime hears of events, not envelopes (the listener bus is asynchronous).
    reported = poll(lambda: listener.take(str(p.query.runId)), lambda found: bool(found), 30)
    while sum(b.rows_out for b in reported) < MIN_RECORDS + 4:
        more = poll(lambda: listener.take(str(p.query.runId)), lambda found: bool(found), 30)
        assert more, f"the listener reported {reported}"
        reported += more
    assert sum(b.rows_out for b in reported) == MIN_RECORDS + 4  # `ignored` is read, not written


def test_a_micro_batch_spark_replays_adds_nothing(pipeline, spu: SpuClient) -> None:
    """Spark replays a batch whose offsets it logged but whose commit it did not record (what a
    SIGKILL after the sink's SPU commit leaves): the SPU transaction makes the replay a no-op."""
    p = pipeline(compile_query(ROUTE))
    p.start()
    p.feed(*[{"i": i} for i in range(MIN_RECORDS)])
    p.drain()
    p.feed(*[{"i": i} for i in range(MIN_RECORDS, MIN_RECORDS + 10)])
    p.drain()
    p.stop()
    commits = Path(p.checkpoint) / "commits"
    last = max(int(name) for name in os.listdir(commits) if name.isdigit())
    for name in (str(last), f".{last}.crc"):  # the batch is planned (offsets logged) but not committed
        (commits / name).unlink(missing_ok=True)

    p.start()
    p.feed({"i": "after"})
    p.drain()
    assert p.values() == [{"i": i} for i in range(MIN_RECORDS + 10)] + [{"i": "after"}]
    assert (commits / str(last)).exists()  # Spark did run the batch again
