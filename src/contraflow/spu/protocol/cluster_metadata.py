"""Cluster metadata: SPUs, topics, and per partition its replicas, leader, epoch and
in-sync set. The controller keeps it durable (`controller/metadata_file.py`); SPUs and
clients get copies of it, so the records are the protocol's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contraflow.spu.protocol.topics import TopicConfig

NO_LEADER = -1


@dataclass
class SpuRecord:
    """`kafka_addr`: the SPU's Kafka listener ("" without one; docs/kafka.md)."""

    id: int
    public_addr: str
    private_addr: str
    kafka_addr: str = ""

    def to_list(self) -> list[Any]:
        return [self.id, self.public_addr, self.private_addr, self.kafka_addr]

    @classmethod
    def from_list(cls, data: list[Any]) -> SpuRecord:
        spu_id, public, private, *kafka = data  # written before Kafka listeners: three fields
        return cls(int(spu_id), str(public), str(private), str(kafka[0]) if kafka else "")


@dataclass
class PartitionState:
    """`leader` is NO_LEADER while no replica can take over (all in-sync replicas down)."""

    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]

    def to_list(self) -> list[Any]:
        return [self.leader, self.leader_epoch, self.replicas, self.isr]

    @classmethod
    def from_list(cls, data: list[Any]) -> PartitionState:
        leader, epoch, replicas, isr = data
        return cls(list(replicas), int(leader), int(epoch), list(isr))


@dataclass
class TopicRecord:
    name: str
    config: TopicConfig
    created_ms: int
    partitions: list[PartitionState]

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "created_ms": self.created_ms,
            "partitions": [p.to_list() for p in self.partitions],
        }

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> TopicRecord:
        return cls(
            name,
            TopicConfig.from_dict(data["config"]),
            int(data["created_ms"]),
            [PartitionState.from_list(p) for p in data["partitions"]],
        )


@dataclass
class ClusterMetadata:
    """What the controller persists and hands out (`version` grows with every change)."""

    version: int = 0
    spus: dict[int, SpuRecord] = field(default_factory=dict)
    topics: dict[str, TopicRecord] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "spus": [s.to_list() for s in sorted(self.spus.values(), key=lambda s: s.id)],
            "topics": {name: t.to_dict() for name, t in sorted(self.topics.items())},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterMetadata:
        spus = {int(s[0]): SpuRecord.from_list(s) for s in data["spus"]}
        topics = {name: TopicRecord.from_dict(name, t) for name, t in data["topics"].items()}
        return cls(int(data["version"]), spus, topics)

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        record = self.topics.get(topic)
        if record is None or not 0 <= partition < len(record.partitions):
            return None
        return record.partitions[partition]
