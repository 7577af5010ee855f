"""Where the `contraflow` source starts and which partitions it reads; the sink's options."""

from __future__ import annotations

import pytest
from pyspark.errors import PySparkException
from pyspark.errors.exceptions.captured import StreamingQueryException

from contraflow.errors import UserError
from contraflow.spark.commit_retry import DEFAULT_COMMIT_RETRY_S
from contraflow.spark.options import SinkOptions, SourceOptions
from contraflow.spu.protocol.topics import TopicConfig


def collect(
    spark, spu_addr: str, topic: str, checkpoint: str, **options: str
) -> list[tuple[int, int, bytes]]:
    """Run the source once (availableNow) into memory and return (partition, offset, value) rows."""
    reader = spark.readStream.format("contraflow").option("spu", spu_addr).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    table = f"rows_{abs(hash((topic, checkpoint)))}"
    query = (
        reader.load()
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = spark.sql(f"select partition, offset, value from {table}").collect()
    return sorted((r.partition, r.offset, bytes(r.value)) for r in rows)


@pytest.fixture()
def two_partitions(spu, topic_name: str) -> str:
    spu.create_topic(topic_name, TopicConfig(partitions=2))
    spu.produce(topic_name, 0, [b"a%d" % i for i in range(10)], timestamps=[1000 + i for i in range(10)])
    spu.produce(topic_name, 1, [b"b%d" % i for i in range(10)], timestamps=[2000 + i for i in range(10)])
    return topic_name


def test_partition_subset_from_explicit_offsets(spark, spu_addr, two_partitions, checkpoint) -> None:
    rows = collect(spark, spu_addr, two_partitions, checkpoint, partitions="1", startingOffsets='{"1": 7}')
    assert rows == [(1, 7, b"b7"), (1, 8, b"b8"), (1, 9, b"b9")]


def test_starting_timestamp_picks_the_first_record_at_or_after_it(
    spark, spu_addr, two_partitions, checkpoint
) -> None:
    rows = collect(spark, spu_addr, two_partitions, checkpoint, startingTimestamp="1008")
    assert [r[2] for r in rows] == [b"a8", b"a9", *(b"b%d" % i for i in range(10))]


def test_latest_skips_what_is_already_there(spark, spu_addr, two_partitions, checkpoint) -> None:
    assert collect(spark, spu_addr, two_partitions, checkpoint, startingOffsets="latest") == []


def test_unknown_partition_is_a_clear_error(spark, spu_addr, two_partitions, checkpoint) -> None:
    with pytest.raises((StreamingQueryException, PySparkException), match=r"has no partition\(s\) \[5\]"):
        collect(spark, spu_addr, two_partitions, checkpoint, partitions="5")


def test_tasks_are_bounded_by_bytes_as_well_as_records(spu, spu_addr: str, topic_name: str) -> None:
    from contraflow.spark.datasource import TopicStreamReader
    from contraflow.spark.options import SourceOptions

    spu.create_topic(topic_name)
    spu.produce(topic_name, 0, [b"x" * 1000 for _ in range(100)])
    options = {"spu": spu_addr, "topic": topic_name}
    roomy = TopicStreamReader(SourceOptions.parse(options))
    tight = TopicStreamReader(SourceOptions.parse({**options, "maxBytesPerTask": "20000"}))
    try:
        start, end = {"0": 0}, {"0": 100}
        assert [(r.start, r.end) for r in roomy.partitions(start, end)] == [(0, 100)]
        ranges = [(r.start, r.end) for r in tight.partitions(start, end)]
        assert len(ranges) >= 5 and ranges[0][0] == 0 and ranges[-1][1] == 100
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))  # no gap, no overlap
        assert all(hi - lo <= 20 for lo, hi in ranges)  # at most 20 kB of 1 kB records each
    finally:
        roomy.stop()
        tight.stop()


