"""The `contraflow` format on a real local Spark session against a real SPU."""

from __future__ import annotations

import orjson
from pyspark.sql import functions as F

from contraflow.spu.api import read_topic
from contraflow.spu.client import SpuClient
from contraflow.spu.protocol.topics import TopicConfig


def read_all(spu: SpuClient, topic: str) -> list[bytes]:
    return [bytes(r.value) for r in read_topic(spu, topic)]


def test_passthrough_copies_every_record_once(spark, spu, spu_addr, topic_name, checkpoint) -> None:
    src, dst = topic_name + "-in", topic_name + "-out"
    spu.create_topic(src, TopicConfig(partitions=2))
    spu.create_topic(dst, TopicConfig(partitions=1))
    sent = [f"event-{i}".encode() for i in range(500)]
    spu.produce(src, 0, sent[:250])
    spu.produce(src, 1, sent[250:])
    stream = spark.readStream.format("contraflow").option("spu", spu_addr).option("topic", src).load()
    query = (
        stream.select("value")
        .writeStream.format("contraflow")
        .option("spu", spu_addr)
        .option("topic", dst)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    query.processAllAvailable()
    spu.produce(src, 0, [b"late"])
    query.processAllAvailable()
    query.stop()
    assert sorted(read_all(spu, dst)) == sorted([*sent, b"late"])


def test_json_parse_and_filter(spark, spu, spu_addr, topic_name, checkpoint) -> None:
    src, dst = topic_name + "-in", topic_name + "-out"
    spu.create_topic(src)
    spu.create_topic(dst)
    events = [{"level": "error" if i % 3 == 0 else "info", "n": i} for i in range(90)]
    spu.produce(src, 0, [orjson.dumps(e) for e in events])
    schema = "level string, n long"
    parsed = (
        spark.readStream.format("contraflow")
        .option("spu", spu_addr)
        .option("topic", src)
        .load()
        .select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
        .where("e.level = 'error'")
        .select(F.to_json("e").alias("value"))
    )
    query = (
        parsed.writeStream.format("contraflow")
        .option("spu", spu_addr)
        .option("topic", dst)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    query.processAllAvailable()
    query.stop()
    got = sorted(orjson.loads(v)["n"] for v in read_all(spu, dst))
    assert got == [e["n"] for e in events if e["level"] == "error"]


def test_one_query_routes_rows_to_several_topics_with_headers(
    spark, spu, spu_addr, topic_name, checkpoint
) -> None:
    src, good, bad = topic_name + "-in", topic_name + "-good", topic_name + "-bad"
    for name in (src, good, bad):
        spu.create_topic(name)
    spu.produce(src, 0, [b"%d" % i for i in range(20)], headers=[[("n", b"%d" % i)] for i in range(20)])
    rows = (
        spark.readStream.format("contraflow")
        .option("spu", spu_addr)
        .option("topic", src)
        .load()
        .select(
            "value",
            "headers",
            F.when(F.col("value").cast("string").cast("int") % 4 == 0, F.lit(bad))
            .otherwise(F.lit(good))
            .alias("topic"),
        )
    )
    query = (
        rows.writeStream.format("contraflow")
        .option("spu", spu_addr)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    query.processAllAvailable()
    query.stop()
    assert sorted(int(v) for v in read_all(spu, bad)) == [0, 4, 8, 12, 16]
    assert len(read_all(spu, good)) == 15
    [batch] = spu.fetch(bad, 0, 0).batches
    assert [dict(h)["n"] for h in batch.headers()] == [r.value for r in batch.records()]
