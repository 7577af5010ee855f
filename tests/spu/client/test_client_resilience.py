"""Client behaviour: producer batching (size and linger), reconnect with retries,
a stream that survives an SPU restart."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from tests.spu.spu_harness import running_spu

from contraflow.spu.client import (
    AsyncProducer,
    AsyncSpuClient,
    Producer,
    ProducerSettings,
    RetryPolicy,
    SpuClient,
)
from contraflow.spu.storage import FlushPolicy, TopicConfig


def test_async_producer_batches_by_size_and_linger(tmp_path: Path) -> None:
    async def scenario(addr: str) -> tuple[list[int], int, int]:
        async with AsyncSpuClient(addr) as client:
            await client.create_topic("t", TopicConfig(flush=FlushPolicy.never()))
            producer = AsyncProducer(client, ProducerSettings(batch_bytes=4000, linger_ms=20))
            futures = [await producer.send("t", 0, b"v%04d" % i) for i in range(500)]
            await producer.flush()
            offsets = [f.result() for f in futures]
            lone = await producer.send("t", 0, b"late")
            start = time.perf_counter()
            assert await asyncio.wait_for(lone, 5) == 500  # left on the linger timer
            lingered = time.perf_counter() - start
            result = await client.fetch("t", 0, 0, max_bytes=1 << 20)
            return offsets, len(result.batches), int(lingered * 1000)

    with running_spu(tmp_path / "d") as spu:
        offsets, batches, lingered_ms = asyncio.run(scenario(spu.addr))
    assert offsets == list(range(500))
    assert 2 <= batches <= 30  # 500 records x ~21 bytes in 4000-byte batches, plus the late one
    assert 10 <= lingered_ms < 1000


def test_sync_producer_from_several_threads(tmp_path: Path) -> None:
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        client.create_topic("t", TopicConfig(partitions=2, flush=FlushPolicy.never()))
        producer = Producer(client, ProducerSettings(batch_bytes=2000, linger_ms=5))
        futures: list = []
        lock = threading.Lock()

        def work(n: int) -> None:
            for i in range(200):
                f = producer.send("t", n % 2, b"%d-%d" % (n, i))
                with lock:
                    futures.append(f)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        producer.flush()
        offsets = sorted(f.result(timeout=5) for f in futures)
        assert len(offsets) == 800
        assert client.list_offsets("t", 0, "latest") + client.list_offsets("t", 1, "latest") == 800
        lone = producer.send("t", 0, b"lingering")
        assert lone.result(timeout=5) == 400


def test_client_reconnects_after_an_spu_restart(tmp_path: Path) -> None:
    with running_spu(tmp_path / "d") as spu:
        addr = spu.addr
        client = SpuClient(addr, retry=RetryPolicy(attempts=30, initial_s=0.02, max_s=0.2))
        client.create_topic("t")
        client.produce("t", 0, [b"before"])
    restarted = threading.Event()

    def restart_later() -> None:
        time.sleep(0.3)
        with running_spu(tmp_path / "d", addr=addr):
            restarted.set()
            time.sleep(3)

    helper = threading.Thread(target=restart_later)
    helper.start()
    try:
        assert client.produce("t", 0, [b"after"]) == (1, 1)  # retried until the SPU was back
        assert restarted.is_set()
        result = client.fetch("t", 0, 0)
        assert [r.value for b in result.batches for r in b.records()] == [b"before", b"after"]
    finally:
        client.close()
        helper.join()


def test_stream_resumes_after_an_spu_restart_without_gaps_or_duplicates(tmp_path: Path) -> None:
    retry = RetryPolicy(attempts=40, initial_s=0.02, max_s=0.2)
    with running_spu(tmp_path / "d") as spu:
        addr = spu.addr
        with SpuClient(addr) as admin:
            admin.create_topic("t")
            admin.produce("t", 0, [b"one"])
        consumer = SpuClient(addr, retry=retry)
        stream = consumer.stream("t", 0, 0)
        seen = [r.value for b in next(stream).batches for r in b.records()]
    with running_spu(tmp_path / "d", addr=addr), SpuClient(addr) as admin:
        admin.produce("t", 0, [b"two", b"three"])
        while len(seen) < 3:
            seen += [r.value for b in next(stream).batches for r in b.records()]
        stream.close()
        consumer.close()
    assert seen == [b"one", b"two", b"three"]
