"""A cluster leader's high watermark never stops inside an exactly-once commit: readers see
a partition's commit whole or not at all, whatever part of it the followers copied so far
(a real partition on disk, the leader's state and the commit ranges, no processes)."""

from __future__ import annotations

from pathlib import Path

from tests.spu.cluster_harness import values

from contraflow.spu.node.commit_ranges import CommitRanges
from contraflow.spu.node.replication.leader import LeaderState
from contraflow.spu.protocol.batch import encode_batch
from contraflow.spu.protocol.topics import TopicConfig
from contraflow.spu.storage.store import Store

TP = ("t", 0)


def test_the_high_watermark_jumps_over_a_commit_once_every_replica_has_all_of_it(tmp_path: Path) -> None:
    store = Store(tmp_path, hw_follows_flush=False)
    try:
        store.create_topic("t", TopicConfig(partitions=1))
        part = store.partition(*TP)
        ranges = CommitRanges()
        leader = LeaderState(0, part, 1, [0, 1], 0, lambda offset: ranges.visible(TP, offset))
        part.append_encoded(encode_batch(values(2, "plain")))
        leader.follower_fetched(1, 2)
        leader.update_high_watermark()
        assert part.high_watermark == 2

        ranges.open(TP, 2)  # a commit of three batches, two records each
        for n in range(3):
            part.append_encoded(encode_batch(values(2, f"c{n}")), wait_durable=False)
        part.flush()
        for copied in (4, 6):  # the follower has one, then two of the three batches
            leader.follower_fetched(1, copied)
            leader.update_high_watermark()
            assert part.high_watermark == 2 and ranges.visible(TP, copied) == 2
        ranges.close(TP, 8)
        leader.follower_fetched(1, 6)
        leader.update_high_watermark()
        assert part.high_watermark == 2, "appended, but not everywhere yet"
        leader.follower_fetched(1, 8)
        assert leader.update_high_watermark() and part.high_watermark == 8
        assert ranges.visible(TP, 8) == 8 and not ranges.failed_midway(TP)
    finally:
        store.close()


def test_a_commit_open_outside_its_write_gate_failed_midway() -> None:
    ranges = CommitRanges()
    ranges.open(TP, 5)
    assert ranges.failed_midway(TP) and ranges.visible(TP, 9) == 5
    ranges.forget(TP)
    assert not ranges.failed_midway(TP) and ranges.visible(TP, 9) == 9
