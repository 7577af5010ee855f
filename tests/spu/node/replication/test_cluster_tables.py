"""Consumer offsets and control values in a cluster: replicated tables that a new
leader still has after the old one is SIGKILLed, and whose logs compaction keeps bounded."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from tests.spu.cluster_harness import local_cluster, partition_state, replica_log, values, wait_for

from contraflow.spu.client import AsyncSpuClient, SpuClient
from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.protocol.internal_topics import CONTROL_TOPIC, OFFSETS_TOPIC
from contraflow.spu.protocol.topics import TopicConfig

CHURN_KEYS, CHURN_ROUNDS = 10, 8


def churn_control_values(bootstrap: str) -> dict[str, int]:
    """Every key set CHURN_ROUNDS times (a round's keys at once); the values last set."""

    async def churn() -> None:
        client = AsyncSpuClient(bootstrap)
        try:
            for round in range(CHURN_ROUNDS):
                await asyncio.gather(*(client.set_control(f"churn/{k}", round) for k in range(CHURN_KEYS)))
        finally:
            await client.close()

    asyncio.run(churn())
    return {f"churn/{k}": CHURN_ROUNDS - 1 for k in range(CHURN_KEYS)}


def test_committed_offsets_and_control_values_survive_the_leaders_sigkill(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        # the control table's log in small segments, so that compaction runs many times
        client.create_topic(
            CONTROL_TOPIC,
            TopicConfig(partitions=1, replication_factor=3, min_in_sync_replicas=2, segment_bytes=1024),
        )
        client.create_topic("orders", TopicConfig(partitions=2, replication_factor=3, min_in_sync_replicas=2))
        for p in (0, 1):
            client.produce("orders", p, values(50))
        assert client.fetch_offset("billing", "orders", 0) is None
        client.commit_offset("billing", "orders", 0, 20)
        client.commit_offset("billing", "orders", 1, 7)
        client.commit_offset("shipping", "orders", 0, 3)
        client.commit_offset("billing", "orders", 0, 42)  # the last commit of a key wins
        client.set_control("credit/billing/orders", 500)
        client.set_control("signals/flow.p", {"qos": {"open": True}})
        client.set_control("gone", 1)
        client.set_control("gone", None)

        churned: dict[str, int] = {}
        # the tables are topics of the cluster's own, replicated like any other
        for topic in (OFFSETS_TOPIC, CONTROL_TOPIC):
            _, _, replicas, isr = partition_state(cluster, topic)
            assert sorted(replicas) == [0, 1, 2] == isr
        for round, table in enumerate((OFFSETS_TOPIC, CONTROL_TOPIC)):
            leader, epoch, _, _ = partition_state(cluster, table)
            cluster.signal(f"spu-{leader}", signal.SIGKILL)
            # a fresh client (nothing cached) reaches the new leader through the election
            with SpuClient(cluster.bootstrap) as fresh:
                assert fresh.fetch_offset("billing", "orders", 0) == 42 + round
                assert fresh.fetch_offset("billing", "orders", 1) == 7
                assert fresh.fetch_offset("shipping", "orders", 0) == 3
                assert fresh.fetch_offset("shipping", "orders", 1) is None
                assert fresh.get_control("credit/billing/orders") == 500 + round
                assert fresh.get_control("signals/flow.p") == {"qos": {"open": True}}
                assert fresh.get_control("gone") is None
                # a new leader rebuilds the compacted table from its log: the same values
                assert {k: fresh.get_control(k) for k in churned} == churned
                new_leader, new_epoch, _, _ = partition_state(cluster, table)
                assert new_leader != leader and new_epoch > epoch
                # the new leader takes changes, which the old one has once it is back
                fresh.commit_offset("billing", "orders", 0, 43 + round)
                fresh.set_control("credit/billing/orders", 501 + round)
            if round == 0:  # compacted while a replica is down: its log ends before the leader's starts
                churned = churn_control_values(cluster.bootstrap)
            cluster.start_spu(leader)
            for topic in (OFFSETS_TOPIC, CONTROL_TOPIC):
                wait_for(
                    f"SPU {leader} back in sync",
                    lambda t=topic, n=leader: n in partition_state(cluster, t)[3],
                )
        assert client.fetch_offset("billing", "orders", 0) == 44
        assert {k: client.get_control(k) for k in churned} == churned
        # a table's log stays bounded (snapshots, the segments before them dropped), on every replica
        wait_for(
            "every replica's control log compacted",
            lambda: all(
                len(replica_log(tmp_path / f"spu-{n}", CONTROL_TOPIC)) < CHURN_KEYS * CHURN_ROUNDS // 3
                for n in range(3)
            ),
        )
        logs = [replica_log(tmp_path / f"spu-{n}", OFFSETS_TOPIC) for n in range(3)]
        assert logs[0] == logs[1] == logs[2] and len(logs[0]) == 6


def test_offsets_of_an_unknown_topic_are_refused(tmp_path: Path) -> None:
    with local_cluster(tmp_path, spus=1) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("known", TopicConfig())
        client.commit_offset("c", "known", 0, 0)
        with pytest.raises(SpuError) as err:
            client.commit_offset("c", "unknown", 0, 1)
        assert err.value.code is ErrorCode.UNKNOWN_TOPIC
        with pytest.raises(SpuError) as err:
            client.commit_offset("c", "known", 0, -1)
        assert err.value.code is ErrorCode.INVALID_ARGUMENT
        # one SPU: the tables have one replica
        assert partition_state(cluster, OFFSETS_TOPIC)[2] == [0]
        assert [e[0] for e in replica_log(tmp_path / "spu-0", OFFSETS_TOPIC)] == [0]


def test_a_topic_created_again_does_not_inherit_the_old_offsets(tmp_path: Path) -> None:
    with local_cluster(tmp_path, spus=1) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("again", TopicConfig())
        client.produce("again", 0, values(5))
        client.commit_offset("reader", "again", 0, 5)
        client.delete_topic("again")
        client.create_topic("again", TopicConfig())
        assert client.fetch_offset("reader", "again", 0) is None


def test_the_first_requests_at_every_spu_at_once_create_the_table_once(tmp_path: Path) -> None:
    """Each SPU gets a first request before the table's topic exists: one creates it, the
    others find its leader (no UNKNOWN_TOPIC reaches a client)."""
    with local_cluster(tmp_path) as cluster:
        with SpuClient(cluster.bootstrap) as admin:
            admin.create_topic("t", TopicConfig(partitions=3))

        async def commit_everywhere() -> None:
            clients = [AsyncSpuClient(m.addr) for m in cluster.spus()]
            try:
                await asyncio.gather(*(c.commit_offset(f"c{i}", "t", i, i) for i, c in enumerate(clients)))
                got = await asyncio.gather(*(c.fetch_offset(f"c{i}", "t", i) for i, c in enumerate(clients)))
                assert got == [0, 1, 2]
            finally:
                for c in clients:
                    await c.close()

        asyncio.run(commit_everywhere())
        assert OFFSETS_TOPIC in [t for t in cluster.metadata()["topics"]]
