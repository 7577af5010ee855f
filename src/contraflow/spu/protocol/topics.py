"""Topics as both ends of the wire name them: a partition's name, topic configuration, descriptions.

These are plain dataclasses with dict round trips so the SPU server can send
them over the wire and topic.json can store them; clients, the engine and both
protocols share them, so they live with the protocol, not in storage.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final, Literal

from contraflow.spu.protocol.errors import InvalidTopicNameError

DEFAULT_SEGMENT_BYTES: Final = 1 << 30
DEFAULT_INDEX_INTERVAL_BYTES: Final = 4096
MAX_TOPIC_NAME: Final = 249
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]+")

TopicPartition = tuple[str, int]
"""A partition, by its topic's name and its number."""

FlushMode = Literal["every_batch", "bytes", "interval", "never"]
Isolation = Literal["committed", "uncommitted"]


def validate_name(name: str, kind: str = "topic") -> str:
    """Kafka's topic rules, also used for consumer names (they become paths):
    1-249 chars of [A-Za-z0-9._-], not "." or ".."."""
    if not name:
        raise InvalidTopicNameError(f"invalid {kind} name: it is empty")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicNameError(
            f"invalid {kind} name {name[:20]!r}...: {len(name)} characters (at most {MAX_TOPIC_NAME})"
        )
    if name in (".", ".."):
        raise InvalidTopicNameError(f"invalid {kind} name {name!r}: '.' and '..' are reserved")
    if not _TOPIC_CHARS.fullmatch(name):
        bad = sorted({c for c in name if not _TOPIC_CHARS.fullmatch(c)})
        raise InvalidTopicNameError(
            f"invalid {kind} name {name!r}: character(s) {''.join(bad)!r} not allowed "
            "(use letters, digits, '.', '_' and '-')"
        )
    return name


def validate_topic_name(name: str) -> str:
    return validate_name(name, "topic")


@dataclass(frozen=True)
class FlushPolicy:
    """When appended data is fsynced.

    every_batch: each append is durable before it returns (concurrent appends
    share one fsync: group commit). bytes: fsync once `bytes` unflushed bytes
    accumulate. interval: fsync when the oldest unflushed append is `interval_ms`
    old (checked on append and by the store's flusher). never: leave it to the
    page cache (fsync only on roll and close).
    """

    mode: FlushMode = "every_batch"
    bytes: int = 1 << 20
    interval_ms: int = 1000

    def __post_init__(self) -> None:
        if self.mode not in ("every_batch", "bytes", "interval", "never"):
            raise ValueError(f"unknown flush mode {self.mode!r}")
        if self.bytes <= 0 or self.interval_ms <= 0:
            raise ValueError("flush bytes and interval must be positive")

    @classmethod
    def every_batch(cls) -> FlushPolicy:
        return cls("every_batch")

    @classmethod
    def every_bytes(cls, n: int) -> FlushPolicy:
        return cls("bytes", bytes=n)

    @classmethod
    def every_ms(cls, ms: int) -> FlushPolicy:
        return cls("interval", interval_ms=ms)

    @classmethod
    def never(cls) -> FlushPolicy:
        return cls("never")


@dataclass(frozen=True)
class TopicConfig:
    """Per-topic settings, stored in topic.json."""

    partitions: int = 1
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    retention_ms: int | None = None
    retention_bytes: int | None = None
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    flush: FlushPolicy = field(default_factory=FlushPolicy)
    # Replication (an SPU cluster; a lone SPU is the whole in-sync set of every partition).
    replication_factor: int = 1
    min_in_sync_replicas: int = 1
    replica_lag_time_max_ms: int = 3000  # a follower behind for longer leaves the in-sync set
    unclean_leader_election: bool = False  # may an out-of-sync replica become leader (losing data)

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ValueError("a topic needs at least one partition")
        if self.replication_factor < 1:
            raise ValueError("the replication factor must be at least 1")
        if not 1 <= self.min_in_sync_replicas <= self.replication_factor:
            raise ValueError(
                f"min in-sync replicas must be between 1 and the replication factor "
                f"({self.replication_factor}), got {self.min_in_sync_replicas}"
            )
        if self.replica_lag_time_max_ms <= 0:
            raise ValueError("replica lag time must be positive")
        if not 1024 <= self.segment_bytes < (1 << 32):
            raise ValueError("segment size must be between 1 KiB and 4 GiB")
        if self.retention_ms is not None and self.retention_ms <= 0:
            raise ValueError("retention time must be positive")
        if self.retention_bytes is not None and self.retention_bytes <= 0:
            raise ValueError("retention bytes must be positive")
        if self.index_interval_bytes <= 0:
            raise ValueError("index interval must be positive")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TopicConfig:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        if isinstance(kwargs.get("flush"), dict):
            kwargs["flush"] = FlushPolicy(**kwargs["flush"])
        return cls(**kwargs)


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as `describe_topic` reports it."""

    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segment_count: int
    corrupt_batches: int = 0  # distinct bad batches reads met since the partition was opened
    damage: list[str] = field(default_factory=list)  # cuts, holes and bad batches, one line each
    # In a cluster (from the controller): None / empty on a lone SPU.
    leader: int | None = None
    replicas: list[int] = field(default_factory=list)
    in_sync_replicas: list[int] = field(default_factory=list)
    leader_epoch: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PartitionInfo:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class TopicDescription:
    name: str
    config: TopicConfig
    created_ms: int
    partitions: list[PartitionInfo]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "config": self.config.to_dict(),
            "created_ms": self.created_ms,
            "partitions": [p.to_dict() for p in self.partitions],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TopicDescription:
        return cls(
            data["name"],
            TopicConfig.from_dict(data["config"]),
            data["created_ms"],
            [PartitionInfo.from_dict(p) for p in data["partitions"]],
        )
