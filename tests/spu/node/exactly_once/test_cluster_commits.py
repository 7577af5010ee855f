"""Exactly-once commits (stage/commit, the batch ledger) on an SPU cluster with real
processes: a commit lands once or fails cleanly across a leader SIGKILL, a replay
after the failover is recognised by the new leader from its log, a partially
committed batch is completed without duplicates, and an unfinished commit left
in a replica's log is cut when that replica starts leading."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from tests.spu.cluster_harness import local_cluster, partition_state, replica_log, values, wait_for

from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import Acks, ErrorCode, SpuError
from contraflow.spu.protocol.batch import encode_batch
from contraflow.spu.protocol.commit_marks import mark_batch
from contraflow.spu.protocol.topics import TopicConfig
from contraflow.spu.storage.store import Store

TWO_PARTITIONS = TopicConfig(
    partitions=2, replication_factor=3, min_in_sync_replicas=2, replica_lag_time_max_ms=1000
)
QUERY = "4f7c2a1e-query"


def stage_batch(
    client: SpuClient, batch_id: int, topic: str, partitions: range
) -> dict[tuple[str, int], int]:
    """What one Spark micro-batch does before its commit: one record batch per partition."""
    for p in partitions:
        client.stage(QUERY, batch_id, topic, p, encode_batch(values(3, f"b{batch_id}p{p}-")), writer="0")
    return {(topic, p): 1 for p in partitions}


def read_all(client: SpuClient, topic: str, partition: int) -> list[bytes]:
    got = client.fetch(topic, partition, 0, 1 << 20, isolation="committed")
    return [bytes(v) for b in got.batches for v in b.values()]


def test_a_commit_replayed_after_a_leader_sigkill_is_recognised_and_written_once(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("eo", TWO_PARTITIONS)
        leaders = {p: partition_state(cluster, "eo", p)[0] for p in range(2)}
        assert leaders[0] != leaders[1], "the batch spans partitions of two leaders"
        counts = stage_batch(client, 7, "eo", range(2))
        ends = client.commit(QUERY, 7, partitions=counts)
        assert ends == {("eo", 0): 3, ("eo", 1): 3}
        assert client.ledger(QUERY, 7) == ends == client.ledger(QUERY, 7, topics=["eo"])
        assert client.ledger(QUERY, 6) is None
        client.create_topic("lonely", TopicConfig(partitions=1))  # one replica: loses its leader below
        assert client.ledger(QUERY, 7, topics=["lonely"]) is None

        killed = leaders[0]
        cluster.signal(f"spu-{killed}", signal.SIGKILL)
        # Spark replays the batch against the cluster: staged again, committed again
        replay = stage_batch(client, 7, "eo", range(2))
        assert client.commit(QUERY, 7, partitions=replay) == ends
        new_leader = partition_state(cluster, "eo", 0)[0]
        assert new_leader not in (killed, -1)
        # only the topic asked about: the "lonely" partition may have lost its only replica
        assert client.ledger(QUERY, 7, topics=["eo"]) == ends, (
            "the new leader rebuilt the ledger from its log"
        )
        for p in range(2):
            assert read_all(client, "eo", p) == values(3, f"b7p{p}-")

        # the next batch lands after it, once
        assert client.commit(QUERY, 8, partitions=stage_batch(client, 8, "eo", range(2))) == {
            ("eo", 0): 6,
            ("eo", 1): 6,
        }
        cluster.start_spu(killed)
        wait_for("the old leader to rejoin", lambda: killed in partition_state(cluster, "eo", 0)[3])
        wait_for(
            "identical replicas",
            lambda: len({tuple(replica_log(tmp_path / f"spu-{n}", "eo")) for n in range(3)}) == 1,
        )
        assert [v for _, _, v in replica_log(tmp_path / f"spu-{killed}", "eo")] == values(
            3, "b7p0-"
        ) + values(3, "b8p0-")


def test_staging_survives_its_leader_and_a_commit_that_cannot_land_fails_cleanly(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("eo", TWO_PARTITIONS)
        counts = stage_batch(client, 2, "eo", range(2))
        killed = partition_state(cluster, "eo", 0)[0]
        cluster.signal(f"spu-{killed}", signal.SIGKILL)  # between the staging and the commit
        assert client.commit(QUERY, 2, partitions=counts) == {("eo", 0): 3, ("eo", 1): 3}, (
            "the new leader had a copy of the staging"
        )
        # a commit whose staging does not match (a stage request lost) fails, writing nothing there
        stage_batch(client, 3, "eo", range(2))
        with pytest.raises(SpuError) as err:
            client.commit(QUERY, 3, partitions={("eo", 0): 2, ("eo", 1): 1})
        assert err.value.code is ErrorCode.UNKNOWN_TRANSACTION, err.value
        assert read_all(client, "eo", 0) == values(3, "b2p0-"), "nothing of the failed partition was written"
        assert read_all(client, "eo", 1) == values(3, "b2p1-") + values(3, "b3p1-"), "the other one committed"
        # the replay writes only what is missing
        ends = client.commit(QUERY, 3, partitions=stage_batch(client, 3, "eo", range(2)))
        assert ends == {("eo", 0): 6, ("eo", 1): 6}
        for p in range(2):
            assert read_all(client, "eo", p) == values(3, f"b2p{p}-") + values(3, f"b3p{p}-")
        # an aborted batch leaves no staging anywhere: not at the leaders, not in the copies
        cluster.start_spu(killed)
        wait_for("the old leader to rejoin", lambda: killed in partition_state(cluster, "eo", 0)[3])
        aborted = stage_batch(client, 4, "eo", range(2))
        assert client.abort(QUERY, 4)
        cluster.signal(f"spu-{partition_state(cluster, 'eo', 0)[0]}", signal.SIGKILL)
        with pytest.raises(SpuError) as err:
            client.commit(QUERY, 4, partitions=aborted)
        assert err.value.code is ErrorCode.UNKNOWN_TRANSACTION
        assert client.ledger(QUERY, 4) is None


def test_an_unfinished_commit_is_cut_when_its_replica_starts_leading(tmp_path: Path) -> None:
    """The log of the replica that is elected ends with the first batches of a commit
    whose leader died before the last one (written here while every SPU is down)."""
    two_copies = TopicConfig(
        partitions=1, replication_factor=2, min_in_sync_replicas=1, replica_lag_time_max_ms=1000
    )
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("cut", two_copies)
        client.produce("cut", 0, values(4, "plain"), acks=Acks.COMMITTED)
        leader, _, replicas, _ = partition_state(cluster, "cut")
        (follower,) = [r for r in replicas if r != leader]
        cluster.signal(f"spu-{follower}", signal.SIGKILL)
        wait_for(
            "the follower to leave the in-sync set", lambda: partition_state(cluster, "cut")[3] == [leader]
        )
        cluster.signal(f"spu-{leader}", signal.SIGKILL)
        wait_for("the partition to lose its leader", lambda: partition_state(cluster, "cut")[0] == -1)

        store = Store(tmp_path / f"spu-{leader}", hw_follows_flush=False)
        try:
            part = store.partition("cut", 0)
            for n in range(2):  # batches 1 and 2 of a commit of three
                part.append_encoded(mark_batch(encode_batch(values(2, f"half{n}-")), QUERY, 11, last=False))
            assert part.log_end_offset == 8
        finally:
            store.close()

        cluster.start_spu(leader)
        wait_for("the replica to lead again", lambda: partition_state(cluster, "cut")[0] == leader)
        assert client.list_offsets("cut", 0, "latest", isolation="uncommitted") == 4, "the half commit is cut"
        assert client.ledger(QUERY, 11) is None
        client.stage(QUERY, 11, "cut", 0, encode_batch(values(2, "whole-")), writer="0")
        assert client.commit(QUERY, 11, partitions={("cut", 0): 1}) == {("cut", 0): 6}
        cluster.start_spu(follower)
        wait_for("the follower to rejoin", lambda: follower in partition_state(cluster, "cut")[3])
        logs = [replica_log(tmp_path / f"spu-{n}", "cut") for n in (leader, follower)]
        assert logs[0] == logs[1]
        assert [v for _, _, v in logs[0]] == values(4, "plain") + values(2, "whole-")


def test_a_produce_cannot_forge_a_commit_mark(tmp_path: Path) -> None:
    with local_cluster(tmp_path, spus=1) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("forge", TopicConfig(partitions=1))
        forged = mark_batch(encode_batch(values(1)), QUERY, 1, last=True)
        with pytest.raises(SpuError) as err:
            client.produce_encoded("forge", 0, forged)
        assert err.value.code is ErrorCode.INVALID_ARGUMENT and "commit mark" in str(err.value)
        assert client.ledger(QUERY, 1) is None
