"""Exactly-once batch commits over loopback: staging, atomic commit, idempotence, abort,
timeout, restart, crash recovery and committed-isolation fencing."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from tests.spu.spu_harness import running_spu, small_limits

from contraflow.spu.api import LocalLog
from contraflow.spu.app import LEDGER_PATH, STAGING_DIR
from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.node.exactly_once.journal import BatchLedger
from contraflow.spu.node.partitions import Partitions
from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.protocol.batch import MAGIC_POS
from contraflow.spu.storage import FlushPolicy, TopicConfig, encode_batch
from contraflow.spu.storage.store import Store


def all_values(
    client: SpuClient | LocalLog, topic: str, partition: int, isolation: str = "committed"
) -> list[bytes]:
    result = client.fetch(topic, partition, 0, isolation=isolation)  # type: ignore[arg-type]
    return [r.value for b in result.batches for r in b.records()]


def make_topics(client: SpuClient) -> None:
    client.create_topic("out", TopicConfig(partitions=2))
    client.create_topic("err")


def test_stage_from_two_connections_commit_once_then_noop(tmp_path: Path) -> None:
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as a, SpuClient(spu.addr) as b:
        make_topics(a)
        a.produce("out", 0, [b"before"])
        assert a.stage("q1", 7, "out", 0, encode_batch([b"a1", b"a2"]))
        assert b.stage("q1", 7, "out", 1, encode_batch([b"b1"]))
        assert b.stage("q1", 7, "err", 0, [encode_batch([b"e1"]), encode_batch([b"e2"])])
        assert all_values(a, "out", 0, "uncommitted") == [b"before"]  # staged is invisible
        assert a.ledger("q1", 7) is None

        ends = b.commit("q1", 7, expected_batches=4)
        assert ends == {("out", 0): 3, ("out", 1): 1, ("err", 0): 2}
        assert all_values(a, "out", 0) == [b"before", b"a1", b"a2"]
        assert all_values(a, "out", 1) == [b"b1"]
        assert all_values(a, "err", 0) == [b"e1", b"e2"]

        # a replayed batch: stage again (refused: already committed), commit again: same offsets
        assert not a.stage("q1", 7, "out", 0, encode_batch([b"a1", b"a2"]))
        assert a.commit("q1", 7, expected_batches=4) == ends
        assert a.ledger("q1", 7) == ends
        assert all_values(a, "out", 0) == [b"before", b"a1", b"a2"]


def test_abort_discards_and_expected_count_catches_lost_staging(tmp_path: Path) -> None:
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        make_topics(client)
        client.stage("q", 1, "out", 0, encode_batch([b"x"]))
        assert client.abort("q", 1)
        assert not client.abort("q", 1)
        with pytest.raises(SpuError, match="0 record batches staged, 1 expected") as err:
            client.commit("q", 1, expected_batches=1)
        assert err.value.code == ErrorCode.UNKNOWN_TRANSACTION
        assert client.commit("q", 2, expected_batches=0) == {}  # an empty micro-batch commits
        assert client.ledger("q", 2) == {}
        assert all_values(client, "out", 0, "uncommitted") == []


def test_staging_of_a_silent_producer_times_out(tmp_path: Path) -> None:
    with running_spu(tmp_path / "d", transaction_timeout_s=0.2) as spu, SpuClient(spu.addr) as client:
        make_topics(client)
        client.stage("slow", 1, "out", 0, encode_batch([b"x"]))
        time.sleep(0.6)
        with pytest.raises(SpuError) as err:
            client.commit("slow", 1, expected_batches=1)
        assert err.value.code == ErrorCode.UNKNOWN_TRANSACTION


def test_new_attempt_of_a_writer_replaces_its_staging(tmp_path: Path) -> None:
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        make_topics(client)
        client.stage("q", 3, "out", 0, encode_batch([b"dead-1"]), writer="task-0", attempt=0)
        client.stage("q", 3, "out", 0, encode_batch([b"dead-2"]), writer="task-0", attempt=0)
        client.stage("q", 3, "out", 1, encode_batch([b"other"]), writer="task-1", attempt=0)
        client.stage("q", 3, "out", 0, encode_batch([b"retry"]), writer="task-0", attempt=1)
        assert client.commit("q", 3, expected_batches=2) == {("out", 0): 1, ("out", 1): 1}
        assert all_values(client, "out", 0) == [b"retry"]


def test_a_resent_stage_with_the_same_sequence_is_staged_once(tmp_path: Path) -> None:
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        make_topics(client)
        for sequence in (0, 1, 1, 0):  # the last two are retries after lost answers
            client.stage("q", 4, "out", 0, encode_batch([b"s%d" % sequence]), writer="w", sequence=sequence)
        client.stage("q", 4, "out", 1, encode_batch([b"other"]), writer="v", sequence=0)
        assert client.commit("q", 4, expected_batches=3) == {("out", 0): 2, ("out", 1): 1}
        assert all_values(client, "out", 0) == [b"s0", b"s1"]


def test_stages_of_one_writer_to_two_partitions_may_arrive_in_any_order(tmp_path: Path) -> None:
    """Sequence numbers are the writer's, but only one partition's stages keep their order
    on the way (in a cluster each partition's go through its own leader)."""
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        make_topics(client)
        for sequence, partition in ((1, 1), (0, 0), (3, 1), (2, 0), (2, 0)):  # the last one: a resend
            batch = encode_batch([b"s%d" % sequence])
            client.stage("q", 5, "out", partition, batch, writer="w", sequence=sequence)
        assert client.commit("q", 5, expected_batches=4) == {("out", 0): 2, ("out", 1): 2}
        assert all_values(client, "out", 0) == [b"s0", b"s2"]
        assert all_values(client, "out", 1) == [b"s1", b"s3"]


def test_staged_bytes_per_connection_are_limited(tmp_path: Path) -> None:
    limits = small_limits(max_staged_bytes=2000)
    with running_spu(tmp_path / "d", limits=limits) as spu, SpuClient(spu.addr) as client:
        make_topics(client)
        client.stage("q", 1, "out", 0, encode_batch([b"x" * 1000]))
        with pytest.raises(SpuError) as err:
            client.stage("q", 1, "out", 0, encode_batch([b"y" * 1000]))
        assert err.value.code == ErrorCode.TOO_MANY_REQUESTS
        client.commit("q", 1)  # committing frees the budget
        client.stage("q", 2, "out", 0, encode_batch([b"y" * 1000]))


def spill_files(data_dir: Path) -> dict[str, int]:
    """This process's open spill files under `data_dir` (unlinked: found by their descriptors)
    and their sizes on disk."""
    spill_dir = str(data_dir / STAGING_DIR)
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        target = os.readlink(f"/proc/self/fd/{fd}") if os.path.islink(f"/proc/self/fd/{fd}") else ""
        if target.startswith(spill_dir):
            found[target] = os.stat(f"/proc/self/fd/{fd}").st_size
    return found


def test_staging_past_the_memory_limit_lives_on_disk_and_commits_byte_identical(tmp_path: Path) -> None:
    limits = small_limits(staged_memory_bytes=1500)
    data_dir = tmp_path / "d"
    kept, spilled = encode_batch([b"k" * 1000]), [encode_batch([b"s%d" % i * 300, b"t"]) for i in range(3)]
    with running_spu(data_dir, limits=limits) as spu, SpuClient(spu.addr) as a, SpuClient(spu.addr) as b:
        make_topics(a)
        a.stage("q", 1, "out", 0, kept)  # within the limit: in memory
        a.stage("q", 1, "out", 0, spilled[:2])  # past it: to the transaction's spill file
        b.stage("q", 1, "out", 1, spilled[2])  # another connection's, the same file
        assert list(spill_files(data_dir).values()) == [sum(len(s) for s in spilled)]

        assert b.commit("q", 1, expected_batches=4) == {("out", 0): 5, ("out", 1): 2}
        assert spill_files(data_dir) == {}  # the commit gave the space back
        written = [x.buffer for p in (0, 1) for x in a.fetch("out", p, 0, isolation="committed").batches]
        assert [bytes(w[MAGIC_POS:]) for w in written] == [s[MAGIC_POS:] for s in [kept, *spilled]]

        a.stage("q", 2, "out", 0, spilled[0])  # memory was given back by the commit too
        assert spill_files(data_dir) == {}
        a.stage("q", 3, "out", 0, spilled)
        assert a.abort("q", 3) and spill_files(data_dir) == {}


def test_stage_rejects_corrupt_batches_and_unknown_partitions(tmp_path: Path) -> None:
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        make_topics(client)
        bad = bytearray(encode_batch([b"x"]))
        bad[-1] ^= 1
        with pytest.raises(SpuError) as corrupt:
            client.stage("q", 1, "out", 0, bytes(bad))
        assert corrupt.value.code == ErrorCode.CORRUPT_BATCH
        with pytest.raises(SpuError) as missing:
            client.stage("q", 1, "out", 9, encode_batch([b"x"]))
        assert missing.value.code == ErrorCode.UNKNOWN_PARTITION


def test_commit_is_a_noop_after_a_restart(tmp_path: Path) -> None:
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        make_topics(client)
        client.stage("q", 1, "out", 0, encode_batch([b"once"]))
        ends = client.commit("q", 1, expected_batches=1)
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        assert client.ledger("q", 1) == ends
        assert not client.stage("q", 1, "out", 0, encode_batch([b"once"]))
        assert client.commit("q", 1, expected_batches=1) == ends
        assert all_values(client, "out", 0) == [b"once"]


def test_commit_after_sigkill_of_the_spu_process_is_a_noop(tmp_path: Path) -> None:
    spu = EmbeddedSpu(tmp_path / "d", mode="process")
    spu.start()
    try:
        with SpuClient(spu.addr) as client:
            make_topics(client)
            client.stage("q", 5, "out", 1, encode_batch([b"v1", b"v2"]))
            ends = client.commit("q", 5, expected_batches=1)
        spu.kill()
    finally:
        spu.stop()
    with running_spu(tmp_path / "d") as again, SpuClient(again.addr) as client:
        assert client.commit("q", 5, expected_batches=1) == ends
        assert all_values(client, "out", 1) == [b"v1", b"v2"]


def test_restart_undoes_the_appends_of_a_commit_that_crashed_midway(tmp_path: Path) -> None:
    """Simulate the crash window: intent journalled, some appends done, no commit record."""
    data = tmp_path / "d"
    with running_spu(data) as spu, SpuClient(spu.addr) as client:
        client.create_topic("out", TopicConfig(partitions=2, segment_bytes=1024))
        for i in range(12):  # several segments, so the cut also deletes whole ones
            client.produce("out", 0, [b"keep-%d" % i] * 4)
    with LocalLog(data) as local:
        starts = {("out", 0): 48, ("out", 1): 0}
        ledger = BatchLedger(data / LEDGER_PATH)
        ledger.record_intent("q", 9, starts)
        ledger.close()
        for _ in range(10):
            local.produce_encoded("out", 0, encode_batch([b"partial" * 20] * 3))
        local.produce_encoded("out", 1, encode_batch([b"partial"]))
    with running_spu(data) as spu, SpuClient(spu.addr) as client:
        assert client.list_offsets("out", 0, "latest", isolation="uncommitted") == 48
        assert all_values(client, "out", 0, "uncommitted")[-1] == b"keep-11"
        assert all_values(client, "out", 1, "uncommitted") == []
        assert client.ledger("q", 9) is None
        client.stage("q", 9, "out", 1, encode_batch([b"replayed"]))
        assert client.commit("q", 9, expected_batches=1) == {("out", 1): 1}
        client.produce("out", 0, [b"after"])
        assert all_values(client, "out", 0)[-1:] == [b"after"]
    with running_spu(data) as spu, SpuClient(spu.addr) as client:  # the undo happened exactly once
        assert all_values(client, "out", 1) == [b"replayed"]
        assert client.list_offsets("out", 0, "latest") == 49


def test_committed_readers_never_see_a_commit_in_progress(tmp_path: Path) -> None:
    """The fence a commit raises hides its appends from committed reads until published."""
    published: list[tuple[str, int]] = []
    with Store(tmp_path / "d") as store:
        store.create_topic("t", TopicConfig(flush=FlushPolicy.never()))
        parts = Partitions(store, published.append)
        tp = ("t", 0)
        parts.produce(tp, [memoryview(encode_batch([b"a"]))], durable=False)
        with parts.locked([tp]):
            parts.fence(tp, parts.log_end(tp))
            parts.append(tp, encode_batch([b"txn-1", b"txn-2"]))
            committed = parts.read(tp, 0, 1 << 20, "committed")
            uncommitted = parts.read(tp, 0, 1 << 20, "uncommitted")
            assert (committed.next_offset, committed.high_watermark) == (1, 1)
            assert uncommitted.next_offset == 3 and uncommitted.size > committed.size
            assert parts.list_offset(tp, "latest", "committed") == 1
            assert parts.read(tp, 1, 1 << 20, "committed").size == 0
            parts.publish(tp)
        assert parts.read(tp, 0, 1 << 20, "committed").next_offset == 3
        assert published[-1] == tp


def test_stages_of_one_partition_that_arrive_out_of_order_commit_in_the_writers_order(
    tmp_path: Path,
) -> None:
    """A retried stage request can reach the SPU after the ones that followed it (a new
    connection): it is staged, not taken for a resend, and the batch commits in number order."""
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        make_topics(client)
        for sequence in (1, 2, 0, 3, 1):  # the last one: a resend
            batch = encode_batch([b"s%d" % sequence])
            client.stage("q", 6, "out", 0, batch, writer="w", sequence=sequence)
        client.stage("q", 6, "out", 0, encode_batch([b"other"]), writer="v", sequence=0)
        assert client.commit("q", 6, expected_batches=5) == {("out", 0): 5}
        assert all_values(client, "out", 0) == [b"s0", b"s1", b"s2", b"s3", b"other"]
