"""Stream fetch: pushes to a tailing consumer, flow-control credit, isolation."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from tests.spu.spu_harness import RawConnection, running_spu

from contraflow.spu.client import AsyncSpuClient, SpuClient
from contraflow.spu.protocol import ApiKey, ErrorCode, SpuError, encode_frame
from contraflow.spu.storage import FlushPolicy, TopicConfig, encode_batch, iter_batches


def test_tailing_consumer_gets_a_new_record_within_milliseconds(tmp_path: Path) -> None:
    async def scenario(addr: str) -> list[float]:
        async with AsyncSpuClient(addr) as producer, AsyncSpuClient(addr) as consumer:
            await producer.create_topic("tail", TopicConfig(flush=FlushPolicy.never()))
            await producer.produce("tail", 0, [b"old"])
            stream = aiter(consumer.stream("tail", 0, 0))
            first = await anext(stream)
            assert [r.value for b in first.batches for r in b.records()] == [b"old"]
            latencies = []
            for i in range(20):
                sent = time.perf_counter()
                await producer.produce("tail", 0, [b"new-%d" % i])
                got = await asyncio.wait_for(anext(stream), 5)
                latencies.append(time.perf_counter() - sent)
                assert [r.value for b in got.batches for r in b.records()] == [b"new-%d" % i]
                assert got.batches[0].base_offset == i + 1
            await stream.aclose()  # type: ignore[attr-defined]
            return latencies

    with running_spu(tmp_path / "d") as spu:
        latencies = asyncio.run(scenario(spu.addr))
    latencies.sort()
    assert latencies[len(latencies) // 2] < 0.05, latencies  # typically ~1 ms on loopback


def test_stream_stops_at_zero_credit_and_resumes_when_granted(tmp_path: Path) -> None:
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        client.create_topic("t", TopicConfig(flush=FlushPolicy.never()))
        raw = RawConnection(spu.addr)
        opened = raw.request(
            ApiKey.STREAM_FETCH, {"topic": "t", "partition": 0, "offset": 0, "credit_bytes": 1}, cid=42
        )
        assert opened["error"] == 0 and opened["offset"] == 0
        client.produce("t", 0, [b"first"])
        fields, payload, cid = raw.receive()  # one batch overshoots the 1-byte credit
        assert cid == 42 and fields["next_offset"] == 1
        assert [r.value for b in iter_batches(payload) for r in b.records()] == [b"first"]
        client.produce("t", 0, [b"second"])
        raw.sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            raw.receive()  # no credit left: nothing is pushed
        raw.sock.settimeout(5)
        raw.send(encode_frame(ApiKey.STREAM_CREDIT, 0, 43, {"stream_id": 42, "credit_bytes": 1 << 20}))
        fields, payload, cid = raw.receive()
        assert cid == 42 and [r.value for b in iter_batches(payload) for r in b.records()] == [b"second"]
        assert raw.request(ApiKey.STREAM_CLOSE, {"stream_id": 42}, cid=44)["error"] == 0
        assert (
            raw.request(ApiKey.STREAM_CLOSE, {"stream_id": 42}, cid=45)["error"] == ErrorCode.UNKNOWN_STREAM
        )
        raw.close()


def test_committed_stream_waits_for_the_high_watermark(tmp_path: Path) -> None:
    """With an interval flush policy data is visible uncommitted at once, committed after the fsync."""

    async def scenario(addr: str) -> tuple[float, float]:
        async with AsyncSpuClient(addr) as client:
            await client.create_topic("t", TopicConfig(flush=FlushPolicy.every_ms(300)))
            uncommitted = aiter(client.stream("t", 0, 0, isolation="uncommitted"))
            committed = aiter(client.stream("t", 0, 0, isolation="committed"))
            start = time.perf_counter()
            await client.produce("t", 0, [b"v"])
            await asyncio.wait_for(anext(uncommitted), 5)
            fast = time.perf_counter() - start
            got = await asyncio.wait_for(anext(committed), 5)
            slow = time.perf_counter() - start
            assert got.high_watermark == 1
            return fast, slow

    with running_spu(tmp_path / "d") as spu:
        fast, slow = asyncio.run(scenario(spu.addr))
    assert fast < 0.2 and slow >= 0.25


def test_deleting_the_topic_ends_its_streams_with_an_error(tmp_path: Path) -> None:
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        client.create_topic("doomed")
        stream = client.stream("doomed", 0, 0)
        client.delete_topic("doomed")
        with pytest.raises(SpuError) as err:
            next(stream)
        assert err.value.code == ErrorCode.UNKNOWN_TOPIC


def test_stream_from_the_end_with_offset_minus_one(tmp_path: Path) -> None:
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        client.create_topic("t", TopicConfig(flush=FlushPolicy.never()))
        client.produce("t", 0, [b"before"])
        stream = client.stream("t", 0, -1)
        client.produce_encoded("t", 0, encode_batch([b"after"]))
        got = next(stream)
        assert [r.value for b in got.batches for r in b.records()] == [b"after"]
        stream.close()


def test_a_corrupt_batch_ends_a_stream_with_an_error_after_the_good_ones(tmp_path: Path) -> None:
    """Issue 17: streams go through the checked read path too."""
    data = tmp_path / "d"
    with running_spu(data) as spu, SpuClient(spu.addr) as client:
        client.create_topic("t")
        for i in range(20):
            client.produce("t", 0, [b"value-%d" % i])
    log_file = data / "topics" / "t" / "0" / f"{0:020d}.log"
    raw = bytearray(log_file.read_bytes())
    raw[-10] ^= 0xFF  # inside the last batch (offset 19)
    log_file.write_bytes(bytes(raw))
    with running_spu(data) as spu, SpuClient(spu.addr) as client:
        stream = client.stream("t", 0, 0)
        values: list[bytes] = []
        with pytest.raises(SpuError) as err:
            while True:
                values += [bytes(v) for batch in next(stream).batches for v in batch.values()]
        assert values == [b"value-%d" % i for i in range(19)], "every good batch, nothing of the bad one"
        assert "t/0 at offset 19" in str(err.value)
