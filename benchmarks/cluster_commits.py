"""Exactly-once commits on a cluster: a micro-batch's stage + commit at replication factor 3
against factor 1, same cluster, same run.

Prints one JSON object. A controller and three SPUs run as child processes on
loopback (`LocalCluster`); two topics of two partitions (led by different SPUs),
one with replication factor 3 and min_in_sync_replicas 2, one with factor 1.
Each micro-batch stages one record batch of BATCH_RECORDS records of
RECORD_BYTES per partition (as two Spark tasks would) and commits it
(`commit(..., partitions=...)`: one commit per partition at its leader, answered
once replicated). Figures: median and p90 ms per micro-batch over BATCHES
batches, the factors alternating; ratio = rf3 median / rf1 median. There is no
target: it says what replicating the staging and the commit costs a writer.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from contraflow.spu.cli.local_cluster import LocalCluster
from contraflow.spu.client import SpuClient
from contraflow.spu.protocol.batch import encode_batch
from contraflow.spu.storage import TopicConfig

RECORD_BYTES = 200
BATCH_RECORDS = 1000
BATCHES = 40
PARTITIONS = 2
FACTORS = {
    "rf3": TopicConfig(partitions=PARTITIONS, replication_factor=3, min_in_sync_replicas=2),
    "rf1": TopicConfig(partitions=PARTITIONS),
}


def micro_batch(client: SpuClient, topic: str, batch_id: int, records: bytes) -> float:
    began = time.perf_counter()
    for p in range(PARTITIONS):
        client.stage("bench-query", batch_id, topic, p, records, writer=str(p), sequence=0)
    client.commit("bench-query", batch_id, partitions={(topic, p): 1 for p in range(PARTITIONS)})
    return (time.perf_counter() - began) * 1000


def main() -> None:
    records = encode_batch([(b"%012d" % i).ljust(RECORD_BYTES, b"x") for i in range(BATCH_RECORDS)])
    samples: dict[str, list[float]] = {name: [] for name in FACTORS}
    with tempfile.TemporaryDirectory() as root:
        cluster = LocalCluster(Path(root))
        cluster.start(3)
        try:
            with SpuClient(cluster.bootstrap) as client:
                for name, config in FACTORS.items():
                    client.create_topic(name, config)
                    micro_batch(client, name, 0, records)  # connections and routes, not timed
                for batch_id in range(1, BATCHES + 1):
                    for name in FACTORS:
                        samples[name].append(micro_batch(client, name, batch_id, records))
        finally:
            cluster.stop()
    figures = {
        name: {
            "median_ms": round(statistics.median(s), 2),
            "p90_ms": round(statistics.quantiles(s, n=10)[-1], 2),
        }
        for name, s in samples.items()
    }
    ratio = figures["rf3"]["median_ms"] / figures["rf1"]["median_ms"]
    print(
        json.dumps(
            {
                "figure": "stage+commit ms per micro-batch (2 partitions x 1000 records of 200 B)",
                **figures,
                "baseline": "rf1",
                "ratio": round(ratio, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
