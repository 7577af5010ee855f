"""Who serves what, as Kafka clients are told, and the checks a produce or fetch makes.

A lone SPU (`LoneTopology`) is the only broker, the controller, every
partition's leader and every group's coordinator. An SPU of a cluster
(`ClusterTopology`, docs/spu-cluster.md) tells what the controller decided:
every SPU with a Kafka listener is a broker (node id = SPU id), each
partition's leader, replicas and in-sync set are the cluster's, and the
leader of the cluster's replicated consumer-offsets table coordinates every
group and keeps its committed offsets. A produce,
fetch or offset lookup on an SPU that does not lead the partition fails with
NOT_LEADER_OR_FOLLOWER, so the client re-reads the metadata and goes to the
leader; acks=-1 waits for the in-sync replicas (NOT_ENOUGH_REPLICAS below
the topic's minimum), acks=1 for the leader's append only. Topic admin goes
through the node's membership (the local store, or the controller), and so do
committed offsets (local files, or the cluster's replicated table).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from contraflow.spu.kafka.errors import KafkaError, KafkaErrorCode
from contraflow.spu.node.partitions import Partitions
from contraflow.spu.protocol import Acks, ErrorCode, SpuError
from contraflow.spu.protocol import messages as m
from contraflow.spu.protocol.address import parse_addr
from contraflow.spu.protocol.errors import TopicNotFoundError
from contraflow.spu.protocol.internal_topics import OFFSETS_TOPIC
from contraflow.spu.protocol.topics import TopicConfig, TopicPartition

if TYPE_CHECKING:
    from contraflow.spu.node.membership import ClusterMember, Membership
    from contraflow.spu.node.replication.leader import LeaderState
    from contraflow.spu.protocol.cluster_metadata import ClusterMetadata

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Node:
    """A broker as Kafka's Metadata and FindCoordinator describe it."""

    id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class PartitionLeadership:
    index: int
    leader: int
    replicas: list[int]
    isr: list[int]


class Topology(Protocol):
    replicates: bool  # topics may have more than one replica

    def brokers(self) -> list[Node]: ...

    def controller_id(self) -> int: ...

    def topic_names(self) -> list[str]: ...

    def partitions_of(self, topic: str) -> list[PartitionLeadership]:
        """Raises TopicNotFoundError."""
        ...

    async def create_topic(self, name: str, config: TopicConfig) -> None: ...

    async def delete_topic(self, name: str) -> None: ...

    async def coordinator(self, group: str) -> Node:
        """The broker that coordinates `group`; KafkaError COORDINATOR_NOT_AVAILABLE while
        there is none yet (clients ask again)."""
        ...

    async def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> None: ...

    async def committed_offset(self, group: str, topic: str, partition: int) -> int | None: ...

    def durable_append(self, acks: int) -> bool:
        """Whether the append itself waits for the fsync (else `committed` does the waiting)."""
        ...

    def check_produce(self, tp: TopicPartition, acks: int) -> Any:
        """Before the append: raises unless this SPU may take it; returns what `committed` needs."""
        ...

    async def committed(self, tp: TopicPartition, leading: Any, end: int, acks: int) -> None:
        """After the append up to `end`: wait as long as `acks` asks for."""
        ...

    def check_leader(self, tp: TopicPartition) -> int:
        """Raises unless this SPU serves the partition's records; returns its leader epoch
        (-1 on a lone SPU)."""
        ...


class _OnTheNode:
    """What both topologies ask of the node's membership (alone or in a cluster)."""

    def __init__(self, membership: Membership) -> None:
        self._node = membership

    async def create_topic(self, name: str, config: TopicConfig) -> None:
        await self._node.topic_admin(m.CreateTopicRequest(name, config.to_dict()))

    async def delete_topic(self, name: str) -> None:
        await self._node.topic_admin(m.DeleteTopicRequest(name))

    async def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        await _as_coordinator(self._node.commit_offset(group, topic, partition, offset))

    async def committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        return await _as_coordinator(self._node.committed_offset(group, topic, partition))


class LoneTopology(_OnTheNode):
    """One SPU: this broker is everything; acks=-1 waits for the fsync."""

    replicates = False

    def __init__(self, membership: Membership, partitions: Partitions, me: Callable[[], Node]) -> None:
        super().__init__(membership)
        self._partitions = partitions
        self._me = me

    def brokers(self) -> list[Node]:
        return [self._me()]

    def controller_id(self) -> int:
        return self._me().id

    def topic_names(self) -> list[str]:
        return self._partitions.store.list_topics()

    def partitions_of(self, topic: str) -> list[PartitionLeadership]:
        me = self._me().id
        count = self._partitions.store.topic_config(topic).partitions
        return [PartitionLeadership(n, me, [me], [me]) for n in range(count)]

    async def coordinator(self, group: str) -> Node:
        return self._me()

    def durable_append(self, acks: int) -> bool:
        return acks == -1  # with one SPU the leader is the whole in-sync set

    def check_produce(self, tp: TopicPartition, acks: int) -> None:
        return None

    async def committed(self, tp: TopicPartition, leading: Any, end: int, acks: int) -> None:
        return None

    def check_leader(self, tp: TopicPartition) -> int:
        return -1


