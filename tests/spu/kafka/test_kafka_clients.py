"""Real Kafka clients (confluent-kafka / librdkafka and kafka-python) against the SPU's
Kafka listener: produce, consume, every codec, admin, offsets lookups."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_harness import consume, consumer, create_topic, produce
from tests.cli_process import run_cli

from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu
from kafka import KafkaConsumer, KafkaProducer

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trip_with_every_codec(bootstrap: str, fresh_name: str, codec: str) -> None:
    create_topic(bootstrap, fresh_name, partitions=2)
    records = [(f"k{i}".encode(), f'{{"n": {i}, "codec": "{codec}"}}'.encode() * 4) for i in range(300)]
    produce(bootstrap, fresh_name, records, **{"compression.type": codec, "enable.idempotence": True})
    cons = consumer(bootstrap, f"{fresh_name}-group")
    cons.subscribe([fresh_name])
    got = consume(cons, len(records))
    cons.close()
    assert sorted((m.key(), m.value()) for m in got) == sorted(records)
    # Per partition, offsets run 0, 1, 2... in the order the keys were produced.
    for partition in (0, 1):
        mine = [m for m in got if m.partition() == partition]
        assert [m.offset() for m in mine] == list(range(len(mine)))
        assert [int(m.key()[1:]) for m in mine] == sorted(int(m.key()[1:]) for m in mine)


def test_confluent_kafka_keeps_headers_timestamps_and_null_keys(bootstrap: str, fresh_name: str) -> None:
    create_topic(bootstrap, fresh_name)
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(
        fresh_name, b"one", None, headers=[("trace", b"abc"), ("n", b"1")], timestamp=1_700_000_000_123
    )
    producer.produce(fresh_name, b"two", b"key", timestamp=1_700_000_000_456)
    assert producer.flush(10) == 0
    producer.produce(fresh_name, None, b"gone")  # a tombstone: the log keeps it as an empty value
    assert producer.flush(10) == 0
    cons = consumer(bootstrap, f"{fresh_name}-g")
    cons.assign([TopicPartition(fresh_name, 0, 0)])
    first, second, tombstone = consume(cons, 3)
    cons.close()
    assert (tombstone.key(), tombstone.value() or b"") == (b"gone", b"")
    assert (first.key(), first.value(), first.headers()) == (None, b"one", [("trace", b"abc"), ("n", b"1")])
    assert first.timestamp()[1] == 1_700_000_000_123
    assert (second.key(), second.value(), second.timestamp()[1]) == (b"key", b"two", 1_700_000_000_456)


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_round_trip_with_every_codec(bootstrap: str, fresh_name: str, codec: str | None) -> None:
    create_topic(bootstrap, fresh_name)
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5)
    values = [f"value {i} {codec}".encode() * 3 for i in range(200)]
    for i, value in enumerate(values):
        producer.send(fresh_name, value=value, key=str(i).encode())
    producer.flush(20)
    producer.close()
    cons = KafkaConsumer(
        fresh_name,
        bootstrap_servers=bootstrap,
        group_id=f"{fresh_name}-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=15000,
    )
    got = []
    for message in cons:
        got.append((message.key, message.value))
        if len(got) == len(values):
            break
    cons.commit()
    committed = cons.committed(next(iter(cons.assignment())))
    cons.close()
    assert got == [(str(i).encode(), v) for i, v in enumerate(values)]
    assert committed == len(values)


def _cli(*args: str, stdin: str | None = None) -> str:
    done = run_cli(*args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_what_kafka_produces_contraflow_consume_prints_and_back(
    kafka_spu: EmbeddedSpu, bootstrap: str, fresh_name: str
) -> None:
    create_topic(bootstrap, fresh_name)
    kafka_lines = [f'{{"from": "kafka", "i": {i}}}' for i in range(50)]
    produce(
        bootstrap, fresh_name, [(None, line.encode()) for line in kafka_lines], **{"compression.type": "lz4"}
    )
    printed = _cli("consume", fresh_name, "--spu", kafka_spu.addr, "-B", "-d").splitlines()
    assert printed == kafka_lines

    own_lines = [f'{{"from": "contraflow", "i": {i}}}' for i in range(30)]
    _cli("produce", fresh_name, "--spu", kafka_spu.addr, stdin="\n".join(own_lines) + "\n")
    cons = consumer(bootstrap, f"{fresh_name}-g")
    cons.assign([TopicPartition(fresh_name, 0, len(kafka_lines))])
    got = consume(cons, len(own_lines))
    cons.close()
    assert [m.value().decode() for m in got] == own_lines


def test_admin_create_list_and_delete_topics(kafka_spu: EmbeddedSpu, bootstrap: str, fresh_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(fresh_name, num_partitions=4, replication_factor=1)])[fresh_name].result(10)
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic(fresh_name, num_partitions=1)])[fresh_name].result(10)
    with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR"):
        admin.create_topics([NewTopic(f"{fresh_name}-r3", 1, replication_factor=3)])[
            f"{fresh_name}-r3"
        ].result(10)
    metadata = admin.list_topics(fresh_name, timeout=10)
    partitions = metadata.topics[fresh_name].partitions
    assert sorted(partitions) == [0, 1, 2, 3]
    assert {p.leader for p in partitions.values()} == {0}  # this SPU leads every partition
    with SpuClient(kafka_spu.addr) as own:
        assert own.describe_topic(fresh_name).config.partitions == 4
    admin.delete_topics([fresh_name])[fresh_name].result(10)
    with SpuClient(kafka_spu.addr) as own:
        assert fresh_name not in own.list_topics()


def test_watermarks_and_offsets_for_times(bootstrap: str, fresh_name: str) -> None:
    create_topic(bootstrap, fresh_name)
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(fresh_name, f"v{i}".encode(), timestamp=1_800_000_000_000 + i * 1000)
        producer.flush(10)
    cons = consumer(bootstrap, f"{fresh_name}-g")
    assert cons.get_watermark_offsets(TopicPartition(fresh_name, 0), timeout=10) == (0, 10)
    [found] = cons.offsets_for_times([TopicPartition(fresh_name, 0, 1_800_000_004_500)], timeout=10)
    assert found.offset == 5
    [past] = cons.offsets_for_times([TopicPartition(fresh_name, 0, 1_900_000_000_000)], timeout=10)
    assert past.offset == -1  # nothing at or after that time (librdkafka shows OFFSET_END)
    cons.close()


def test_aiokafka_produces_and_consumes_in_a_group(bootstrap: str, fresh_name: str) -> None:
    """A third client implementation (asyncio, its own protocol code): acks=all, zstd, group commit."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    create_topic(bootstrap, fresh_name, partitions=2)
    values = [f"aio {i}".encode() for i in range(100)]

    async def body() -> tuple[list[bytes], int]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="zstd")
        await producer.start()
        try:
            for i, value in enumerate(values):
                await producer.send(fresh_name, value, key=str(i).encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer_ = AIOKafkaConsumer(
            fresh_name,
            bootstrap_servers=bootstrap,
            group_id=f"{fresh_name}-group",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer_.start()
        try:
            got: list[bytes] = []
            while len(got) < len(values):
                batches = await asyncio.wait_for(consumer_.getmany(timeout_ms=500), 20)
                got += [record.value for records in batches.values() for record in records]
            await consumer_.commit()
            committed = sum([await consumer_.committed(tp) or 0 for tp in consumer_.assignment()])
        finally:
            await consumer_.stop()
        return got, committed

    got, committed = asyncio.run(asyncio.wait_for(body(), 60))
    assert sorted(got) == sorted(values) and committed == len(values)
