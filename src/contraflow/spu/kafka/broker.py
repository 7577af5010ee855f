"""What every Kafka request handler works with: the SPU's partitions and this broker's state."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from contraflow.spu.kafka.batch_cache import KafkaBatchCache
from contraflow.spu.kafka.coordinator import GroupCoordinator
from contraflow.spu.kafka.errors import KafkaError, KafkaErrorCode
from contraflow.spu.kafka.ordered import OrderedJobs
from contraflow.spu.kafka.producers import ProducerIds
from contraflow.spu.kafka.topology import ClusterTopology, LoneTopology, Node, Topology
from contraflow.spu.node.membership import ClusterMember, Membership
from contraflow.spu.node.partitions import Partitions
from contraflow.spu.node.signals import PartitionSignals
from contraflow.spu.protocol.topics import TopicPartition
from contraflow.spu.storage.store import Store

T = TypeVar("T")

CLUSTER_ID = "contraflow"


@dataclass
class KafkaSettings:
    """Broker-side behaviour a Kafka operator would configure."""

    auto_create_topics: bool = True  # Kafka's auto.create.topics.enable
    default_partitions: int = 1  # Kafka's num.partitions
    initial_rebalance_delay_s: float = 0.5  # Kafka's group.initial.rebalance.delay.ms
    batch_cache_bytes: int = 64 << 20  # Kafka encodings of log batches kept for fetches
    max_frame_bytes: int = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes


@dataclass
class Broker:
    partitions: Partitions
    signals: PartitionSignals
    executor: Executor
    node_id: int
    on_topic_deleted: Callable[[str], None]
    membership: Membership  # alone or in a cluster (decided once, at start)
    settings: KafkaSettings = field(default_factory=KafkaSettings)
    host: str = "127.0.0.1"
    port: int = 0
    coordinator: GroupCoordinator = field(init=False)
    producer_ids: ProducerIds = field(default_factory=ProducerIds)
    batches: KafkaBatchCache = field(init=False)
    read_ahead: set[tuple[TopicPartition, int]] = field(default_factory=set)  # being encoded ahead
    appends: OrderedJobs[TopicPartition, tuple[int, int]] = field(init=False)  # in order per partition
    topology: Topology = field(init=False)

    def __post_init__(self) -> None:
        self.coordinator = GroupCoordinator(self.settings.initial_rebalance_delay_s)
        self.batches = KafkaBatchCache(self.settings.batch_cache_bytes)
        self.appends = OrderedJobs(self.executor)
        if isinstance(self.membership, ClusterMember):
            self.topology = ClusterTopology(self.membership, self.me)
        else:
            self.topology = LoneTopology(self.membership, self.partitions, self.me)

    async def check_coordinator(self, group: str) -> None:
        """Group requests belong to the group's coordinator (which moves in a cluster)."""
        coordinator = await self.topology.coordinator(group)
        if coordinator.id != self.node_id:
            raise KafkaError(
                KafkaErrorCode.NOT_COORDINATOR, f"group {group!r} is coordinated by broker {coordinator.id}"
            )

    def me(self) -> Node:
        """This broker as clients reach it (the listener's bound address)."""
        return Node(self.node_id, self.host, self.port)

    @property
    def store(self) -> Store:
        return self.partitions.store

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run storage work that may fsync (or transcode a lot) off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
