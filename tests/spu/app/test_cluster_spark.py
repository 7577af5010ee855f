"""A bare Spark Structured Streaming query (the `contraflow` source and sink) between
two replicated topics of a 3-SPU cluster, with the leader of an output partition
SIGKILLed mid-stream and restarted: every input record is in the output exactly once,
and the query never stopped. Every task writes to both output partitions (of two
leaders), so each micro-batch's commit spans leaders."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F
from tests.spu.cluster_harness import local_cluster, partition_state, wait_for

from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import Acks
from contraflow.spu.protocol.topics import TopicConfig

REPLICATED = TopicConfig(
    partitions=2, replication_factor=3, min_in_sync_replicas=2, replica_lag_time_max_ms=1000
)
CHUNKS, CHUNK = 40, 25  # 1000 records over about 10 s


def committed_values(client: SpuClient, topic: str, partitions: list[int] | None = None) -> list[bytes]:
    out: list[bytes] = []
    for p in range(REPLICATED.partitions) if partitions is None else partitions:
        end = client.list_offsets(topic, p, "latest", isolation="committed")
        offset = 0
        while offset < end:
            result = client.fetch(topic, p, offset, 1 << 20, isolation="committed")
            out += [bytes(v) for b in result.batches for v in b.values()]
            offset = result.next_offset
    return out


def produce_slowly(client: SpuClient, sent: list[bytes]) -> None:
    for n in range(CHUNKS):
        chunk = [f"event-{n}-{i}".encode() for i in range(CHUNK)]
        client.produce("events", n % 2, chunk, acks=Acks.COMMITTED)
        sent += chunk
        time.sleep(0.25)


def test_a_spark_query_survives_a_leader_sigkill_with_every_record_once(spark: Any, tmp_path: Path) -> None:
    with local_cluster(tmp_path / "cluster") as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("copies", REPLICATED)
        client.create_topic("events", REPLICATED)
        source = (
            spark.readStream.format("contraflow").option("spu", cluster.bootstrap).option("topic", "events")
        )
        query = (
            source.load()
            .select("value", (F.crc32("value") % 2).cast("int").alias("partition"))
            .writeStream.format("contraflow")
            .option("spu", cluster.bootstrap)
            .option("topic", "copies")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        sent: list[bytes] = []
        producer = threading.Thread(target=produce_slowly, args=(SpuClient(cluster.bootstrap), sent))
        try:
            producer.start()
            wait_for("the first copies", lambda: len(committed_values(client, "copies")) > 0, 60)
            killed = partition_state(cluster, "copies", 0)[0]
            cluster.signal(f"spu-{killed}", signal.SIGKILL)
            wait_for("a new leader", lambda: partition_state(cluster, "copies", 0)[0] not in (killed, -1))
            time.sleep(2)
            cluster.start_spu(killed)
            producer.join()
            wait_for(
                "every record copied",
                lambda: query.exception() is not None or len(committed_values(client, "copies")) >= len(sent),
                90,
            )
            assert query.exception() is None and query.isActive
        finally:
            producer.join()
            query.stop()
        copies = committed_values(client, "copies")
        assert len(copies) == len(sent) == CHUNKS * CHUNK
        assert sorted(copies) == sorted(sent), "every record once: nothing lost, nothing twice"
        assert len(committed_values(client, "copies", [0])) not in (0, len(sent)), "both partitions written"
