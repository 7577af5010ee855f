"""The SPU cluster with real processes on loopback: a controller and three SPUs.

Covers registration and assignment, durable controller metadata (a leader restarted
while the controller was down leads no more), replication
with acks=all and identical replicas, the not-enough-replicas refusal, election
after a SIGKILL, truncation of a diverged replica (KIP-101), and fencing of a
leader that was SIGSTOPped past its session and resumed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
from collections import Counter
from pathlib import Path

import pytest
from tests.spu.cluster_harness import (
    REPLICATED,
    local_cluster,
    lose_unflushed_tail,
    partition_state,
    replica_log,
    values,
    wait_for,
)

from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import Acks, ApiKey, ErrorCode, SpuError
from contraflow.spu.protocol.batch import encode_batch
from contraflow.spu.protocol.topics import FlushPolicy, TopicConfig
from contraflow.spu.rpc.client import Connection


def test_topics_are_assigned_evenly_and_described(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("spread", TopicConfig(partitions=3, replication_factor=2))
        desc = client.describe_topic("spread")
        leaders = {p.leader for p in desc.partitions}
        assert leaders == {0, 1, 2}, "one leader per SPU"
        replica_load = Counter(r for p in desc.partitions for r in p.replicas)
        assert set(replica_load.values()) == {2}, replica_load
        for p in desc.partitions:
            assert p.leader == p.replicas[0] and sorted(p.in_sync_replicas) == sorted(p.replicas)
            assert p.leader_epoch == 1
        with pytest.raises(SpuError) as err:
            client.create_topic("too-wide", TopicConfig(replication_factor=4, min_in_sync_replicas=1))
        assert "needs 4 live SPUs" in str(err.value)


def test_acks_all_replicates_to_identical_replicas(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("orders", REPLICATED)
        for n in range(20):
            client.produce("orders", 0, values(50, f"b{n}-"), acks=Acks.COMMITTED)
        desc = client.describe_topic("orders").partitions[0]
        assert client.list_offsets("orders", 0, "latest", isolation="committed") == 1000
        wait_for(
            "the followers",
            lambda: all(len(replica_log(tmp_path / f"spu-{n}", "orders")) == 1000 for n in range(3)),
        )
        logs = [replica_log(tmp_path / f"spu-{n}", "orders") for n in range(3)]
        assert logs[0] == logs[1] == logs[2]
        assert [o for o, _, _ in logs[0]] == list(range(1000))
        assert {e for _, e, _ in logs[0]} == {desc.leader_epoch}


def test_controller_restart_keeps_metadata_and_a_leader_restarted_meanwhile_leads_no_more(
    tmp_path: Path,
) -> None:
    """Data flows without the controller, and a restarted one carries on: the metadata is
    kept, and so is which process of each SPU it last heard. Then the leader's host loses
    power too: its log loses the tail its flush policy (`never`) left in the page cache,
    records acknowledged with acks=all that the followers hold. Back before the controller,
    it must not lead on at its epoch (its writes would reuse offsets the followers hold with
    other records, which truncation by epoch cannot see): a follower leads at a new epoch,
    and every acknowledged record is there once."""
    config = dataclasses.replace(REPLICATED, flush=FlushPolicy(mode="never"))
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("keep", config)
        client.produce("keep", 0, values(60, "a"), acks=Acks.COMMITTED)
        before = cluster.metadata()
        leader, epoch, _, _ = partition_state(cluster, "keep")
        cluster.signal("sc", signal.SIGKILL)
        for n in range(4):  # no controller: still served
            client.produce("keep", 0, values(10, f"b{n}-"), acks=Acks.COMMITTED)
        assert client.fetch("keep", 0, 0, 1 << 20).batches[0].values() == values(60, "a")
        cluster.signal(f"spu-{leader}", signal.SIGKILL)
        lose_unflushed_tail(tmp_path / f"spu-{leader}", "keep", keep=70)  # b1-b3 were acknowledged
        cluster.start_spu(leader)  # beating when the controller comes back: within its session
        cluster.start_controller()
        client.produce("keep", 0, values(10, "c"), acks=Acks.COMMITTED)
        acked = values(60, "a") + [v for n in range(4) for v in values(10, f"b{n}-")] + values(10, "c")
        assert [bytes(v) for b in client.fetch("keep", 0, 0, 1 << 20).batches for v in b.values()] == acked
        assert client.list_offsets("keep", 0, "latest", isolation="committed") == len(acked)
        assert partition_state(cluster, "keep")[1] > epoch
        after = cluster.metadata()
        assert after["spus"] == before["spus"]
        assert {k: v for k, v in after["topics"]["keep"].items() if k != "partitions"} == {
            k: v for k, v in before["topics"]["keep"].items() if k != "partitions"
        }
        wait_for("the old leader to rejoin", lambda: leader in partition_state(cluster, "keep")[3])
        logs = [replica_log(tmp_path / f"spu-{n}", "keep") for n in range(3)]
        assert logs[0] == logs[1] == logs[2] and [v for _, _, v in logs[0]] == acked
        assert {e for _, e, _ in logs[0][:100]} == {epoch} and min(e for _, e, _ in logs[0][100:]) > epoch


def test_not_enough_replicas_refuses_acks_all_and_writes_nothing(tmp_path: Path) -> None:
    strict = TopicConfig(replication_factor=3, min_in_sync_replicas=3, replica_lag_time_max_ms=500)
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("strict", strict)
        client.produce("strict", 0, values(3), acks=Acks.COMMITTED)
        leader, _, replicas, _ = partition_state(cluster, "strict")
        follower = next(r for r in replicas if r != leader)
        cluster.signal(f"spu-{follower}", signal.SIGKILL)
        wait_for("the in-sync set to shrink", lambda: len(partition_state(cluster, "strict")[3]) == 2)
        end = client.list_offsets("strict", 0, "latest", isolation="uncommitted")
        with pytest.raises(SpuError) as err:
            client.produce("strict", 0, values(3), acks=Acks.COMMITTED)
        assert err.value.code is ErrorCode.NOT_ENOUGH_REPLICAS
        assert "min_in_sync_replicas=3" in str(err.value)
        assert client.list_offsets("strict", 0, "latest", isolation="uncommitted") == end
        client.produce("strict", 0, values(3), acks=Acks.LEADER)  # the leader alone may take it
        cluster.start_spu(follower)
        wait_for("the follower to rejoin", lambda: len(partition_state(cluster, "strict")[3]) == 3)
        client.produce("strict", 0, values(3), acks=Acks.COMMITTED)
        assert client.list_offsets("strict", 0, "latest", isolation="committed") == 9


def test_leader_sigkill_elects_an_in_sync_replica_and_clients_follow(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("failover", REPLICATED)
        client.produce("failover", 0, values(100, "a"), acks=Acks.COMMITTED)
        leader, epoch, _, isr = partition_state(cluster, "failover")
        cluster.signal(f"spu-{leader}", signal.SIGKILL)
        # the client finds the new leader by itself (retrying through the election)
        client.produce("failover", 0, values(100, "b"), acks=Acks.COMMITTED)
        new_leader, new_epoch, _, new_isr = partition_state(cluster, "failover")
        assert new_leader != leader and new_leader in isr and new_epoch == epoch + 1
        assert leader not in new_isr
        read = client.fetch("failover", 0, 0, 1 << 20)
        got = [v for b in read.batches for v in b.values()]
        assert got == values(100, "a") + values(100, "b")
        cluster.start_spu(leader)
        wait_for("the old leader to rejoin", lambda: leader in partition_state(cluster, "failover")[3])
        logs = [replica_log(tmp_path / f"spu-{n}", "failover") for n in range(3)]
        assert logs[0] == logs[1] == logs[2]


def test_a_diverged_replica_truncates_to_the_new_leaders_epoch(tmp_path: Path) -> None:
    """Records the old leader took alone (acks=leader) are cut when it comes back under a
    leader elected without them (unclean election: the only way they can be missing)."""
    config = TopicConfig(replication_factor=2, replica_lag_time_max_ms=500, unclean_leader_election=True)
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("diverge", config)
        client.produce("diverge", 0, values(10, "both"), acks=Acks.COMMITTED)
        leader, _, replicas, _ = partition_state(cluster, "diverge")
        follower = next(r for r in replicas if r != leader)
        cluster.signal(f"spu-{follower}", signal.SIGSTOP)
        wait_for(
            "the follower to leave the in-sync set",
            lambda: partition_state(cluster, "diverge")[3] == [leader],
        )
        client.produce("diverge", 0, values(5, "lost"), acks=Acks.LEADER)
        cluster.signal(f"spu-{leader}", signal.SIGKILL)
        cluster.signal(f"spu-{follower}", signal.SIGCONT)
        wait_for("the unclean election", lambda: partition_state(cluster, "diverge")[0] == follower)
        client.produce("diverge", 0, values(7, "new"), acks=Acks.COMMITTED)
        cluster.start_spu(leader)
        wait_for("the old leader to rejoin", lambda: leader in partition_state(cluster, "diverge")[3])
        old, new = (
            replica_log(tmp_path / f"spu-{leader}", "diverge"),
            replica_log(tmp_path / f"spu-{follower}", "diverge"),
        )
        assert old == new
        assert [v for _, _, v in new] == values(10, "both") + values(7, "new")
        assert len({e for _, e, _ in new}) == 2, "two epochs: the first leader's and the new one's"


def test_a_resumed_old_leader_is_fenced(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("fence", REPLICATED)
        client.produce("fence", 0, values(10), acks=Acks.COMMITTED)
        leader, epoch, _, _ = partition_state(cluster, "fence")
        old_addr = cluster.members[f"spu-{leader}"].addr
        cluster.signal(f"spu-{leader}", signal.SIGSTOP)
        wait_for("a new leader", lambda: partition_state(cluster, "fence")[0] != leader)

        async def produce_at_old_leader() -> ErrorCode:
            conn = await Connection.open(old_addr, 5.0)  # the connection is accepted by the kernel
            cluster.signal(f"spu-{leader}", signal.SIGCONT)
            fields = {"topic": "fence", "partition": 0, "acks": int(Acks.LEADER)}
            try:
                await conn.request(ApiKey.PRODUCE, fields, [encode_batch(values(1, "stale"))], 10.0)
            except SpuError as err:
                return err.code
            finally:
                await conn.close()
            return ErrorCode.NONE

        assert asyncio.run(produce_at_old_leader()) is ErrorCode.NOT_LEADER
        assert partition_state(cluster, "fence")[1] == epoch + 1
        client.produce("fence", 0, values(10, "after"), acks=Acks.COMMITTED)
        got = [v for b in client.fetch("fence", 0, 0, 1 << 20).batches for v in b.values()]
        assert got == values(10) + values(10, "after")
        assert b"stale0" not in [v for _, _, v in replica_log(tmp_path / f"spu-{leader}", "fence")]


def test_a_restarted_spu_without_metadata_yet_says_not_leader_not_unknown_topic(tmp_path: Path) -> None:
    """A client whose leader map still names a restarted SPU reaches it before the SPU has
    heard the controller: it must be told to look again (NOT_LEADER, which it retries), not
    that the topic does not exist (a flow's connector failed on that)."""
    from concurrent.futures import ThreadPoolExecutor

    from contraflow.spu.node.idempotence.producers import ProducerTable
    from contraflow.spu.node.partitions import Partitions
    from contraflow.spu.node.replication.replicas import ReplicaManager
    from contraflow.spu.node.signals import PartitionSignals
    from contraflow.spu.protocol.cluster_metadata import ClusterMetadata
    from contraflow.spu.storage.store import Store

    async def isr_unchanged(tp: object, epoch: int, isr: list[int]) -> list[int]:
        return isr

    async def answers() -> tuple[ErrorCode, ErrorCode]:
        with ThreadPoolExecutor(1) as executor, Store(tmp_path / "spu") as store:
            partitions = Partitions(store, lambda tp: None)
            partitions.producers = ProducerTable()
            signals = PartitionSignals(asyncio.get_running_loop())
            replicas = ReplicaManager(1, partitions, signals, executor, isr_unchanged, lambda: False)
            with pytest.raises(SpuError) as before:
                replicas.leading.leader(("t", 0))
            await replicas.apply(ClusterMetadata(version=1))
            with pytest.raises(SpuError) as after:
                replicas.leading.leader(("t", 0))
            await replicas.close()
            return before.value.code, after.value.code

    assert asyncio.run(answers()) == (ErrorCode.NOT_LEADER, ErrorCode.UNKNOWN_TOPIC)
