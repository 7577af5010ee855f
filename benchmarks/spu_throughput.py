"""SPU over loopback TCP against the storage engine in process, and tail latency.

Prints one JSON object. 200-byte records in batches of BATCH_RECORDS, page-cache
flushing (so the figures measure the network path, not the disk):

- produce: records encoded into a batch and appended, records/s.
  in_process: `LocalLog.produce` in this process (one thread).
  loopback: `AsyncSpuClient.produce` (the client encodes, the SPU in a child
  process appends), up to PIPELINE requests in flight, as a batching producer.
- consume: every batch read and each value materialised as a memoryview.
  in_process: `LocalLog.fetch`, 1 MiB reads. loopback: one 1 MiB
  `AsyncSpuClient.fetch` after the other; loopback_stream: a stream fetch (the
  server pushes 1 MiB frames against 8 MiB of credit).
- ratio: loopback / in_process (target >= 0.5); for consume the same fetch
  loop on both sides, ratio_stream for the stream.
- tail_latency: records produced at TAIL_RATE records/s (every millisecond a
  batch of the records due, sent without waiting for the previous answer),
  received by a stream-fetch consumer (committed isolation);
  latency of each batch from just before its produce call to its receipt, in ms
  (target p99 < 10 ms). Both fsync-per-batch and page-cache topics.

Throughput figures are the median of REPEATS runs on fresh topics.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from contraflow.spu.api import LocalLog
from contraflow.spu.client import AsyncSpuClient
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.storage import FlushPolicy, TopicConfig

RECORD_BYTES = 200
BATCH_RECORDS = 1000
RECORDS = 200_000
REPEATS = 5
PIPELINE = 8
FETCH_BYTES = 1 << 20
STREAM_CREDIT = 8 << 20
TAIL_RATE = 10_000
TAIL_SECONDS = 3.0
# The producer sends what is due every tick (one batch, like a 1 ms linger). With an
# fsync per batch, a connection's appends to a partition wait for each other's
# fsync (see docs/spu-server.md), so that producer lingers 5 ms.
TICK_S = {"page_cache": 0.001, "fsync_per_batch": 0.005}
CONFIG = TopicConfig(segment_bytes=256 << 20, flush=FlushPolicy.never())


def record_batches() -> list[list[bytes]]:
    return [
        [(b"%012d" % (b * BATCH_RECORDS + i)).ljust(RECORD_BYTES, b"x") for i in range(BATCH_RECORDS)]
        for b in range(RECORDS // BATCH_RECORDS)
    ]


def rate(records: int, seconds: float) -> float:
    return records / seconds


# -- in process --------------------------------------------------------------------------------------


def in_process(batches: list[list[bytes]], data_dir: Path, run: int) -> tuple[float, float]:
    with LocalLog(data_dir) as log:
        topic = f"local-{run}"
        log.create_topic(topic, CONFIG)
        start = time.perf_counter()
        for batch in batches:
            log.produce(topic, 0, batch)
        produce = rate(RECORDS, time.perf_counter() - start)
        start = time.perf_counter()
        offset, seen = 0, 0
        while offset < RECORDS:
            result = log.fetch(topic, 0, offset, FETCH_BYTES)
            seen += sum(len(b.values()) for b in result.batches)
            offset = result.next_offset
        consume = rate(seen, time.perf_counter() - start)
    return produce, consume


# -- over loopback -----------------------------------------------------------------------------------


async def loopback(batches: list[list[bytes]], addr: str, run: int) -> tuple[float, float, float]:
    async with AsyncSpuClient(addr) as client:
        topic = f"remote-{run}"
        await client.create_topic(topic, CONFIG)
        window = asyncio.Semaphore(PIPELINE)

        async def send(batch: list[bytes]) -> None:
            try:
                await client.produce(topic, 0, batch)
            finally:
                window.release()

        start = time.perf_counter()
        tasks = []
        for batch in batches:
            await window.acquire()
            tasks.append(asyncio.ensure_future(send(batch)))
        await asyncio.gather(*tasks)
        produce = rate(RECORDS, time.perf_counter() - start)
        start = time.perf_counter()
        offset, seen = 0, 0
        while offset < RECORDS:
            result = await client.fetch(topic, 0, offset, FETCH_BYTES)
            seen += sum(len(b.values()) for b in result.batches)
            offset = result.next_offset
        consume_fetch = rate(seen, time.perf_counter() - start)
        start = time.perf_counter()
        seen = 0
        stream = client.stream(topic, 0, 0, max_bytes=FETCH_BYTES, credit_bytes=STREAM_CREDIT)
        async for result in stream:
            seen += sum(len(b.values()) for b in result.batches)
            if result.next_offset >= RECORDS:
                break
        consume_stream = rate(seen, time.perf_counter() - start)
        await stream.close()
    return produce, consume_fetch, consume_stream


async def tail_latency(addr: str, flush: FlushPolicy, name: str, tick_s: float) -> dict[str, float]:
    """Produce a small batch every millisecond; a stream consumer notes when each arrives."""
    async with AsyncSpuClient(addr) as producer, AsyncSpuClient(addr) as consumer:
        await producer.create_topic(name, TopicConfig(flush=flush))
        sent: dict[int, float] = {}
        latencies: list[float] = []
        total_records = int(TAIL_RATE * TAIL_SECONDS)
        stream = consumer.stream(name, 0, 0, isolation="committed")
        await stream.open()

        async def receive() -> None:
            async for result in stream:
                now = time.perf_counter()
                for batch in result.batches:
                    latencies.append(now - sent[batch.base_offset])
                if result.next_offset >= total_records:
                    return

        receiver = asyncio.ensure_future(receive())
        value = b"x" * RECORD_BYTES
        in_flight: set[asyncio.Future[tuple[int, int]]] = set()
        produced = 0
        start = time.perf_counter()
        while produced < total_records:
            await asyncio.sleep(tick_s)
            due = min(total_records, int((time.perf_counter() - start) * TAIL_RATE)) - produced
            if due <= 0:
                continue
            sent[produced] = time.perf_counter()
            request = asyncio.ensure_future(producer.produce(name, 0, [value] * due))
            in_flight.add(request)
            request.add_done_callback(in_flight.discard)
            produced += due
        await asyncio.gather(*in_flight)
        await asyncio.wait_for(receiver, 30)
        elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 3),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 3),
        "max_ms": round(latencies[-1] * 1000, 3),
        "achieved_records_per_s": round(total_records / elapsed),
        "batches": len(latencies),
        "tick_ms": tick_s * 1000,
    }


def median(runs: list[float]) -> float:
    return round(statistics.median(runs))


Runner = Callable[[int], tuple[float, ...]]


def alternate(first: Runner, second: Runner) -> tuple[list[tuple[float, ...]], list[tuple[float, ...]]]:
    """Interleave the two measurements so load from other processes hits both alike."""
    a, b = [], []
    for i in range(REPEATS):
        a.append(first(i))
        b.append(second(i))
    return a, b


def main() -> None:
    batches = record_batches()
    with (
        tempfile.TemporaryDirectory(prefix="spu-bench-") as tmp,
        EmbeddedSpu(Path(tmp) / "served", mode="process") as spu,
    ):

        def local(i: int) -> tuple[float, float]:
            return in_process(batches, Path(tmp) / "local", i)

        def remote(i: int) -> tuple[float, float, float]:
            return asyncio.run(loopback(batches, spu.addr, i))

        def latency(flush: FlushPolicy, name: str) -> Awaitable[dict[str, float]]:
            return tail_latency(spu.addr, flush, name, TICK_S[name])

        local_runs, remote_runs = alternate(local, remote)
        local_produce, local_consume = (median([r[k] for r in local_runs]) for k in (0, 1))
        remote_produce, remote_fetch, remote_stream = (median([r[k] for r in remote_runs]) for k in (0, 1, 2))
        tail_page_cache = asyncio.run(latency(FlushPolicy.never(), "page_cache"))
        tail_fsync = asyncio.run(latency(FlushPolicy.every_batch(), "fsync_per_batch"))
    print(
        json.dumps(
            {
                "benchmark": "spu_throughput",
                "record_bytes": RECORD_BYTES,
                "batch_records": BATCH_RECORDS,
                "records": RECORDS,
                "repeats": REPEATS,
                "flush": "page_cache",
                "produce_records_per_s": {
                    "in_process": local_produce,
                    "loopback": remote_produce,
                    "ratio": round(remote_produce / local_produce, 3),
                    "target_ratio": 0.5,
                },
                "consume_records_per_s": {
                    "in_process": local_consume,
                    "loopback": remote_fetch,
                    "loopback_stream": remote_stream,
                    "ratio": round(remote_fetch / local_consume, 3),
                    "ratio_stream": round(remote_stream / local_consume, 3),
                    "target_ratio": 0.5,
                },
                "tail_latency": {
                    "rate_records_per_s": TAIL_RATE,
                    "isolation": "committed",
                    "page_cache": tail_page_cache,
                    "fsync_per_batch": tail_fsync,
                    "target_p99_ms": 10,
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
