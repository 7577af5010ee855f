"""CreateTopics and DeleteTopics: on the SPU's store, or through the controller of its cluster.

A lone SPU refuses a replication factor above 1 with INVALID_REPLICATION_FACTOR;
a cluster places the replicas itself, so explicit replica assignments are
refused with INVALID_REQUEST. Topic configs Kafka clients commonly set map onto
the SPU's topic settings; any other config is refused with INVALID_CONFIG.
"""

from __future__ import annotations

from dataclasses import dataclass

from contraflow.spu.kafka.apis.base import KafkaRequest, response
from contraflow.spu.kafka.broker import Broker
from contraflow.spu.kafka.errors import KafkaError, KafkaErrorCode, to_kafka_error
from contraflow.spu.kafka.wire import Reader, Writer
from contraflow.spu.protocol.topics import TopicConfig

# Kafka topic config name -> TopicConfig field
CONFIGS = {
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "segment.bytes": "segment_bytes",
    "min.insync.replicas": "min_in_sync_replicas",
}
IGNORED_CONFIGS = {"cleanup.policy": "delete"}  # what the SPU does anyway


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    partitions: int
    replication: int
    assigned: bool
    configs: list[tuple[str, str | None]]


def _read_new_topic(r: Reader) -> NewTopic:
    name, partitions, replication = r.string(), r.int32(), r.int16()
    assignments = r.array(lambda a: (a.int32(), a.array(Reader.int32)))
    configs = r.array(lambda c: (c.string(), c.nullable_string()))
    return NewTopic(name, partitions, replication, bool(assignments), configs)


def topic_config(broker: Broker, topic: NewTopic) -> TopicConfig:
    if topic.replication > 1 and not broker.topology.replicates:
        raise KafkaError(
            KafkaErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {topic.replication}: one SPU serves (an SPU cluster replicates)",
        )
    if topic.replication == 0 or topic.replication < -1:
        raise KafkaError(KafkaErrorCode.INVALID_REPLICATION_FACTOR, f"replication factor {topic.replication}")
    if topic.assigned:
        raise KafkaError(KafkaErrorCode.INVALID_REQUEST, "explicit replica assignments are not supported")
    partitions = broker.settings.default_partitions if topic.partitions == -1 else topic.partitions
    if partitions < 1:
        raise KafkaError(KafkaErrorCode.INVALID_PARTITIONS, f"{partitions} partitions: at least 1 is needed")
    settings: dict[str, int] = {}
    for key, value in topic.configs:
        if IGNORED_CONFIGS.get(key) == value:
            continue
        if key not in CONFIGS or value is None or not value.lstrip("-").isdigit():
            raise KafkaError(KafkaErrorCode.INVALID_CONFIG, f"topic config {key}={value} is not supported")
        settings[CONFIGS[key]] = int(value)
    if settings.get("retention_ms", 0) < 0:
        del settings["retention_ms"]  # Kafka's -1: keep forever
    replication = max(1, topic.replication)  # Kafka's -1: the broker's default (1)
    try:
        return TopicConfig(partitions=partitions, replication_factor=replication, **settings)  # type: ignore[arg-type]
    except ValueError as err:
        raise KafkaError(KafkaErrorCode.INVALID_CONFIG, str(err)) from None


async def _create(broker: Broker, topic: NewTopic, validate_only: bool) -> tuple[str, int, str | None]:
    try:
        config = topic_config(broker, topic)
        if not validate_only:
            await broker.topology.create_topic(topic.name, config)
        return topic.name, 0, None
    except Exception as err:
        error = to_kafka_error(err)
        return topic.name, int(error.code), str(error)


async def create_topics(broker: Broker, request: KafkaRequest) -> Writer:
    body, version = request.body, request.version
    topics = body.array(_read_new_topic)
    body.int32()  # timeout
    validate_only = body.boolean() if version >= 1 else False
    results = [await _create(broker, topic, validate_only) for topic in topics]
    out = response(version, 2)

    def write_result(w: Writer, result: tuple[str, int, str | None]) -> None:
        w.string(result[0]).int16(result[1])
        if version >= 1:
            w.string(result[2])

    return out.array(results, write_result)


async def _delete(broker: Broker, name: str) -> tuple[str, int]:
    try:
        await broker.topology.delete_topic(name)
        return name, 0
    except Exception as err:
        return name, int(to_kafka_error(err).code)


async def delete_topics(broker: Broker, request: KafkaRequest) -> Writer:
    names = request.body.array(Reader.string)
    request.body.int32()  # timeout
    results = [await _delete(broker, name) for name in names]
    for name, error in results:
        if not error:
            broker.on_topic_deleted(name)
            broker.batches.forget_topic(name)
    return response(request.version, 1).array(results, lambda w, r: w.string(r[0]).int16(r[1]))
