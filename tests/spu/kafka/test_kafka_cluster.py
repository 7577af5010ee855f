"""The Kafka listener on an SPU cluster (three SPU processes and a controller on
loopback): Metadata names every SPU and each partition's real leader, replicas
and in-sync set; produces and reads go to the leader only; acks=-1 waits for
the in-sync replicas; and librdkafka's idempotent producer and its consumer
follow a new leader after the old one is SIGKILLed, with nothing lost or doubled."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_harness import (
    KafkaWire,
    consume,
    consumer,
    end_offset,
    list_end_offset,
    produce,
    produce_body,
    produce_result,
    sequenced_batch,
)
from tests.cli_process import run_cli
from tests.spu.cluster_harness import local_cluster, partition_state, replica_log, wait_for

from contraflow.spu.cli.local_cluster import LocalCluster
from contraflow.spu.kafka.apis.base import ApiKey
from contraflow.spu.kafka.errors import KafkaErrorCode
from contraflow.spu.kafka.wire import Reader, Writer
from contraflow.spu.protocol.internal_topics import OFFSETS_TOPIC

TOPIC = "events"


def create_replicated(cluster: LocalCluster, partitions: int = 1) -> None:
    """A topic on all three SPUs, two of them needed in sync for acks=all, created with
    Kafka's AdminClient; returns once every replica is in sync."""
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    topic = NewTopic(TOPIC, partitions, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([topic])[TOPIC].result(15)
    for n in range(partitions):
        wait_for("every replica in sync", lambda n=n: partition_state(cluster, TOPIC, n)[3] == [0, 1, 2])


def kafka_addr(cluster: LocalCluster, spu: int) -> str:
    return cluster.members[f"spu-{spu}"].kafka_addr


def init_producer_id(wire: KafkaWire) -> int:
    reply = wire.request(ApiKey.INIT_PRODUCER_ID, 1, Writer().string(None).int32(60000), cid=1)
    reply.int32()  # throttle time
    assert reply.int16() == 0
    return reply.int64()


def test_metadata_names_every_spu_and_each_partitions_leader(tmp_path: Path) -> None:
    with local_cluster(tmp_path / "cluster", kafka=True) as cluster:
        create_replicated(cluster, partitions=2)
        metadata = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap}).list_topics(timeout=10)
        assert {n: f"{b.host}:{b.port}" for n, b in metadata.brokers.items()} == {
            spu: kafka_addr(cluster, spu) for spu in (0, 1, 2)
        }
        for n, told in metadata.topics[TOPIC].partitions.items():
            leader, _, replicas, isr = partition_state(cluster, TOPIC, n)
            assert (told.leader, sorted(told.replicas), sorted(told.isrs)) == (leader, sorted(replicas), isr)

        # Only the leader takes produces and answers offsets: a follower says who does not lead.
        leader = partition_state(cluster, TOPIC, 0)[0]
        follower = next(spu for spu in (0, 1, 2) if spu != leader)
        wire = KafkaWire(kafka_addr(cluster, follower))
        record = sequenced_batch(-1, -1, [b"x"])
        reply = wire.request(ApiKey.PRODUCE, 5, produce_body(TOPIC, record), cid=2)
        assert produce_result(reply)[0] == KafkaErrorCode.NOT_LEADER_OR_FOLLOWER
        reply = wire.request(ApiKey.LIST_OFFSETS, 1, list_end_offset(TOPIC), cid=3)
        assert end_offset(reply)[0] == KafkaErrorCode.NOT_LEADER_OR_FOLLOWER
        wire.close()

        # acks=-1 needs min.insync.replicas in sync; acks=1 only the leader.
        for spu in (0, 1, 2):
            if spu != leader:
                cluster.signal(f"spu-{spu}", signal.SIGKILL)
        wire = KafkaWire(kafka_addr(cluster, leader))
        assert refused_once_out_of_sync(wire, record) == KafkaErrorCode.NOT_ENOUGH_REPLICAS
        reply = wire.request(ApiKey.PRODUCE, 5, produce_body(TOPIC, record, acks=1), cid=99)
        assert produce_result(reply)[0] == 0
        wire.close()


def refused_once_out_of_sync(wire: KafkaWire, record: bytes) -> int:
    """Produce with acks=-1 until refused: while the leader still counts the dead followers in
    sync, a produce waits until they are dropped and then succeeds (as in Kafka)."""
    deadline = time.monotonic() + 30
    for cid in range(10, 90):
        error = produce_result(
            wire.request(ApiKey.PRODUCE, 5, produce_body(TOPIC, record, acks=-1), cid=cid)
        )[0]
        if error != 0 or time.monotonic() > deadline:
            return error
    return 0


