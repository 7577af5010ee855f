"""A sink task whose output is larger than one connection may stage (the SPU's
`max_staged_bytes`) spreads its stage requests over several connections, and the
micro-batch still commits every row once, in the writer's order."""

from __future__ import annotations

from pathlib import Path

from contraflow.spark.staging import ConnectionStager, StageRequest
from contraflow.spu.api import read_topic
from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.storage import TopicConfig, encode_batch
from tests.spu.spu_harness import running_spu, small_limits

# What the SPU lets one connection hold staged, and what the writer puts on one connection.
STAGED_LIMIT = 1_000_000
PER_CONNECTION = 800_000
# The sink gets rows in Arrow batches of Spark's `arrow.maxRecordsPerBatch` (10k): one stage
# request each, about 500 kB with these records.
RECORDS = 50_000
RECORDS_PER_LOG_BATCH = 10_000
RECORD = b"r%08d-" + b"x" * 40


def test_a_task_larger_than_a_connections_staging_limit_commits_every_row_once(
    spark, tmp_path: Path, topic_name: str, checkpoint: str
) -> None:
    src, dst = topic_name + "-in", topic_name + "-out"
    sent = [RECORD % i for i in range(RECORDS)]
    assert len(b"".join(sent)) > 2 * STAGED_LIMIT, "more than one connection may stage"
    limits = small_limits(max_staged_bytes=STAGED_LIMIT)
    with running_spu(tmp_path / "spu", limits=limits) as spu, SpuClient(spu.addr) as client:
        client.create_topic(src, TopicConfig(partitions=1))
        client.create_topic(dst, TopicConfig(partitions=1))
        for start in range(0, len(sent), RECORDS_PER_LOG_BATCH):
            client.produce(src, 0, sent[start : start + RECORDS_PER_LOG_BATCH])
        stream = spark.readStream.format("contraflow").option("spu", spu.addr).option("topic", src).load()
        query = (
            stream.select("value")
            .writeStream.format("contraflow")
            .option("spu", spu.addr)
            .option("topic", dst)
            .option("stageBytesPerConnection", str(PER_CONNECTION))
            .option("checkpointLocation", checkpoint)
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None
        assert [bytes(r.value) for r in read_topic(client, dst)] == sent


def test_the_stager_moves_to_a_new_connection_before_one_would_go_over(tmp_path: Path) -> None:
    limits = small_limits(max_staged_bytes=3_000)
    with running_spu(tmp_path / "spu", limits=limits) as spu, SpuClient(spu.addr) as client:
        client.create_topic("out", TopicConfig(partitions=1))
        batches = [encode_batch([b"%d" % i + b"x" * 1000]) for i in range(5)]
        with SpuClient(spu.addr) as alone:  # one connection: refused at the third batch
            for sequence, batch in enumerate(batches[:2]):
                alone.stage("q", 1, "out", 0, batch, writer="w", sequence=sequence)
            try:
                alone.stage("q", 1, "out", 0, batches[2], writer="w", sequence=2)
            except SpuError as err:
                assert err.code == ErrorCode.TOO_MANY_REQUESTS
            else:
                raise AssertionError("the SPU took more than a connection's staging limit")
            alone.abort("q", 1)

        stager = ConnectionStager(lambda: SpuClient(spu.addr), bytes_per_connection=2_500, in_flight=2)
        try:
            for sequence, batch in enumerate(batches):
                stager.stage(batch, StageRequest("q", 2, "out", 0, "w", 0), sequence=sequence)
            stager.finish()
        finally:
            stager.close()
        assert stager.connections == 3
        client.commit("q", 2, expected_batches=5)
        assert [bytes(r.value)[:1] for r in read_topic(client, "out")] == [b"0", b"1", b"2", b"3", b"4"]
