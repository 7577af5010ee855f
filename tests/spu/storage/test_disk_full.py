"""Issue 32: an SPU whose data directory fills up. Each test fills a 4 MiB tmpfs for real
(`small_disk`, tests/conftest.py).

Produce is refused with an error that says what to do, every acknowledged record reads back
intact, a topic can be deleted and retention can run while the disk is full, and appends
resume once space is free, with nothing torn left behind for the next open to find."""

from __future__ import annotations

from pathlib import Path

import pytest

from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.protocol.errors import ErrorCode, SpuError
from contraflow.spu.protocol.topics import TopicConfig
from contraflow.spu.storage.errors import DiskFullError
from contraflow.spu.storage.store import Store

SEGMENT = TopicConfig(partitions=1, segment_bytes=256 * 1024)
RECORD = 1000  # bytes; ten to a batch


def record(n: int) -> bytes:
    return b"%08d" % n + b"." * (RECORD - 8)


def numbered(start: int) -> list[bytes]:
    return [record(n) for n in range(start, start + 10)]


def fill(spu: SpuClient, topic: str, start: int = 0) -> tuple[int, SpuError]:
    """Produce numbered records until the SPU refuses; (records acknowledged, the refusal)."""
    n = start
    while True:
        try:
            spu.produce(topic, 0, numbered(n))
        except SpuError as err:
            return n - start, err
        n += 10


def read_numbers(spu: SpuClient, topic: str) -> list[int]:
    numbers: list[int] = []
    while True:
        result = spu.fetch(topic, 0, len(numbers))
        records = [r for b in result.batches for r in b.records(start_offset=len(numbers))]
        if not records:
            return numbers
        for got in records:
            number = int(bytes(got.value[:8]))
            assert bytes(got.value) == record(number), f"record {number} damaged"
            numbers.append(number)


def test_a_full_disk_refuses_produce_serves_reads_and_recovers_when_a_topic_is_deleted(
    small_disk: Path,
) -> None:
    data = small_disk / "spu"
    with EmbeddedSpu(data, mode="thread") as server:
        spu = SpuClient(server.addr)
        spu.create_topic("bulk", SEGMENT)
        spu.create_topic("kept", SEGMENT)
        spu.produce("kept", 0, numbered(0))
        bulk, refused = fill(spu, "bulk")
        assert bulk > 1000, "the disk filled too early to show anything"
        assert refused.code == ErrorCode.DISK_FULL
        assert "no space left on device: append to bulk/0 refused" in str(refused)
        assert "delete a topic" in str(refused)
        _, refused_too = fill(spu, "kept", 10)
        assert "no space left on device: append to kept/0 refused" in str(refused_too)

        assert read_numbers(spu, "bulk") == list(range(bulk)), "every acknowledged record, intact"
        spu.delete_topic("bulk")  # it failed with ENOSPC: closing wrote checkpoints
        assert spu.list_topics() == ["kept"]

        more, _ = fill(spu, "kept", 10)
        assert more > 1000, "appends resume once space is free"
        assert read_numbers(spu, "kept") == list(range(10 + more))
        spu.close()

    with Store(data, read_only=True) as store:  # the next open finds nothing torn or damaged
        part = store.partition("kept", 0)
        assert part.recovery.truncated == [] and part.verify() == []
        assert part.log_end_offset == 10 + more


def test_retention_runs_on_a_full_disk_and_frees_it(small_disk: Path) -> None:
    with Store(small_disk / "spu") as store:
        store.create_topic("old", TopicConfig(partitions=1, segment_bytes=256 * 1024, retention_ms=60_000))
        part = store.partition("old", 0)
        with pytest.raises(DiskFullError, match="append to old/0 refused"):
            while True:
                part.append_records(numbered(part.log_end_offset))
        end = part.log_end_offset
        closed = len(part.segments) - 1
        deleted = store.enforce_retention(now_ms=part.segments[-1].max_timestamp + 3_600_000)
        assert len(deleted[("old", 0)]) == closed > 0 and len(part.segments) == 1  # all but the active
        assert part.log_start_offset > 0 and part.log_end_offset == end
        part.append_records(numbered(end))  # space again
        assert part.log_end_offset == end + 10


def test_an_spu_stopped_on_a_full_disk_stops_cleanly_and_keeps_every_record(small_disk: Path) -> None:
    """Closing writes checkpoints (recovery point, high watermark, trimmed indexes), which a full
    disk refuses: they are skipped, the stop is clean, and the next open finds every record."""
    data = small_disk / "spu"
    with EmbeddedSpu(data, mode="thread") as server:
        spu = SpuClient(server.addr)
        # An index entry for every batch: the indexes cross into new pages all the time.
        spu.create_topic("brim", TopicConfig(partitions=1, segment_bytes=256 * 1024, index_interval_bytes=1))
        count, _ = fill(spu, "brim")
        while True:  # to the last byte: one-record batches until even those are refused
            try:
                spu.produce("brim", 0, [record(count)])
            except SpuError:
                break
            count += 1
        spu.close()
    with Store(data, read_only=True) as store:
        part = store.partition("brim", 0)
        assert part.log_end_offset == count and part.verify() == []
