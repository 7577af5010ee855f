"""Alone or in a cluster: decided once, when the SPU starts, behind one interface.

What differs between a lone SPU and a member of a cluster is all here: where
topic admin goes (the local store, or the controller), where consumer offsets
and control values live (local files, or replicated tables), who may serve a
partition (anyone, or its leader), what makes a produce durable (an fsync, or
the in-sync replicas), and how exactly-once commits are made
(`exactly_once/strategy.py`). The protocols' doors hold a `Membership` and never
test which one they have.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, Protocol, TypeVar

from contraflow.spu.node.appender import OrderedAppender
from contraflow.spu.node.exactly_once.replicated import ClusterCommits
from contraflow.spu.node.exactly_once.strategy import ExactlyOnce, LoneCommits, PartitionedCommits
from contraflow.spu.node.exactly_once.transactions import TransactionCoordinator
from contraflow.spu.node.partitions import AppendRequest, Partitions
from contraflow.spu.node.replication.agent import ClusterAgent
from contraflow.spu.node.replication.replicas import ReplicaManager
from contraflow.spu.node.replication.tables import ReplicatedTable
from contraflow.spu.node.signals import PartitionSignals
from contraflow.spu.protocol import Acks, ApiKey, ErrorCode, SpuError
from contraflow.spu.protocol import messages as m
from contraflow.spu.protocol.internal_topics import CONTROL_TOPIC, OFFSETS_TOPIC
from contraflow.spu.protocol.topics import TopicConfig, TopicPartition
from contraflow.spu.storage.control import ControlValues

T = TypeVar("T")
TopicAdmin = m.CreateTopicRequest | m.DeleteTopicRequest | m.ListTopicsRequest | m.DescribeTopicRequest
ADMIN_APIS: dict[type, ApiKey] = {
    m.CreateTopicRequest: ApiKey.CREATE_TOPIC,
    m.DeleteTopicRequest: ApiKey.DELETE_TOPIC,
    m.ListTopicsRequest: ApiKey.LIST_TOPICS,
    m.DescribeTopicRequest: ApiKey.DESCRIBE_TOPIC,
}
Spawn = Callable[[Coroutine[Any, Any, None]], None]

# Replication between SPUs: served on a cluster member's private port only.
REPLICATION_APIS = frozenset({ApiKey.REPLICA_FETCH, ApiKey.OFFSET_FOR_EPOCH, ApiKey.REPLICA_STAGE})


class Membership(Protocol):
    """One SPU's place among SPUs, as the protocols' doors ask about it."""

    exactly_once: ExactlyOnce
    private_apis: frozenset[ApiKey]  # what the private port serves besides API_VERSIONS
    # Whether TXN_STAGE_RANGE is served: copying a range needs every partition's log at hand,
    # which only a lone SPU has (a cluster member answers UNSUPPORTED_API, the client fetches).
    stages_ranges: bool

    def metadata(self) -> dict[str, Any]:
        """METADATA's answer: alone, or the controller's metadata last heard."""

    def check_leader(self, tp: TopicPartition) -> None:
        """Refuse (NOT_LEADER) a partition this SPU may not serve."""

    def replicas(self) -> ReplicaManager:
        """The replicas, for the replication APIs (a lone SPU has none)."""

    async def append(
        self, appender: OrderedAppender, batches: list[memoryview], acks: Acks
    ) -> tuple[int, int]:
        """Append a produce's batches and answer when `acks` says they are safe; (base, last)."""

    async def commit_offset(self, consumer: str, topic: str, partition: int, offset: int) -> None: ...

    async def committed_offset(self, consumer: str, topic: str, partition: int) -> int | None: ...

    async def topic_admin(self, req: TopicAdmin) -> dict[str, Any]:
        """Create, delete, list or describe topics; the answer's fields."""

    async def set_control(self, name: str, value: Any) -> None: ...

    async def control(self, name: str) -> Any: ...

    def start(self, spawn: Spawn, addresses: dict[str, str]) -> None:
        """Begin the background work (heartbeats and the like) once the ports are bound."""

    async def close(self) -> None: ...


class _Blocking:
    def __init__(self, executor: Executor) -> None:
        self._executor = executor

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)


