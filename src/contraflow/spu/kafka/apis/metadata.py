"""Metadata: this SPU is the only broker, the controller and every partition's leader."""

from __future__ import annotations

from contraflow.spu.kafka.apis.base import NO_AUTHORIZED_OPERATIONS, KafkaRequest, response
from contraflow.spu.kafka.broker import CLUSTER_ID, Broker
from contraflow.spu.kafka.errors import KafkaErrorCode, error_code_of
from contraflow.spu.kafka.wire import Reader, Writer
from contraflow.spu.storage.errors import TopicExistsError, TopicNotFoundError


def _topic_partitions(broker: Broker, name: str, auto_create: bool) -> tuple[int, int]:
    """(error code, partition count) of a requested topic, creating it when allowed."""
    try:
        return 0, broker.partition_count(name)
    except TopicNotFoundError:
        if not auto_create:
            return int(KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION), 0
    try:
        broker.create_topic(name, broker.settings.default_partitions)
    except TopicExistsError:
        pass  # created meanwhile by another request
    except Exception as err:
        return error_code_of(err), 0
    return 0, broker.partition_count(name)


async def metadata(broker: Broker, request: KafkaRequest) -> Writer:
    body, version = request.body, request.version
    names = body.nullable_array(Reader.string)
    if version == 0 and not names:
        names = None  # v0 asks for every topic with an empty list
    allow_create = body.boolean() if version >= 4 else True
    if names is None:
        names, allow_create = broker.store.list_topics(), False
    auto_create = allow_create and broker.settings.auto_create_topics
    topics = [(name, *await broker.blocking(_topic_partitions, broker, name, auto_create)) for name in names]

    out = response(version, 3)

    def write_broker(w: Writer, _: object) -> None:
        w.int32(broker.node_id).string(broker.host).int32(broker.port)
        if version >= 1:
            w.string(None)  # rack

    out.array([None], write_broker)
    if version >= 2:
        out.string(CLUSTER_ID)
    if version >= 1:
        out.int32(broker.node_id)  # controller

    def write_partition(w: Writer, index: int) -> None:
        w.int16(0).int32(index).int32(broker.node_id)
        if version >= 7:
            w.int32(-1)  # leader epoch: not tracked, so clients skip epoch validation
        w.int32_array([broker.node_id]).int32_array([broker.node_id])
        if version >= 5:
            w.int32_array([])  # offline replicas

    def write_topic(w: Writer, topic: tuple[str, int, int]) -> None:
        name, error, count = topic
        w.int16(error).string(name)
        if version >= 1:
            w.boolean(False)  # internal
        w.array(range(count), write_partition)
        if version >= 8:
            w.int32(NO_AUTHORIZED_OPERATIONS)

    out.array(topics, write_topic)
    if version >= 8:
        out.int32(NO_AUTHORIZED_OPERATIONS)
    return out
