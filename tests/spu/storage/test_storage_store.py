"""The store: topics, validation, consumer offsets, the writer lock, group commit."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from storage_helpers import read_all
from tests.cli_process import run_cli

from contraflow.spu.api import LocalLog, LogClient
from contraflow.spu.protocol.errors import (
    InvalidTopicNameError,
    OffsetOutOfRangeError,
    PartitionNotFoundError,
    TopicExistsError,
    TopicNotFoundError,
)
from contraflow.spu.protocol.topics import FlushPolicy, TopicConfig, TopicDescription
from contraflow.spu.storage.errors import DataDirLockedError
from contraflow.spu.storage.store import Store


def test_topic_lifecycle(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        store.create_topic("orders", TopicConfig(partitions=3, retention_ms=60_000))
        store.create_topic("a.b_c-1")
        assert store.list_topics() == ["a.b_c-1", "orders"]
        desc = store.describe_topic("orders")
        assert [p.partition for p in desc.partitions] == [0, 1, 2]
        assert desc.config.retention_ms == 60_000
        assert TopicDescription.from_dict(desc.to_dict()) == desc
        with pytest.raises(TopicExistsError):
            store.create_topic("orders")
        store.delete_topic("orders")
        assert store.list_topics() == ["a.b_c-1"]
        assert not (tmp_path / "topics" / "orders").exists()
        with pytest.raises(TopicNotFoundError, match="unknown topic 'orders'"):
            store.partition("orders", 0)


@pytest.mark.parametrize("name", ["", ".", "..", "has space", "slash/name", "x" * 250, "ümlaut"])
def test_invalid_topic_names_are_rejected(tmp_path: Path, name: str) -> None:
    with Store(tmp_path) as store, pytest.raises(InvalidTopicNameError, match="invalid topic name"):
        store.create_topic(name)


def test_describe_reports_offsets_size_and_segments(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        store.create_topic("t", TopicConfig(partitions=2, segment_bytes=1024))
        part = store.partition("t", 1)
        for _ in range(20):
            part.append_records([b"x" * 100])
        info = store.describe_topic("t").partitions[1]
        assert (info.log_start_offset, info.log_end_offset, info.high_watermark) == (0, 20, 20)
        assert info.segment_count == len(part.segments) > 1
        assert info.size_bytes == sum(f.stat().st_size for f in (tmp_path / "topics/t/1").glob("*.log"))
        with pytest.raises(PartitionNotFoundError, match="no partition 2"):
            store.partition("t", 2)


def test_consumer_offsets_are_durable(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        store.create_topic("t")
        store.partition("t", 0).append_records([b"a", b"b", b"c"])
        assert store.consumer_offset("reader", "t", 0) is None
        store.commit_consumer_offset("reader", "t", 0, 2)
        store.commit_consumer_offset("reader", "t", 0, 3)
        with pytest.raises(OffsetOutOfRangeError):
            store.commit_consumer_offset("reader", "t", 0, 4)
        with pytest.raises(InvalidTopicNameError, match="invalid consumer name"):
            store.commit_consumer_offset("../evil", "t", 0, 1)
    assert (tmp_path / "consumers/reader/t/0").read_text() == "3\n"
    with Store(tmp_path) as store:
        assert store.consumer_offset("reader", "t", 0) == 3


def test_a_second_writer_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    with Store(tmp_path):
        probe = run_cli("topic", "create", "x", "--data-dir", tmp_path)
        assert probe.returncode != 0
        [line] = probe.stderr.splitlines()
        assert line.startswith("error: ") and f"pid {os.getpid()}" in line and "--spu" in line
        with pytest.raises(DataDirLockedError):
            Store(tmp_path)
    Store(tmp_path).close()  # released on close


def test_read_only_store_follows_a_live_writer(tmp_path: Path) -> None:
    with Store(tmp_path) as writer:
        writer.create_topic("t", TopicConfig(segment_bytes=1024))
        wpart = writer.partition("t", 0)
        wpart.append_records([b"first"])
        reader = LocalLog(tmp_path, read_only=True)
        assert isinstance(reader, LogClient)
        assert [bytes(v) for b in reader.fetch("t", 0, 0).batches for v in b.values()] == [b"first"]
        for i in range(30):
            wpart.append_records([b"%d" % i * 40])
        got = []
        offset = 1
        while offset < wpart.log_end_offset:
            result = reader.fetch("t", 0, offset)
            got += [bytes(v) for b in result.batches for v in b.values()]
            offset = result.next_offset
        assert got == [b"%d" % i * 40 for i in range(30)]
        reader.close()


def test_local_log_client_round_trip(tmp_path: Path) -> None:
    with LocalLog(tmp_path) as log:
        log.create_topic("t", TopicConfig(partitions=2))
        assert log.produce("t", 1, [b"a", b"b"], keys=[b"k", None], timestamps=[100, 200]) == (0, 1)
        assert log.list_offsets("t", 1, "earliest") == 0
        assert log.list_offsets("t", 1, "latest") == 2
        assert log.list_offsets("t", 1, 150) == 1
        assert log.list_offsets("t", 1, 201) is None
        fetched = log.fetch("t", 1, 1)
        assert fetched.next_offset == 2 and [r.value for r in fetched.batches[0].records(1)] == [b"b"]
        log.commit_offset("c", "t", 1, 2)
        assert log.fetch_offset("c", "t", 1) == 2
        assert log.list_topics() == ["t"]


def test_concurrent_appends_share_fsyncs(tmp_path: Path) -> None:
    """Group commit: with fsync per batch, threads appending at once need fewer fsyncs
    than appends, and every append returns only once its batch is durable."""
    threads_n, per_thread = 8, 40
    with Store(tmp_path) as store:
        store.create_topic("t", TopicConfig(flush=FlushPolicy.every_batch()))
        part = store.partition("t", 0)
        barrier = threading.Barrier(threads_n)
        results: list[tuple[int, int]] = []
        lock = threading.Lock()

        def worker(n: int) -> None:
            barrier.wait()
            for i in range(per_thread):
                offsets = part.append_records([b"%d-%d" % (n, i)] * 3)
                assert part._durable_end > offsets[1]
                with lock:
                    results.append(offsets)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        appends = threads_n * per_thread
        assert len(results) == appends
        assert sorted(o for first, last in results for o in range(first, last + 1)) == list(
            range(3 * appends)
        )
        assert part.stats.appends == appends
        assert 0 < part.stats.fsyncs < appends
        assert part.high_watermark == 3 * appends
        assert len(read_all(part, isolation="committed")) == 3 * appends


def test_background_flusher_commits_interval_policy(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        store.create_topic("t", TopicConfig(flush=FlushPolicy.every_ms(30)))
        part = store.partition("t", 0)
        part.append_records([b"x"])
        deadline = time.monotonic() + 5
        while part.high_watermark < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert part.high_watermark == 1