class LoneSpu(_Blocking):
    """An SPU on its own: it serves every partition, keeps its tables in files, and is
    the whole in-sync set (acks=all waits for its own fsync)."""

    private_apis: frozenset[ApiKey] = frozenset()
    stages_ranges = True

    def __init__(
        self,
        partitions: Partitions,
        transactions: TransactionCoordinator,
        executor: Executor,
        on_topic_deleted: Callable[[str], None],
    ) -> None:
        super().__init__(executor)
        self._store = partitions.store
        self._control = ControlValues(self._store.data_dir / "control")
        self._on_topic_deleted = on_topic_deleted
        self.exactly_once: ExactlyOnce = LoneCommits(transactions, executor)

    def metadata(self) -> dict[str, Any]:
        return {"cluster": False}

    def check_leader(self, tp: TopicPartition) -> None:
        """A lone SPU leads every partition it has."""

    def replicas(self) -> ReplicaManager:
        raise SpuError(ErrorCode.UNSUPPORTED_API, "replication needs an SPU started with --sc")

    async def append(
        self, appender: OrderedAppender, batches: list[memoryview], acks: Acks
    ) -> tuple[int, int]:
        return await appender.append(AppendRequest(batches, acks is Acks.COMMITTED))

    async def commit_offset(self, consumer: str, topic: str, partition: int, offset: int) -> None:
        await self._blocking(self._store.commit_consumer_offset, consumer, topic, partition, offset)

    async def committed_offset(self, consumer: str, topic: str, partition: int) -> int | None:
        return self._store.consumer_offset(consumer, topic, partition)

    async def topic_admin(self, req: TopicAdmin) -> dict[str, Any]:
        store = self._store
        match req:
            case m.CreateTopicRequest(name, config):
                await self._blocking(store.create_topic, name, TopicConfig.from_dict(config))
                return {}
            case m.DeleteTopicRequest(name):
                await self._blocking(store.delete_topic, name)
                self._on_topic_deleted(name)
                return {}
            case m.ListTopicsRequest():
                return {"topics": store.list_topics()}
            case m.DescribeTopicRequest(name):
                return {"topic": store.describe_topic(name).to_dict()}

    async def set_control(self, name: str, value: Any) -> None:
        await self._blocking(self._control.set, name, value)

    async def control(self, name: str) -> Any:
        return self._control.get(name)

    def start(self, spawn: Spawn, addresses: dict[str, str]) -> None:
        """Nothing runs in the background."""

    async def close(self) -> None:
        """Nothing to close: the store is the server's."""


class ClusterMember(_Blocking):
    """An SPU of a cluster: the controller decides topics and leaders (heard in heartbeats),
    a partition is served by its leader, durability is the in-sync replicas', and consumer
    offsets and control values are replicated tables."""

    private_apis: frozenset[ApiKey] = REPLICATION_APIS
    stages_ranges = False

    def __init__(
        self,
        spu_id: int,
        controller_addr: str,
        partitions: Partitions,
        signals: PartitionSignals,
        transactions: TransactionCoordinator,
        executor: Executor,
    ) -> None:
        super().__init__(executor)
        agent = self.agent = ClusterAgent(spu_id, controller_addr)
        partitions.keep_producers()
        self._replicas = agent.replicas = ReplicaManager(
            spu_id, partitions, signals, executor, agent.alter_isr, agent.suspended, agent.lease_lapsed
        )
        self.offsets, self.controls = agent.offsets, agent.controls = tuple(
            ReplicatedTable(topic, partitions, agent.replicas, executor, agent.create_topic, agent.spu_count)
            for topic in (OFFSETS_TOPIC, CONTROL_TOPIC)
        )
        commits = ClusterCommits(transactions, partitions, self._replicas, executor)
        self.exactly_once: ExactlyOnce = PartitionedCommits(commits)

    def metadata(self) -> dict[str, Any]:
        return self.agent.metadata_reply().fields

    def check_leader(self, tp: TopicPartition) -> None:
        self._replicas.leading.leader(tp)

    def replicas(self) -> ReplicaManager:
        return self._replicas

    async def append(
        self, appender: OrderedAppender, batches: list[memoryview], acks: Acks
    ) -> tuple[int, int]:
        leader = self._replicas.leading.check_produce(appender.tp, acks)
        # fsync per the flush policy only: acks=all waits for the in-sync replicas instead
        base, last = await appender.append(AppendRequest(batches, False))
        await self._replicas.leading.appended(appender.tp, leader, last + 1, acks)
        return base, last

    async def commit_offset(self, consumer: str, topic: str, partition: int, offset: int) -> None:
        await self.agent.commit_offset(consumer, topic, partition, offset)

    async def committed_offset(self, consumer: str, topic: str, partition: int) -> int | None:
        return await self.agent.committed_offset(consumer, topic, partition)

    async def topic_admin(self, req: TopicAdmin) -> dict[str, Any]:
        """Topic admin is the controller's: the request goes on, its answer comes back."""
        return (await self.agent.forward(ADMIN_APIS[type(req)], dataclasses.asdict(req))).fields

    async def set_control(self, name: str, value: Any) -> None:
        await self.controls.put(name, value)

    async def control(self, name: str) -> Any:
        return await self.controls.get(name)

    def start(self, spawn: Spawn, addresses: dict[str, str]) -> None:
        """Heartbeats (which also apply what the controller decided), in-sync-set upkeep and
        high-watermark checkpoints run for as long as the server does."""
        agent = self.agent
        agent.public_addr = addresses["public"]
        agent.private_addr = addresses["private"]
        agent.kafka_addr = addresses.get("kafka", "")
        spawn(agent.tick())
        spawn(agent.run())
        spawn(self._replicas.leading.manage_isr())
        spawn(self._replicas.checkpoint_high_watermarks())

    async def close(self) -> None:
        await self.agent.close()
