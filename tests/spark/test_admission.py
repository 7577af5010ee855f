"""Admission control: Spark's read limits and the runtime's credit on the SPU."""

from __future__ import annotations

from contraflow import control
from tests.spark.test_bridge import read_all


def start_copy(spark, spu_addr: str, src: str, dst: str, checkpoint: str, **source_options: str):
    reader = spark.readStream.format("contraflow").option("spu", spu_addr).option("topic", src)
    for key, value in source_options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .select("value")
        .writeStream.format("contraflow")
        .option("spu", spu_addr)
        .option("topic", dst)
        .option("checkpointLocation", checkpoint)
        .start()
    )


def input_rows(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress]


def source_and_sink(spu, topic_name: str, values: list[bytes]) -> tuple[str, str]:
    """A source topic holding `values` in partition 0, and an empty topic to copy them to."""
    src, dst = topic_name + "-in", topic_name + "-out"
    spu.create_topic(src)
    spu.create_topic(dst)
    spu.produce(src, 0, values)
    return src, dst


def copy_all(spark, spu_addr: str, src: str, dst: str, checkpoint: str, **source_options: str):
    """Copy everything `src` holds now, then stop; the stopped query keeps its progress."""
    query = start_copy(spark, spu_addr, src, dst, checkpoint, **source_options)
    query.processAllAvailable()
    query.stop()
    return query


def test_max_offsets_per_trigger_bounds_every_batch(spark, spu, spu_addr, topic_name, checkpoint) -> None:
    src, dst = source_and_sink(spu, topic_name, [b"x%d" % i for i in range(1000)])
    query = copy_all(spark, spu_addr, src, dst, checkpoint, maxOffsetsPerTrigger="150")
    rows = [n for n in input_rows(query) if n]
    assert max(rows) == 150 and sum(rows) == 1000
    assert len(read_all(spu, dst)) == 1000


def test_a_ramp_starts_small_over_a_backlog_and_doubles(spark, spu, spu_addr, topic_name, checkpoint) -> None:
    src, dst = source_and_sink(spu, topic_name, [b"r%d" % i for i in range(1000)])
    query = copy_all(spark, spu_addr, src, dst, checkpoint, rampRecords="100")
    rows = [n for n in input_rows(query) if n]
    assert rows == [100, 200, 400, 300]  # 100 first, doubling while more waited, the rest last
    assert len(read_all(spu, dst)) == 1000


def test_zero_credit_pauses_and_restored_credit_resumes(spark, spu, spu_addr, topic_name, checkpoint) -> None:
    src, dst = source_and_sink(spu, topic_name, [b"y%d" % i for i in range(300)])
    credit = control.credit("copier", src)
    credit.set(spu, 0)
    assert credit.get(spu) == 0
    query = start_copy(spark, spu_addr, src, dst, checkpoint, consumer="copier")
    query.processAllAvailable()
    assert read_all(spu, dst) == []
    assert sum(input_rows(query)) == 0
    credit.set(spu, 120)
    query.processAllAvailable()
    assert max(input_rows(query)) == 120
    credit.set(spu, None)
    query.processAllAvailable()
    query.stop()
    assert sorted(read_all(spu, dst)) == sorted(b"y%d" % i for i in range(300))
    # Spark commits a batch's source offsets when it plans the next batch, so the
    # consumer offset on the SPU trails by at most the last micro-batch.
    last_batch = [n for n in input_rows(query) if n][-1]
    assert 300 - last_batch <= spu.fetch_offset("copier", src, 0) <= 300


def test_min_partitions_splits_one_partition_over_several_tasks(
    spark, spu, spu_addr, topic_name, checkpoint
) -> None:
    src, dst = source_and_sink(spu, topic_name, [b"m%d" % i for i in range(900)])
    copy_all(spark, spu_addr, src, dst, checkpoint, minPartitions="3")
    # One staged batch per task, all into partition 0; tasks commit in any order (stateful
    # pipelines, the only ones the runtime spreads, put events back in offset order themselves).
    copied = read_all(spu, dst)
    assert sorted(copied) == sorted(b"m%d" % i for i in range(900))
    assert len(spu.fetch(dst, 0, 0).batches) >= 3
