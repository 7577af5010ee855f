"""Kafka clients against the SPU's Kafka listener, and contraflow's own client, in one run.

Prints one JSON object. RECORDS records of RECORD_BYTES bytes, one partition,
page-cache flushing (the figures measure the protocol path, not the disk); the
SPU runs in a child process (`contraflow spu run --kafka-addr`).

- produce: records/s from the first send to the last acknowledgement.
  kafka: confluent-kafka's Producer (librdkafka batching, linger 5 ms, acks=1).
  own: `AsyncSpuClient.produce` in batches of BATCH_RECORDS, PIPELINE in flight.
- consume: records/s reading every record back from offset 0.
  kafka: confluent-kafka's Consumer (assigned partition, `consume()` batches).
  own: `AsyncSpuClient.fetch` of 1 MiB after 1 MiB, every value materialised.
- ratio: kafka / own (target >= 0.5 for both).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from contraflow.spu.client import AsyncSpuClient
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.storage import FlushPolicy, TopicConfig

RECORD_BYTES = 200
RECORDS = 1_000_000
BATCH_RECORDS = 1000
PIPELINE = 8
FETCH_BYTES = 1 << 20
CONFIG = TopicConfig(segment_bytes=512 << 20, flush=FlushPolicy.never())


def values() -> list[bytes]:
    return [(b"%012d" % i).ljust(RECORD_BYTES, b"x") for i in range(RECORDS)]


def kafka_produce(bootstrap: str, topic: str, records: list[bytes]) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": 1,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1 << 21,
        }
    )
    start = time.perf_counter()
    for value in records:
        producer.produce(topic, value, partition=0)
        producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    if remaining:
        raise RuntimeError(f"{remaining} records not acknowledged")
    return RECORDS / elapsed


def kafka_consume(bootstrap: str, topic: str) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 16 << 20,
            "max.partition.fetch.bytes": 4 << 20,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    start = time.perf_counter()
    while seen < RECORDS:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                message.value()
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return seen / elapsed


async def own_produce(addr: str, topic: str, records: list[bytes]) -> float:
    async with AsyncSpuClient(addr) as client:
        window = asyncio.Semaphore(PIPELINE)

        async def send(batch: list[bytes]) -> None:
            try:
                await client.produce(topic, 0, batch)
            finally:
                window.release()

        start = time.perf_counter()
        tasks = []
        for first in range(0, RECORDS, BATCH_RECORDS):
            await window.acquire()
            tasks.append(asyncio.ensure_future(send(records[first : first + BATCH_RECORDS])))
        await asyncio.gather(*tasks)
        return RECORDS / (time.perf_counter() - start)


async def own_consume(addr: str, topic: str) -> float:
    async with AsyncSpuClient(addr) as client:
        offset, seen = 0, 0
        start = time.perf_counter()
        while offset < RECORDS:
            result = await client.fetch(topic, 0, offset, FETCH_BYTES)
            seen += sum(len(b.values()) for b in result.batches)
            offset = result.next_offset
        return seen / (time.perf_counter() - start)


async def create(addr: str, *topics: str) -> None:
    async with AsyncSpuClient(addr) as client:
        for topic in topics:
            await client.create_topic(topic, CONFIG)


def main() -> None:
    records = values()
    with (
        tempfile.TemporaryDirectory(prefix="kafka-bench-") as tmp,
        EmbeddedSpu(Path(tmp) / "data", mode="process", kafka_addr="127.0.0.1:0") as spu,
    ):
        asyncio.run(create(spu.addr, "own", "kafka"))
        own = {"produce": asyncio.run(own_produce(spu.addr, "own", records))}
        kafka = {"produce": kafka_produce(spu.kafka_addr, "kafka", records)}
        own["consume"] = asyncio.run(own_consume(spu.addr, "own"))
        kafka["consume"] = kafka_consume(spu.kafka_addr, "kafka")
    result = {
        "records": RECORDS,
        "record_bytes": RECORD_BYTES,
        **{
            op: {
                "kafka_records_per_s": round(kafka[op]),
                "own_records_per_s": round(own[op]),
                "ratio": round(kafka[op] / own[op], 3),
                "target_ratio": 0.5,
            }
            for op in ("produce", "consume")
        },
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
