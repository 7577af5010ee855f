"""Metadata: the brokers, the controller and each partition's leader, replicas and
in-sync set, as the SPU's topology tells them (`kafka/topology.py`)."""

from __future__ import annotations

from contraflow.spu.kafka.apis.base import NO_AUTHORIZED_OPERATIONS, KafkaRequest, response
from contraflow.spu.kafka.broker import CLUSTER_ID, Broker
from contraflow.spu.kafka.errors import KafkaErrorCode, error_code_of
from contraflow.spu.kafka.topology import Node, PartitionLeadership
from contraflow.spu.kafka.wire import Reader, Writer
from contraflow.spu.protocol.errors import TopicExistsError, TopicNotFoundError
from contraflow.spu.protocol.internal_topics import INTERNAL_TOPICS
from contraflow.spu.protocol.topics import TopicConfig

NO_LEADER = -1
TopicAnswer = tuple[str, int, list[PartitionLeadership]]  # name, error code, partitions


async def _topic(broker: Broker, name: str, auto_create: bool) -> TopicAnswer:
    """A requested topic's partitions, creating the topic first when allowed."""
    topology = broker.topology
    try:
        return name, 0, topology.partitions_of(name)
    except TopicNotFoundError:
        if not auto_create:
            return name, int(KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION), []
    except Exception as err:
        return name, error_code_of(err), []
    try:
        await topology.create_topic(name, TopicConfig(partitions=broker.settings.default_partitions))
    except TopicExistsError:
        pass  # created meanwhile by another request
    except Exception as err:
        return name, error_code_of(err), []
    try:
        return name, 0, topology.partitions_of(name)
    except TopicNotFoundError:  # a cluster SPU learns of it with the next heartbeat: ask again
        return name, int(KafkaErrorCode.LEADER_NOT_AVAILABLE), []


async def metadata(broker: Broker, request: KafkaRequest) -> Writer:
    body, version = request.body, request.version
    names = body.nullable_array(Reader.string)
    if version == 0 and not names:
        names = None  # v0 asks for every topic with an empty list
    allow_create = body.boolean() if version >= 4 else True
    topology = broker.topology
    if names is None:
        names, allow_create = topology.topic_names(), False
    auto_create = allow_create and broker.settings.auto_create_topics
    topics = [await _topic(broker, name, auto_create) for name in names]

    out = response(version, 3)

    def write_broker(w: Writer, node: Node) -> None:
        w.int32(node.id).string(node.host).int32(node.port)
        if version >= 1:
            w.string(None)  # rack

    out.array(topology.brokers(), write_broker)
    if version >= 2:
        out.string(CLUSTER_ID)
    if version >= 1:
        out.int32(topology.controller_id())

    def write_partition(w: Writer, p: PartitionLeadership) -> None:
        error = KafkaErrorCode.LEADER_NOT_AVAILABLE if p.leader == NO_LEADER else 0
        w.int16(error).int32(p.index).int32(p.leader)
        if version >= 7:
            # Not told: clients then skip leader-epoch validation (OffsetForLeaderEpoch,
            # which this listener does not serve) and follow the leader the metadata names.
            w.int32(-1)
        w.int32_array(p.replicas).int32_array(p.isr)
        if version >= 5:
            w.int32_array([])  # offline replicas

    def write_topic(w: Writer, topic: TopicAnswer) -> None:
        name, error, partitions = topic
        w.int16(error).string(name)
        if version >= 1:
            w.boolean(name in INTERNAL_TOPICS)  # a cluster's own tables: clients list them apart
        w.array(partitions, write_partition)
        if version >= 8:
            w.int32(NO_AUTHORIZED_OPERATIONS)

    out.array(topics, write_topic)
    if version >= 8:
        out.int32(NO_AUTHORIZED_OPERATIONS)
    return out
