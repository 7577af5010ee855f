"""The kafka_consumer and kafka_producer connectors (confluent-kafka) against the SPU's
Kafka listener, built the way the runtime builds them."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import TopicPartition
from kafka_harness import consume, consumer, create_topic, produce
from tests.connectors.support import make, run, sink_event

from contraflow.connectors.base import ConnectorConfigError, SourceData
from contraflow.connectors.kafka_consumer import KafkaConsumerConnector


def _consumer_connector(bootstrap: str, topic: str, group: str, mode: object) -> KafkaConsumerConnector:
    conn = make(
        "kafka_consumer", {"brokers": [bootstrap], "group_id": group, "topics": [topic], "mode": mode}
    )
    assert isinstance(conn, KafkaConsumerConnector)
    return conn


async def _pull(conn: KafkaConsumerConnector, count: int) -> list[SourceData]:
    pulled = []
    for _ in range(count):
        item = await asyncio.wait_for(conn.pull(), 20)
        assert item is not None
        pulled.append(item)
    return pulled


def _committed(bootstrap: str, group: str, topic: str) -> int:
    probe = consumer(bootstrap, group)
    try:
        [tp] = probe.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset
    finally:
        probe.close()


def test_producer_sets_key_headers_and_partition_from_metadata(bootstrap: str, fresh_name: str) -> None:
    create_topic(bootstrap, fresh_name, partitions=3)
    conn = make("kafka_producer", {"brokers": [bootstrap], "topic": fresh_name, "key": "default-key"})
    events = [
        sink_event({"n": 1}, {"kafka_producer": {"key": "k1", "headers": {"trace": "t-1"}, "partition": 2}}),
        sink_event({"n": 2}, {"kafka_producer": {"partition": 1, "timestamp": 1_700_000_000_000}}),
    ]

    async def body() -> None:
        await conn.connect()
        await conn.send(events)
        await conn.close()

    run(body(), timeout=40)
    cons = consumer(bootstrap, f"{fresh_name}-g")
    cons.assign([TopicPartition(fresh_name, p, 0) for p in range(3)])
    got = {m.partition(): m for m in consume(cons, 2)}
    cons.close()
    assert (got[2].key(), got[2].value(), got[2].headers()) == (b"k1", b'{"n":1}\n', [("trace", b"t-1")])
    assert (got[1].key(), got[1].timestamp()[1]) == (b"default-key", 1_700_000_000_000)


def test_transactional_consumer_commits_only_acknowledged_records(bootstrap: str, fresh_name: str) -> None:
    create_topic(bootstrap, fresh_name)
    produce(bootstrap, fresh_name, [(b"key", f'{{"n":{i}}}'.encode()) for i in range(6)])
    group = f"{fresh_name}-group"

    async def first_run() -> None:
        conn = _consumer_connector(bootstrap, fresh_name, group, "transactional")
        await conn.connect()
        pulled = await _pull(conn, 6)
        assert [p.data for p in pulled] == [f'{{"n":{i}}}'.encode() for i in range(6)]
        meta = pulled[0].meta["kafka_consumer"]  # type: ignore[index]
        assert (meta["topic"], meta["partition"], meta["offset"], meta["key"]) == (fresh_name, 0, 0, "key")
        for item in (pulled[0], pulled[1], pulled[3]):  # 0, 1 and 3: the acknowledged prefix ends at 2
            await conn.ack(item.token)
        await conn.close()  # leaves the group, committing what was stored

    run(first_run(), timeout=60)
    assert _committed(bootstrap, group, fresh_name) == 2

    async def second_run() -> None:
        conn = _consumer_connector(bootstrap, fresh_name, group, "transactional")
        await conn.connect()
        again = await _pull(conn, 4)
        assert [p.data for p in again] == [f'{{"n":{i}}}'.encode() for i in range(2, 6)]
        await conn.close()

    run(second_run(), timeout=60)


def test_failed_event_is_consumed_again_when_retrying(bootstrap: str, fresh_name: str) -> None:
    create_topic(bootstrap, fresh_name)
    produce(bootstrap, fresh_name, [(None, f'{{"n":{i}}}'.encode()) for i in range(5)])
    mode = {"custom": {"rdkafka_options": {"fetch.wait.max.ms": 50}, "retry_failed_events": True}}

    async def body() -> None:
        conn = _consumer_connector(bootstrap, fresh_name, f"{fresh_name}-group", mode)
        await conn.connect()
        pulled = await _pull(conn, 4)
        await conn.ack(pulled[0].token)
        await conn.fail(pulled[1].token)
        await conn.ack(pulled[2].token)  # after the failed one: must not move the commit past it
        again = await _pull(conn, 4)
        assert [p.data for p in again] == [f'{{"n":{i}}}'.encode() for i in range(1, 5)]
        for item in again:
            await conn.ack(item.token)
        await conn.close()

    run(body(), timeout=60)
    assert _committed(bootstrap, f"{fresh_name}-group", fresh_name) == 5


def test_performance_mode_commits_without_acks(bootstrap: str, fresh_name: str) -> None:
    create_topic(bootstrap, fresh_name)
    produce(bootstrap, fresh_name, [(None, b'{"n":0}'), (None, b'{"n":1}')])
    group = f"{fresh_name}-group"

    async def body() -> None:
        conn = _consumer_connector(bootstrap, fresh_name, group, "performance")
        await conn.connect()
        await _pull(conn, 2)
        await conn.close()

    run(body(), timeout=60)
    assert _committed(bootstrap, group, fresh_name) == 2


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"brokers": "nohost", "group_id": "g", "topics": ["t"]}, "'brokers' must be a list of 'host:port'"),
        ({"brokers": ["h:1"], "group_id": "g", "topics": []}, "'topics' must be a non-empty list"),
        ({"brokers": ["h:1"], "group_id": "g", "topics": ["t"], "mode": "fast"}, "'mode' must be"),
        ({"brokers": ["h:1"], "topics": ["t"]}, "missing config key 'group_id'"),
    ],
)
def test_consumer_config_errors_name_the_key(config: dict[str, object], message: str) -> None:
    with pytest.raises(ConnectorConfigError, match=message):
        make("kafka_consumer", config)


def test_producer_config_errors_name_the_key() -> None:
    with pytest.raises(ConnectorConfigError, match="'rdkafka_options' setting 'x' must be"):
        make("kafka_producer", {"brokers": ["h:1"], "topic": "t", "rdkafka_options": {"x": [1]}})
    with pytest.raises(ConnectorConfigError, match="missing config key 'topic'"):
        make("kafka_producer", {"brokers": ["h:1"]})
