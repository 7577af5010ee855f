"""Storage errors. User mistakes subclass UserError so the CLI prints one line."""

from __future__ import annotations

from pathlib import Path

from contraflow.errors import UserError


class StorageError(Exception):
    """A storage failure that is not the user's fault (I/O, corruption)."""


class CorruptSegmentError(StorageError):
    """Corruption in the middle of a closed segment: never skipped silently."""

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"corrupt segment {path} at byte {position}: {reason}")
        self.path = path
        self.position = position
        self.reason = reason


class TopicNotFoundError(UserError):
    def __init__(self, topic: str) -> None:
        super().__init__(f"unknown topic {topic!r}")
        self.topic = topic


class TopicExistsError(UserError):
    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} already exists")
        self.topic = topic


class InvalidTopicNameError(UserError):
    """A name outside Kafka's charset/length rules."""


class PartitionNotFoundError(UserError):
    def __init__(self, topic: str, partition: int, count: int) -> None:
        super().__init__(f"topic {topic!r} has no partition {partition} (it has {count}: 0..{count - 1})")


class OffsetOutOfRangeError(UserError):
    """An offset past the log end (an offset below the log start is answered from the start)."""


class DataDirLockedError(UserError):
    """Another process writes to this data directory."""


class InvalidBatchError(UserError):
    """A producer sent a batch that fails validation (CRC, framing)."""