def leads(wire: KafkaWire) -> bool:
    """Whether the SPU behind `wire` serves the topic's partition 0 (it learns that it leads
    with its next heartbeat after the controller decided)."""
    return end_offset(wire.request(ApiKey.LIST_OFFSETS, 1, list_end_offset(TOPIC), cid=7))[0] == 0


def next_leader(cluster: LocalCluster, old: int, timeout_s: float = 60.0) -> tuple[int, KafkaWire]:
    """The SPU that leads partition 0 after `old`, once it knows it does, with a connection to it.
    The controller may move the leadership again meanwhile (an SPU that missed a heartbeat on a
    loaded machine): whichever replica leads when one answers as leader is the next leader."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        candidate = partition_state(cluster, TOPIC)[0]
        if candidate not in (old, -1):
            wire = KafkaWire(kafka_addr(cluster, candidate))
            if leads(wire):
                return candidate, wire
            wire.close()
        time.sleep(0.2)
    raise AssertionError(f"no SPU took over partition 0 from SPU {old} within {timeout_s} s")


def test_a_retried_batch_is_recognised_by_the_next_leader(tmp_path: Path) -> None:
    """An idempotent producer's batch, acknowledged by the old leader and copied to the
    others, sent again to the new leader (a retry after a lost answer): the same offsets,
    appended once."""
    with local_cluster(tmp_path / "cluster", kafka=True) as cluster:
        create_replicated(cluster)
        leader = partition_state(cluster, TOPIC)[0]
        wire = KafkaWire(kafka_addr(cluster, leader))
        producer_id = init_producer_id(wire)
        first = sequenced_batch(producer_id, 0, [b"a", b"b"])
        assert produce_result(wire.request(ApiKey.PRODUCE, 5, produce_body(TOPIC, first), cid=2)) == (0, 0)
        wire.close()
        cluster.signal(f"spu-{leader}", signal.SIGKILL)
        new_leader, wire = next_leader(cluster, leader)
        retried = wire.request(ApiKey.PRODUCE, 5, produce_body(TOPIC, first), cid=3)
        assert produce_result(retried) == (0, 0)
        second = sequenced_batch(producer_id, 2, [b"c"])
        assert produce_result(wire.request(ApiKey.PRODUCE, 5, produce_body(TOPIC, second), cid=4)) == (0, 2)
        gap = sequenced_batch(producer_id, 9, [b"d"])
        reply = wire.request(ApiKey.PRODUCE, 5, produce_body(TOPIC, gap), cid=5)
        assert produce_result(reply)[0] == KafkaErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        wire.close()
        values = [value for _, _, value in replica_log(cluster.root / f"spu-{new_leader}", TOPIC)]
        assert values == [b"a", b"b", b"c"]


def test_cluster_start_gives_every_spu_a_kafka_listener(tmp_path: Path) -> None:
    """`contraflow cluster start --kafka`: the Kafka addresses printed as a bootstrap list;
    a Kafka client produces through them and `contraflow consume` reads the records."""
    root = tmp_path / "local"
    started = run_cli("cluster", "start", "--spus", "2", "--kafka", "--data-dir", root, timeout=120)
    try:
        assert started.returncode == 0, started.stderr
        lines = dict(line.split(" ", 1) for line in started.stdout.splitlines())
        bootstrap = lines["kafka"].removeprefix("bootstrap.servers=")
        assert len(bootstrap.split(",")) == 2
        status = run_cli("cluster", "status", "--data-dir", root).stdout
        assert sum(f" kafka {addr}" in status for addr in bootstrap.split(",")) == 2, status
        produce(bootstrap, "lines", [(None, b"one"), (None, b"two")], acks="all")
        consumed = run_cli("consume", "lines", "-B", "-d", "--spu", lines["spus"])
        assert consumed.stdout.splitlines() == ["one", "two"], consumed.stderr
    finally:
        run_cli("cluster", "stop", "--data-dir", root)


RECORDS = 20_000


def produce_all(bootstrap: str, delivered: list[int], errors: list[Any]) -> None:
    """RECORDS values with librdkafka's idempotent producer (acks=all), paced so the
    stream spans the leader's death."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 500,
            "message.timeout.ms": 90_000,
        }
    )

    def report(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            delivered.append(int(msg.value()))
        else:
            errors.append(err)

    for i in range(RECORDS):
        producer.produce(TOPIC, b"%d" % i, on_delivery=report)
        if i % 500 == 499:
            producer.poll(0)
            time.sleep(0.05)
    producer.flush(90)


def consume_all(bootstrap: str, seen: list[int], errors: list[Any], stop: threading.Event) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    try:
        while not stop.is_set():
            for message in consumer.consume(1000, 0.2):
                if message.error() is None:
                    seen.append(int(message.value()))
                elif not message.error().retriable():
                    errors.append(message.error())
    finally:
        consumer.close()


def test_kafka_clients_follow_a_new_leader_after_a_sigkill(tmp_path: Path) -> None:
    with local_cluster(tmp_path / "cluster", kafka=True) as cluster:
        create_replicated(cluster)
        leader = partition_state(cluster, TOPIC)[0]
        bootstrap = cluster.kafka_bootstrap
        delivered: list[int] = []
        seen: list[int] = []
        produce_errors: list[Any] = []
        consume_errors: list[Any] = []
        stop = threading.Event()
        producing = threading.Thread(target=produce_all, args=(bootstrap, delivered, produce_errors))
        consuming = threading.Thread(target=consume_all, args=(bootstrap, seen, consume_errors, stop))
        producing.start()
        consuming.start()
        try:
            wait_for("a quarter of the records read", lambda: len(seen) >= RECORDS // 4, 60)
            cluster.signal(f"spu-{leader}", signal.SIGKILL)
            delivered_before_the_kill = len(delivered)
            wait_for("a new leader", lambda: partition_state(cluster, TOPIC)[0] not in (leader, -1))
            cluster.start_spu(leader)  # back as a follower: it catches up and rejoins
            producing.join(120)
            wait_for("every record read", lambda: len(seen) >= RECORDS, 60)
            time.sleep(1.0)  # anything read twice would show up by now
        finally:
            stop.set()
            producing.join(120)
            consuming.join(30)
        assert delivered_before_the_kill < RECORDS // 2  # the leader died mid-stream
        assert produce_errors == [] and consume_errors == []
        assert sorted(delivered) == list(range(RECORDS))
        assert seen == list(range(RECORDS))  # in order, each once
        new_leader = partition_state(cluster, TOPIC)[0]
        logged = [int(value) for _, _, value in replica_log(cluster.root / f"spu-{new_leader}", TOPIC)]
        assert logged == list(range(RECORDS))


def test_group_offsets_survive_the_coordinators_sigkill(tmp_path: Path) -> None:
    """A group's committed offsets live in the cluster's replicated consumer-offsets table,
    whose leader coordinates the group: after that SPU is SIGKILLed, the group carries on
    from its commit at the next coordinator."""
    with local_cluster(tmp_path / "cluster", kafka=True) as cluster:
        create_replicated(cluster)
        bootstrap = cluster.kafka_bootstrap
        produce(bootstrap, TOPIC, [(None, b"%d" % i) for i in range(100)], acks="all")
        first = consumer(bootstrap, "billing")
        first.subscribe([TOPIC])
        taken = consume(first, 60, timeout_s=60)
        first.commit(message=taken[-1], asynchronous=False)
        first.close()
        coordinator = partition_state(cluster, OFFSETS_TOPIC)[0]
        cluster.signal(f"spu-{coordinator}", signal.SIGKILL)
        wait_for(
            "a new coordinator", lambda: partition_state(cluster, OFFSETS_TOPIC)[0] not in (coordinator, -1)
        )
        second = consumer(bootstrap, "billing")
        second.subscribe([TOPIC])
        rest = consume(second, 40, timeout_s=90)
        second.close()
        assert [int(m.value()) for m in taken + rest] == list(range(100))
        assert is_internal(KafkaWire(bootstrap.split(",")[0]), OFFSETS_TOPIC)


def is_internal(wire: KafkaWire, topic: str) -> bool:
    """Metadata v1's internal flag of `topic` (confluent-kafka does not expose it)."""
    reply = wire.request(ApiKey.METADATA, 1, Writer().array([topic], Writer.string), cid=11)
    reply.array(lambda r: (r.int32(), r.string(), r.int32(), r.nullable_string()))  # brokers
    reply.int32()  # controller
    [(error, name, internal)] = reply.array(
        lambda r: (
            r.int16(),
            r.string(),
            r.boolean(),
            r.array(
                lambda p: (p.int16(), p.int32(), p.int32(), p.array(Reader.int32), p.array(Reader.int32))
            ),
        )[:3]
    )
    wire.close()
    assert (error, name) == (0, topic)
    return internal
