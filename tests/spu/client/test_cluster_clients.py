"""Clients of an SPU cluster: bootstrap lists on the command line, leader routing,
idempotent retries across a failover, streams that follow a new leader, and
`contraflow cluster start|status|stop`."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import orjson
import pytest
from tests.cli_process import run_cli
from tests.spu.cluster_harness import (
    REPLICATED,
    local_cluster,
    partition_state,
    replica_log,
    values,
    wait_for,
)

from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import Acks, ApiKey, ErrorCode, SpuError
from contraflow.spu.protocol.batch import encode_batch
from contraflow.spu.protocol.idempotence import new_producer_id, producer_field
from contraflow.spu.protocol.topics import TopicConfig
from contraflow.spu.rpc.client import Connection


async def produce_raw(
    addr: str, topic: str, batch: bytearray, acks: Acks = Acks.COMMITTED
) -> tuple[int, int]:
    """One PRODUCE to exactly this SPU (no routing, no retry): what a retry on the wire looks like."""
    conn = await Connection.open(addr, 5.0)
    try:
        fields = {"topic": topic, "partition": 0, "acks": int(acks)}
        answer = (await conn.request(ApiKey.PRODUCE, fields, [batch], 30.0)).fields
        return int(answer["base_offset"]), int(answer["last_offset"])
    finally:
        await conn.close()


def test_the_command_line_takes_a_bootstrap_list(tmp_path: Path) -> None:
    with local_cluster(tmp_path / "cluster") as cluster:
        spu = ["--spu", cluster.bootstrap]
        created = run_cli(
            "topic", "create", "lines", "--replication-factor", "3", "--min-in-sync-replicas", "2", *spu
        )
        assert created.returncode == 0, created.stderr
        produced = run_cli("produce", "lines", "--acks", "all", *spu, stdin="one\ntwo\nthree\n")
        assert produced.returncode == 0, produced.stderr
        consumed = run_cli("consume", "lines", "-B", "-d", *spu)
        assert consumed.stdout.splitlines() == ["one", "two", "three"]

        def described() -> dict[str, int | list[int]]:
            (p0,) = orjson.loads(run_cli("topic", "describe", "lines", "--json", *spu).stdout)["partitions"]
            return dict(p0)

        # offsets come from the leader's heartbeats: a moment after the produce at most
        wait_for("the leader's report", lambda: described()["high_watermark"] == 3)
        p0 = described()
        assert sorted(p0["replicas"]) == [0, 1, 2] == sorted(p0["in_sync_replicas"])  # type: ignore[arg-type]
        assert p0["leader_epoch"] == 1 and p0["log_end_offset"] == 3 and p0["leader"] in (0, 1, 2)
        text = run_cli("topic", "describe", "lines", *spu).stdout
        assert "replication factor: 3, min in-sync replicas: 2" in text
        # only one address of the three, not the leader's perhaps: routing finds the leader
        for member in cluster.spus():
            one = run_cli("consume", "lines", "-B", "-d", "--spu", member.addr)
            assert one.stdout.splitlines() == ["one", "two", "three"], one.stderr
        bad = run_cli("produce", "lines", "--acks", "most", *spu, stdin="x\n")
        assert bad.returncode != 0 and "most" in bad.stderr


def test_a_resent_batch_is_written_once_even_after_a_failover(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("once", REPLICATED)
        producer = new_producer_id()
        leader, _, _, _ = partition_state(cluster, "once")
        leader_addr = cluster.members[f"spu-{leader}"].addr
        first = encode_batch(values(10, "first"), producer_id=producer_field(producer, 0))
        assert asyncio.run(produce_raw(leader_addr, "once", first)) == (0, 9)
        assert asyncio.run(produce_raw(leader_addr, "once", first)) == (0, 9), (
            "a retry is answered, not appended"
        )
        second = encode_batch(values(10, "second"), producer_id=producer_field(producer, 1))
        assert asyncio.run(produce_raw(leader_addr, "once", second)) == (10, 19)
        gap = encode_batch(values(1, "gap"), producer_id=producer_field(producer, 5))
        with pytest.raises(SpuError) as err:
            asyncio.run(produce_raw(leader_addr, "once", gap))
        assert err.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE
        cluster.signal(f"spu-{leader}", signal.SIGKILL)
        new_addr = ""

        def a_new_leader_serves() -> bool:
            """Whichever replica leads now (the controller may move it again on a loaded machine)."""
            nonlocal new_addr
            candidate = partition_state(cluster, "once")[0]
            if candidate in (leader, -1):
                return False
            new_addr = cluster.members[f"spu-{candidate}"].addr
            return _leads(new_addr)

        # the answer to `second` was "lost": the producer resends it to the new leader
        wait_for("a new leader that takes produces", a_new_leader_serves, timeout_s=60.0)
        assert asyncio.run(produce_raw(new_addr, "once", second)) == (10, 19)
        got = [v for b in client.fetch("once", 0, 0, 1 << 20).batches for v in b.values()]
        assert got == values(10, "first") + values(10, "second")


def _leads(addr: str) -> bool:
    async def ask() -> bool:
        conn = await Connection.open(addr, 5.0)
        try:
            fields = {"topic": "once", "partition": 0, "spec": "latest"}
            await conn.request(ApiKey.LIST_OFFSETS, fields, (), 5.0)
            return True
        except SpuError:
            return False
        finally:
            await conn.close()

    return asyncio.run(ask())


def test_a_committed_stream_follows_the_new_leader(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("tail", REPLICATED)
        client.produce("tail", 0, values(5, "x"), acks=Acks.COMMITTED)
        seen: list[bytes] = []
        with client.stream("tail", 0, 0, isolation="committed") as stream:
            for result in stream:
                seen += [bytes(v) for b in result.batches for v in b.values()]
                if len(seen) >= 5:
                    break
            leader = partition_state(cluster, "tail")[0]
            cluster.signal(f"spu-{leader}", signal.SIGKILL)
            client.produce("tail", 0, values(5, "y"), acks=Acks.COMMITTED)
            for result in stream:
                seen += [bytes(v) for b in result.batches for v in b.values()]
                if len(seen) >= 10:
                    break
        assert seen == values(5, "x") + values(5, "y")


def test_cluster_start_status_stop(tmp_path: Path) -> None:
    root = tmp_path / "local"
    started = run_cli("cluster", "start", "--spus", "2", "--data-dir", root, timeout=120)
    try:
        assert started.returncode == 0, started.stderr
        addrs = started.stdout.splitlines()[1].split()[1]
        assert len(addrs.split(",")) == 2
        again = run_cli("cluster", "start", "--data-dir", root)
        assert again.returncode != 0 and "already runs" in again.stderr
        assert run_cli("topic", "create", "t", "--replication-factor", "2", "--spu", addrs).returncode == 0
        status = run_cli("cluster", "status", "--data-dir", root).stdout
        assert status.count("running") == 3, status
        assert "topic t/0: leader" in status and "in-sync [0, 1]" in status
    finally:
        stopped = run_cli("cluster", "stop", "--data-dir", root)
    assert stopped.returncode == 0 and "stopped 3 process(es)" in stopped.stdout
    assert run_cli("cluster", "status", "--data-dir", root).returncode != 0
    assert replica_log(root / "spu-0", "t") == replica_log(root / "spu-1", "t") == []  # the data stays


def test_cluster_options_are_checked_in_one_line(tmp_path: Path) -> None:
    kafka = run_cli("spu", "run", "--sc", "127.0.0.1:1", "--kafka-addr", "nowhere", "--data-dir", tmp_path)
    assert kafka.returncode != 0 and kafka.stderr.startswith("error:") and "HOST:PORT" in kafka.stderr
    bad = run_cli("spu", "run", "--sc", "nowhere", "--data-dir", tmp_path)
    assert bad.returncode != 0 and bad.stderr.startswith("error: --sc: SPU address must be HOST:PORT")
    timeout = run_cli("sc", "run", "--session-timeout", "soon", "--data-dir", tmp_path)
    assert (
        timeout.returncode != 0 and timeout.stderr.startswith("error:") and "Traceback" not in timeout.stderr
    )
    exposed = run_cli("sc", "run", "--addr", "0.0.0.0:0", "--data-dir", tmp_path)
    assert exposed.returncode != 0 and "refusing to serve the controller" in exposed.stderr


def test_consumer_offsets_go_to_the_leader_of_a_partition_only_some_spus_hold(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("narrow", TopicConfig(partitions=3))  # one replica each, on three SPUs
        for p in range(3):
            client.produce("narrow", p, values(4), acks=Acks.COMMITTED)
            client.commit_offset("reader", "narrow", p, 2 + p)
        assert [client.fetch_offset("reader", "narrow", p) for p in range(3)] == [2, 3, 4]


def test_a_deleted_topic_leaves_every_spu_and_can_be_created_again(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster, SpuClient(cluster.bootstrap) as client:
        client.create_topic("gone", REPLICATED)
        client.produce("gone", 0, values(3, "old"), acks=Acks.COMMITTED)
        client.delete_topic("gone")
        assert client.list_topics() == []
        wait_for(
            "the replicas to go",
            lambda: not any((tmp_path / f"spu-{n}/topics/gone").exists() for n in range(3)),
        )
        client.create_topic("gone", REPLICATED)
        client.produce("gone", 0, values(2, "new"), acks=Acks.COMMITTED)
        assert [bytes(v) for b in client.fetch("gone", 0, 0).batches for v in b.values()] == values(2, "new")
