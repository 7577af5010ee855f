"""Kafka clients against the SPU's Kafka listener, and contraflow's own client, in one run.

Prints one JSON object. RECORDS records of RECORD_BYTES bytes, one partition,
page-cache flushing (the figures measure the protocol path, not the disk); the
SPU runs in a child process (`contraflow spu run --kafka-addr`).

- produce: records/s from the first send to the last acknowledgement.
  kafka: confluent-kafka's Producer (`produce_batch` of BATCH_RECORDS, librdkafka
  batching, linger 5 ms, acks=1).
  own: `AsyncSpuClient.produce` in batches of BATCH_RECORDS, PIPELINE in flight.
- consume: records/s reading every record back from offset 0.
  kafka: confluent-kafka's Consumer (assigned partition, `consume()` batches, up to
  16 MiB per fetch: librdkafka has one fetch in flight per broker, so with a single
  partition the partition's fetch size sets how much each round trip carries).
  own: `AsyncSpuClient.fetch` of 1 MiB after 1 MiB, every value materialised.
- ratio: kafka / own (target >= 0.5 for both).
- produce_tail_ms: how long the last Kafka acknowledgement came after the
  application's last `produce_batch` returned. A few milliseconds mean the SPU
  kept up and the client's own enqueueing set the pace.
- native (only when `kcat` is installed: `apt-get install kcat`): the same
  records produced by kcat, librdkafka's C command-line client with no Python
  layer, from a file of lines with the same producer settings; its rate counts
  the process's start (tens of milliseconds). It tells what librdkafka itself
  reaches against the SPU, so the ratio can be read as the client's or the
  server's doing.
- spu_cpu_us_per_record: CPU time of the SPU process per record in each phase
  (what transcoding Kafka batches costs the server); client_cpu_us_per_record:
  the same for this process (the client, with librdkafka's threads).

The box is shared and its load moves within seconds, so the four phases run
ROUNDS times (5), interleaved (own then Kafka in odd rounds, Kafka then own in even
ones, fresh topics each round), and every figure is the median over the rounds;
`ratios` lists each round's own ratio.

KAFKA_BENCH_RECORDS overrides the record count, KAFKA_BENCH_ROUNDS the rounds.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from contraflow.spu.client import AsyncSpuClient
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.storage import FlushPolicy, TopicConfig

RECORD_BYTES = 200
RECORDS = int(os.environ.get("KAFKA_BENCH_RECORDS", 1_000_000))
ROUNDS = int(os.environ.get("KAFKA_BENCH_ROUNDS", 5))
BATCH_RECORDS = 1000
PIPELINE = 8
FETCH_BYTES = 1 << 20
CONFIG = TopicConfig(segment_bytes=512 << 20, flush=FlushPolicy.never())


PRODUCER_SETTINGS: dict[str, str | int] = {
    "linger.ms": 5,
    "acks": 1,
    "batch.size": 1 << 20,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 1 << 21,
}
KCAT = shutil.which("kcat")


def values() -> list[bytes]:
    return [(b"%012d" % i).ljust(RECORD_BYTES, b"x") for i in range(RECORDS)]


def kafka_produce(bootstrap: str, topic: str, records: list[bytes], tails_ms: list[float]) -> float:
    """Records/s through confluent-kafka; appends the acknowledgement tail to `tails_ms`."""
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS})
    producer.list_topics(topic, timeout=10)  # connected before the clock starts, like the own client
    start = time.perf_counter()
    for first in range(0, RECORDS, BATCH_RECORDS):  # the client's batch call, like the own client's
        chunk = [{"value": value} for value in records[first : first + BATCH_RECORDS]]
        producer.produce_batch(topic, chunk, partition=0)
        producer.poll(0)  # no delivery callbacks to serve: the queue holds every record
    enqueued = time.perf_counter()
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    tails_ms.append((time.perf_counter() - enqueued) * 1e3)
    if remaining:
        raise RuntimeError(f"{remaining} records not acknowledged")
    return RECORDS / elapsed


def native_produce(bootstrap: str, topic: str, lines: Path) -> float:
    """Records/s of kcat producing every line of `lines` (its start included)."""
    assert KCAT is not None
    settings = [arg for key, value in PRODUCER_SETTINGS.items() for arg in ("-X", f"{key}={value}")]
    start = time.perf_counter()
    subprocess.run(
        [KCAT, "-P", "-b", bootstrap, "-t", topic, "-p", "0", *settings, "-l", str(lines)], check=True
    )
    return RECORDS / (time.perf_counter() - start)


def kafka_consume(bootstrap: str, topic: str) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 16 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            # librdkafka pauses fetching for this long whenever its prefetch queue is full
            # (1 s by default): this loop drains the queue in far less, then would sit idle.
            "fetch.queue.backoff.ms": 5,
        }
    )
    consumer.list_topics(topic, timeout=10)  # connected before the clock starts, like the own client
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


async def delete(addr: str, *topics: str) -> None:
    async with AsyncSpuClient(addr) as client:
        for topic in topics:
            await client.delete_topic(topic)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """User + system CPU time of this process (the client, with librdkafka's threads) and of
    the children it waited for (kcat)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime + children.ru_utime + children.ru_stime


def measured(pid: int, run: Callable[[], float]) -> tuple[float, float, float]:
    """(records/s, SPU CPU µs per record, client CPU µs per record) of one phase."""
    spu_before, client_before = cpu_seconds(pid), own_cpu_seconds()
    rate = run()
    spu, client = cpu_seconds(pid) - spu_before, own_cpu_seconds() - client_before
    return rate, spu / RECORDS * 1e6, client / RECORDS * 1e6


Figures = dict[tuple[str, str], tuple[float, float, float]]


def one_round(
    spu: EmbeddedSpu, records: list[bytes], number: int, tails_ms: list[float], lines: Path | None
) -> Figures:
    """Every phase once on fresh topics; own first in odd rounds, Kafka first in even ones
    (the native producer, when there is one, right after the Kafka one)."""
    assert spu.pid is not None
    own, kafka, native = f"own-{number}", f"kafka-{number}", f"native-{number}"
    asyncio.run(create(spu.addr, own, kafka, native))
    phases: dict[tuple[str, str], Callable[[], float]] = {
        ("produce", "own"): lambda: asyncio.run(own_produce(spu.addr, own, records)),
        ("produce", "kafka"): lambda: kafka_produce(spu.kafka_addr, kafka, records, tails_ms),
        ("consume", "own"): lambda: asyncio.run(own_consume(spu.addr, own)),
        ("consume", "kafka"): lambda: kafka_consume(spu.kafka_addr, kafka),
    }
    if lines is not None:
        phases[("produce", "native")] = lambda: native_produce(spu.kafka_addr, native, lines)
    order = ("own", "kafka", "native") if number % 2 else ("kafka", "native", "own")
    figures = {
        (op, side): measured(spu.pid, phases[(op, side)])
        for op in ("produce", "consume")
        for side in order
        if (op, side) in phases
    }
    asyncio.run(delete(spu.addr, own, kafka, native))
    return figures


def summary(rounds: list[Figures], op: str) -> dict[str, object]:
    """Medians over the rounds of one operation's figures, and each round's ratio."""

    def median_of(side: str, field: int) -> float:
        return statistics.median(r[(op, side)][field] for r in rounds)

    ratios = [r[(op, "kafka")][0] / r[(op, "own")][0] for r in rounds]
    result: dict[str, object] = {
        "kafka_records_per_s": round(median_of("kafka", 0)),
        "own_records_per_s": round(median_of("own", 0)),
        "ratio": round(statistics.median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
        "target_ratio": 0.5,
        "spu_cpu_us_per_record_kafka": round(median_of("kafka", 1), 3),
        "spu_cpu_us_per_record_own": round(median_of("own", 1), 3),
        "client_cpu_us_per_record_kafka": round(median_of("kafka", 2), 3),
        "client_cpu_us_per_record_own": round(median_of("own", 2), 3),
    }
    if (op, "native") in rounds[0]:
        native_ratios = [r[(op, "native")][0] / r[(op, "own")][0] for r in rounds]
        result["native"] = {
            "client": "kcat (librdkafka, no Python), process start included",
            "records_per_s": round(median_of("native", 0)),
            "ratio_to_own": round(statistics.median(native_ratios), 3),
            "ratios": [round(r, 3) for r in native_ratios],
            "spu_cpu_us_per_record": round(median_of("native", 1), 3),
            "client_cpu_us_per_record": round(median_of("native", 2), 3),
        }
    return result


def main() -> None:
    records = values()
    tails_ms: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="kafka-bench-") as tmp,
        EmbeddedSpu(Path(tmp) / "data", mode="process", kafka_addr="127.0.0.1:0") as spu,
    ):
        lines = None
        if KCAT is not None:  # the records hold no newline: one line each
            lines = Path(tmp) / "records.txt"
            lines.write_bytes(b"\n".join(records) + b"\n")
        rounds = [one_round(spu, records, number, tails_ms, lines) for number in range(1, ROUNDS + 1)]
    result: dict[str, object] = {"records": RECORDS, "record_bytes": RECORD_BYTES, "rounds": ROUNDS}
    for op in ("produce", "consume"):
        result[op] = summary(rounds, op)
    result["produce_tail_ms"] = [round(t, 1) for t in tails_ms]
    if KCAT is None:
        result["native"] = "kcat not installed (apt-get install kcat): no native librdkafka figure"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
