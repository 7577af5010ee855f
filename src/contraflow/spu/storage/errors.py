"""Storage errors, and the wire code of every error the engine raises.

User mistakes subclass UserError so the CLI prints one line.
"""

from __future__ import annotations

import errno
from pathlib import Path

from contraflow.errors import UserError
from contraflow.spu.protocol.batch import CorruptBatchError
from contraflow.spu.protocol.errors import (
    ErrorCode,
    OffsetOutOfRangeError,
    PartitionNotFoundError,
    TopicExistsError,
    TopicNotFoundError,
)


class StorageError(Exception):
    """A storage failure that is not the user's fault (I/O, corruption)."""


class CorruptSegmentError(StorageError):
    """Corruption in the middle of a closed segment: never skipped silently."""

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"corrupt segment {path} at byte {position}: {reason}")
        self.path = path
        self.position = position
        self.reason = reason


class DiskFullError(StorageError):
    """The data directory's filesystem is full: appends are refused (and nothing half-written
    counts), reads, topic deletion and retention go on, and appends resume once space is freed."""

    def __init__(self, where: str, directory: Path) -> None:
        super().__init__(
            f"no space left on device: {where} refused, nothing of it written; "
            f"free space under {directory} (delete a topic, shorten retention, grow the disk) "
            "and appends resume; reads go on meanwhile"
        )


def is_disk_full(err: OSError) -> bool:
    """ENOSPC, or a quota (EDQUOT): the same for the log, space is what is missing."""
    return err.errno in (errno.ENOSPC, errno.EDQUOT)


class DataDirLockedError(UserError):
    """Another process writes to this data directory."""


class InvalidBatchError(UserError):
    """A producer sent a batch that fails validation (CRC, framing)."""


# The engine's exceptions as the SPU's wire codes, most specific first. Both
# protocols answer from this one table: the SPU's own (`server/errors.py`) and
# Kafka's (`kafka/errors.py`, through its table of SPU codes).
_WIRE_CODES: list[tuple[type[BaseException], ErrorCode]] = [
    (TopicNotFoundError, ErrorCode.UNKNOWN_TOPIC),
    (TopicExistsError, ErrorCode.TOPIC_EXISTS),
    (PartitionNotFoundError, ErrorCode.UNKNOWN_PARTITION),
    (OffsetOutOfRangeError, ErrorCode.OFFSET_OUT_OF_RANGE),
    (InvalidBatchError, ErrorCode.CORRUPT_BATCH),
    (CorruptBatchError, ErrorCode.CORRUPT_BATCH),
    (UserError, ErrorCode.INVALID_ARGUMENT),
    (DiskFullError, ErrorCode.DISK_FULL),
    (StorageError, ErrorCode.STORAGE_ERROR),
    (OSError, ErrorCode.STORAGE_ERROR),
]


def wire_code(err: BaseException) -> ErrorCode | None:
    """The wire code of an engine exception, or None for one the engine does not raise on purpose."""
    return next((code for kind, code in _WIRE_CODES if isinstance(err, kind)), None)