class ClusterTopology(_OnTheNode):
    """An SPU of a cluster: what the controller last said (heartbeats, every 250 ms)."""

    replicates = True

    def __init__(self, member: ClusterMember, me: Callable[[], Node]) -> None:
        super().__init__(member)
        agent = self._agent = member.agent
        assert agent.replicas is not None
        self._replicas = agent.replicas
        self._me = me
        self._parsed: ClusterMetadata | None = None

    def _metadata(self) -> ClusterMetadata:
        from contraflow.spu.protocol.cluster_metadata import ClusterMetadata

        raw = self._agent.metadata
        if raw is None:
            raise SpuError(ErrorCode.NO_CONTROLLER, f"SPU {self._agent.spu_id} has not heard the controller")
        if self._parsed is None or self._parsed.version != raw["version"]:
            self._parsed = ClusterMetadata.from_dict(raw)
        return self._parsed

    def brokers(self) -> list[Node]:
        """Every SPU with a Kafka listener; this one as it is bound even before the
        controller has heard of its listener."""
        me = self._me()
        nodes = {me.id: me}
        for spu in self._metadata().spus.values():
            if spu.kafka_addr and spu.id != me.id:
                host, port = parse_addr(spu.kafka_addr)
                nodes[spu.id] = Node(spu.id, host, port)
        return sorted(nodes.values(), key=lambda n: n.id)

    def controller_id(self) -> int:
        return min(n.id for n in self.brokers())  # Kafka clients only send admin requests to it

    def topic_names(self) -> list[str]:
        return sorted(self._metadata().topics)

    def partitions_of(self, topic: str) -> list[PartitionLeadership]:
        record = self._metadata().topics.get(topic)
        if record is None:
            raise TopicNotFoundError(f"topic {topic!r} does not exist")
        return [
            PartitionLeadership(n, p.leader, list(p.replicas), list(p.isr))
            for n, p in enumerate(record.partitions)
        ]

    async def coordinator(self, group: str) -> Node:
        """Every group is coordinated by the leader of the cluster's consumer-offsets table
        (as Kafka's coordinator leads its __consumer_offsets partition), so group state and
        committed offsets live on one SPU and move together on a failover. The cluster's
        first group request creates the table."""
        table = self._metadata().partition(OFFSETS_TOPIC, 0)
        if table is None:
            assert self._agent.offsets is not None
            await self._agent.offsets.ensure_exists()
            raise KafkaError(KafkaErrorCode.COORDINATOR_NOT_AVAILABLE, f"creating {OFFSETS_TOPIC}")
        node = next((n for n in self.brokers() if n.id == table.leader), None)
        if node is None:
            raise KafkaError(
                KafkaErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"{OFFSETS_TOPIC} has no leader with a Kafka listener (leader {table.leader})",
            )
        return node

    def durable_append(self, acks: int) -> bool:
        return False  # the flush policy's fsync only: acks=-1 waits for the in-sync replicas

    def check_produce(self, tp: TopicPartition, acks: int) -> LeaderState:
        return self._replicas.leading.check_produce(tp, _acks(acks))

    async def committed(self, tp: TopicPartition, leading: Any, end: int, acks: int) -> None:
        await self._replicas.leading.appended(tp, leading, end, _acks(acks))

    def check_leader(self, tp: TopicPartition) -> int:
        return self._replicas.leading.leader(tp).epoch


async def _as_coordinator(work: Awaitable[T]) -> T:
    """The offsets table answers NOT_LEADER once its leadership moved: for a Kafka client
    that means its group coordinator moved."""
    try:
        return await work
    except SpuError as err:
        if err.code is ErrorCode.NOT_LEADER:
            raise KafkaError(KafkaErrorCode.NOT_COORDINATOR, str(err)) from None
        raise


def _acks(kafka_acks: int) -> Acks:
    """Kafka's -1 (all) waits for the in-sync set, 1 for the leader; 0 answers nothing."""
    return {-1: Acks.COMMITTED, 1: Acks.LEADER, 0: Acks.NONE}[kafka_acks]
