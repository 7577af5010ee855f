"""Replication cost: acks=all at replication factor 3 against factor 1, same cluster, same run.

Prints one JSON object. A controller and three SPUs run as child processes on
loopback (`LocalCluster`); two topics, one with replication factor 3 and
min_in_sync_replicas 2, one with factor 1, both with the default flush policy
(fsync every batch: what acks=all promises is durable on every in-sync replica).

- throughput: RECORDS records of RECORD_BYTES in batches of BATCH_RECORDS,
  produced with acks=all by `AsyncSpuClient` (idempotent, as by default in a
  cluster) with up to PIPELINE requests in flight; records/s, median of REPEATS
  runs on fresh topics, the two factors alternating. ratio = rf3 / rf1 (target >= 0.5).
- latency: LATENCY_RATE records/s for LATENCY_SECONDS (a batch of the records due
  every TICK_S, sent without waiting for the previous answer); each batch's time
  from just before its produce call to its acks=all answer, in ms.
  p99_ratio = rf3 p99 / rf1 p99 (target <= 3).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from contraflow.spu.cli.local_cluster import LocalCluster
from contraflow.spu.client import AsyncSpuClient
from contraflow.spu.protocol import Acks
from contraflow.spu.storage import TopicConfig

RECORD_BYTES = 200
BATCH_RECORDS = 1000
RECORDS = 100_000
PIPELINE = 8
REPEATS = 3
LATENCY_RATE = 10_000
LATENCY_SECONDS = 3.0
TICK_S = 0.005
FACTORS = {"rf3": TopicConfig(replication_factor=3, min_in_sync_replicas=2), "rf1": TopicConfig()}


def batches(count: int, size: int) -> list[list[bytes]]:
    return [
        [(b"%012d" % (b * size + i)).ljust(RECORD_BYTES, b"x") for i in range(size)] for b in range(count)
    ]


async def throughput(client: AsyncSpuClient, topic: str, data: list[list[bytes]]) -> float:
    slots = asyncio.Semaphore(PIPELINE)

    async def send(batch: list[bytes]) -> None:
        async with slots:
            await client.produce(topic, 0, batch, acks=Acks.COMMITTED)

    began = time.perf_counter()
    await asyncio.gather(*(send(b) for b in data))
    return sum(len(b) for b in data) / (time.perf_counter() - began)


async def latency(client: AsyncSpuClient, topic: str) -> dict[str, float]:
    per_tick = int(LATENCY_RATE * TICK_S)
    ticks = int(LATENCY_SECONDS / TICK_S)
    data = batches(ticks, per_tick)
    samples: list[float] = []

    async def send(batch: list[bytes]) -> None:
        began = time.perf_counter()
        await client.produce(topic, 0, batch, acks=Acks.COMMITTED)
        samples.append((time.perf_counter() - began) * 1000)

    tasks = []
    start = time.perf_counter()
    for n, batch in enumerate(data):
        await asyncio.sleep(max(0.0, start + n * TICK_S - time.perf_counter()))
        tasks.append(asyncio.ensure_future(send(batch)))
    await asyncio.gather(*tasks)
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1], 2),
    }


async def measure(bootstrap: str) -> dict[str, object]:
    data = batches(RECORDS // BATCH_RECORDS, BATCH_RECORDS)
    rates: dict[str, list[float]] = {name: [] for name in FACTORS}
    tails: dict[str, dict[str, float]] = {}
    async with AsyncSpuClient(bootstrap) as client:
        for run in range(REPEATS):
            order = list(FACTORS) if run % 2 == 0 else list(reversed(FACTORS))
            for name in order:
                topic = f"{name}-{run}"
                await client.create_topic(topic, FACTORS[name])
                rates[name].append(await throughput(client, topic, data))
        for name, config in FACTORS.items():
            topic = f"{name}-latency"
            await client.create_topic(topic, config)
            tails[name] = await latency(client, topic)
    rf3, rf1 = statistics.median(rates["rf3"]), statistics.median(rates["rf1"])
    return {
        "benchmark": "replication",
        "records": RECORDS,
        "record_bytes": RECORD_BYTES,
        "produce_acks_all_records_per_s": {"rf3": round(rf3), "rf1": round(rf1)},
        "throughput_ratio": round(rf3 / rf1, 3),
        "throughput_target": ">= 0.5",
        "latency_at_10k_records_per_s": tails,
        "p99_ratio": round(tails["rf3"]["p99_ms"] / tails["rf1"]["p99_ms"], 3),
        "p99_target": "<= 3",
        "runs": {name: [round(r) for r in values] for name, values in rates.items()},
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp))
        cluster.start(3)
        try:
            result = asyncio.run(measure(cluster.bootstrap))
        finally:
            cluster.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
