"""Produce, fetch, offsets and admin against a live SPU over loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.spu.spu_harness import running_spu

from contraflow.spu.api import LocalLog, LogClient
from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.protocol import Acks, ErrorCode, SpuError
from contraflow.spu.storage import FlushPolicy, TopicConfig, encode_batch


@pytest.fixture
def spu(tmp_path: Path) -> Iterator[EmbeddedSpu]:
    with running_spu(tmp_path / "data") as server:
        yield server


@pytest.fixture
def client(spu: EmbeddedSpu) -> Iterator[SpuClient]:
    with SpuClient(spu.addr) as c:
        yield c


def values(client: LogClient, topic: str, partition: int = 0, offset: int = 0, **kw: object) -> list[bytes]:
    result = client.fetch(topic, partition, offset, **kw)  # type: ignore[arg-type]
    return [r.value for b in result.batches for r in b.records(start_offset=offset)]


def test_client_is_a_log_client(client: SpuClient) -> None:
    assert isinstance(client, LogClient)


def test_produce_fetch_round_trip_keeps_keys_headers_timestamps(client: SpuClient) -> None:
    client.create_topic("events", TopicConfig(partitions=2))
    first = client.produce(
        "events", 1, [b"a", b"b"], keys=[b"k", None], headers=[[("h", b"1")], []], timestamps=[10, 20]
    )
    second = client.produce("events", 1, [b"c"])
    assert (first, second) == ((0, 1), (2, 2))
    result = client.fetch("events", 1, 0)
    records = [r for b in result.batches for r in b.records()]
    assert [(r.offset, r.key, r.value, r.headers) for r in records] == [
        (0, b"k", b"a", [("h", b"1")]),
        (1, None, b"b", []),
        (2, None, b"c", []),
    ]
    assert records[1].timestamp == 20
    assert (result.next_offset, result.high_watermark, result.log_start_offset) == (3, 3, 0)
    assert client.fetch("events", 0, 0).batches == []


def test_fetch_from_the_middle_respects_max_bytes(client: SpuClient) -> None:
    client.create_topic("t")
    for i in range(10):
        client.produce("t", 0, [b"%d" % i] * 5)
    one = client.fetch("t", 0, 12, max_bytes=1)
    assert len(one.batches) == 1 and one.next_offset == 15
    assert values(client, "t", offset=12)[:3] == [b"2", b"2", b"2"]


def test_large_fetch_goes_through_sendfile_path(client: SpuClient) -> None:
    client.create_topic("big")
    payload = [bytes([i % 251]) * 1000 for i in range(300)]  # ~300 KB, above the sendfile threshold
    client.produce("big", 0, payload)
    client.produce("big", 0, payload[:10])
    assert values(client, "big", max_bytes=4 << 20) == payload + payload[:10]


def test_multiple_batches_in_one_produce_request(client: SpuClient) -> None:
    client.create_topic("t")
    batches = [encode_batch([b"x", b"y"]), encode_batch([b"z"])]
    assert client.produce_encoded("t", 0, batches) == (0, 2)
    assert values(client, "t") == [b"x", b"y", b"z"]


def test_acks_none_is_appended_without_an_answer(client: SpuClient) -> None:
    client.create_topic("t")
    assert client.produce("t", 0, [b"fire"], acks=Acks.NONE) == (-1, -1)
    deadline = time.monotonic() + 5
    while client.list_offsets("t", 0, "latest") == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert values(client, "t") == [b"fire"]


def test_acks_committed_is_durable_and_visible(client: SpuClient) -> None:
    client.create_topic("t", TopicConfig(flush=FlushPolicy.every_ms(60_000)))
    client.produce("t", 0, [b"lazy"])
    assert client.describe_topic("t").partitions[0].high_watermark == 0  # not fsynced yet
    client.produce("t", 0, [b"v"], acks=Acks.COMMITTED)
    assert client.describe_topic("t").partitions[0].high_watermark == 2
    assert values(client, "t") == [b"lazy", b"v"]


def test_list_offsets_earliest_latest_and_by_time(client: SpuClient) -> None:
    client.create_topic("t")
    client.produce("t", 0, [b"a", b"b"], timestamps=[1000, 2000])
    client.produce("t", 0, [b"c"], timestamps=[3000])
    assert client.list_offsets("t", 0, "earliest") == 0
    assert client.list_offsets("t", 0, "latest") == 3
    assert client.list_offsets("t", 0, "latest", isolation="uncommitted") == 3
    assert client.list_offsets("t", 0, 1500) == 1
    assert client.list_offsets("t", 0, 2500) == 2
    assert client.list_offsets("t", 0, 9999) is None


def test_consumer_offsets_survive_a_restart(tmp_path: Path) -> None:
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        client.create_topic("t")
        client.produce("t", 0, [b"a", b"b", b"c"])
        assert client.fetch_offset("app", "t", 0) is None
        client.commit_offset("app", "t", 0, 2)
        assert client.fetch_offset("app", "t", 0) == 2
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        assert client.fetch_offset("app", "t", 0) == 2
        assert client.fetch_offset("other", "t", 0) is None


def test_admin_round_trip(client: SpuClient) -> None:
    client.create_topic("a", TopicConfig(partitions=3, segment_bytes=4096))
    client.create_topic("b")
    assert client.list_topics() == ["a", "b"]
    described = client.describe_topic("a")
    assert described.config.partitions == 3 and described.config.segment_bytes == 4096
    assert [p.partition for p in described.partitions] == [0, 1, 2]
    client.delete_topic("a")
    assert client.list_topics() == ["b"]


def test_errors_carry_codes_and_the_engine_s_own_messages(client: SpuClient, tmp_path: Path) -> None:
    client.create_topic("t")
    cases = [
        (lambda c: c.fetch("missing", 0, 0), ErrorCode.UNKNOWN_TOPIC),
        (lambda c: c.fetch("t", 5, 0), ErrorCode.UNKNOWN_PARTITION),
        (lambda c: c.fetch("t", 0, 99), ErrorCode.OFFSET_OUT_OF_RANGE),
        (lambda c: c.create_topic("t"), ErrorCode.TOPIC_EXISTS),
        (lambda c: c.create_topic("bad name!"), ErrorCode.INVALID_ARGUMENT),
    ]
    with LocalLog(tmp_path / "local") as local:
        local.create_topic("t")
        for call, code in cases:
            with pytest.raises(SpuError) as remote:
                call(client)
            assert remote.value.code == code
            with pytest.raises(Exception) as direct:
                call(local)
            assert str(remote.value) == str(direct.value)


def test_corrupt_batch_is_refused_and_the_server_keeps_serving(client: SpuClient) -> None:
    client.create_topic("t")
    batch = bytearray(encode_batch([b"payload"]))
    batch[-1] ^= 0xFF
    with pytest.raises(SpuError) as err:
        client.produce_encoded("t", 0, bytes(batch))
    assert err.value.code == ErrorCode.CORRUPT_BATCH
    with pytest.raises(SpuError) as truncated:
        client.produce_encoded("t", 0, bytes(batch[:30]))
    assert truncated.value.code == ErrorCode.CORRUPT_BATCH
    assert client.produce("t", 0, [b"ok"]) == (0, 0)