def count_rows(batches):
    """A rows transform: each batch becomes one row holding its row count and first offset."""
    import pyarrow as pa

    for batch in batches:
        yield pa.RecordBatch.from_pylist(
            [{"rows": batch.num_rows, "first": batch.column("offset")[0].as_py()}],
            schema=pa.schema([("rows", pa.int64()), ("first", pa.int64())]),
        )


def test_a_rows_transform_runs_in_the_read_task_and_sets_the_schema(
    spark, spu_addr, two_partitions, checkpoint
) -> None:
    from contraflow.spark.transform import transform_options

    reader = spark.readStream.format("contraflow").option("spu", spu_addr).option("topic", two_partitions)
    frame = reader.options(**transform_options(count_rows, "rows bigint, first bigint")).load()
    assert frame.columns == ["rows", "first"]
    query = (
        frame.writeStream.format("memory")
        .queryName("transformed")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = sorted(tuple(r) for r in spark.sql("select rows, first from transformed").collect())
    assert rows == [(10, 0), (10, 0)]  # one batch per partition, every record counted
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    from contraflow.pipeline.spark.listener import records_read

    assert sum(records_read(s) for p in progress for s in p["sources"]) == 20
    assert sum(p["numInputRows"] for p in progress) == 2  # Spark counts what the source yielded


def test_payload_columns_are_the_value_and_the_packed_headers(
    spark, spu, spu_addr, topic_name, checkpoint
) -> None:
    from contraflow.spu.protocol.batch import pack_headers

    spu.create_topic(topic_name, TopicConfig(partitions=1))
    spu.produce(topic_name, 0, [b"v0", b"v1"], headers=[[], [("meta", b'{"m":1}')]])
    spu.produce(topic_name, 0, [b"v2"])  # a batch without a headers column
    query = (
        spark.readStream.format("contraflow")
        .option("spu", spu_addr)
        .option("topic", topic_name)
        .option("columns", "payload")
        .load()
        .writeStream.format("memory")
        .queryName("payload_rows")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    table = spark.table("payload_rows")
    assert table.columns == ["value", "headers"]
    rows = sorted((bytes(r.value), None if r.headers is None else bytes(r.headers)) for r in table.collect())
    assert rows == [(b"v0", pack_headers([])), (b"v1", pack_headers([("meta", b'{"m":1}')])), (b"v2", None)]


def test_an_unknown_columns_option_is_refused(spark, spu_addr, two_partitions, checkpoint) -> None:
    with pytest.raises((PySparkException, StreamingQueryException), match="option columns"):
        collect(spark, spu_addr, two_partitions, checkpoint, columns="some")


def test_available_now_reads_the_whole_backlog_through_a_ramp(
    spark, spu_addr, two_partitions, checkpoint
) -> None:
    """The ramp caps each batch, not the run: Spark's own available-now fallback took the run's
    target from one capped `latestOffset` and ended after the first 3 records."""
    rows = collect(spark, spu_addr, two_partitions, checkpoint, rampRecords="3")
    assert [r[2] for r in rows] == [*(b"a%d" % i for i in range(10)), *(b"b%d" % i for i in range(10))]


def test_the_sinks_commit_retry_timeout_is_a_duration() -> None:
    assert SinkOptions.parse({"commitRetryTimeout": "90s"}).commit_retry_s == 90.0
    assert SinkOptions.parse({}).commit_retry_s == DEFAULT_COMMIT_RETRY_S
    with pytest.raises(UserError, match="option commitRetryTimeout"):
        SinkOptions.parse({"commitRetryTimeout": "soon"})


def test_the_sources_offset_commit_retries_as_long_as_the_sinks_commit() -> None:
    parsed = SourceOptions.parse({"topic": "t", "commitRetryTimeout": "90s"})
    assert parsed.commit_retry_s == 90.0
    assert SourceOptions.parse({"topic": "t"}).commit_retry_s == DEFAULT_COMMIT_RETRY_S
