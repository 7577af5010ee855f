"""Storage errors: the engine's own failures (their wire codes are the protocol's, `protocol/errors.py`).

User mistakes subclass UserError so the CLI prints one line.
"""

from __future__ import annotations

import errno
from pathlib import Path

from contraflow.errors import UserError
from contraflow.spu.protocol.errors import DiskFullError, InvalidBatchError, StorageError

__all__ = ["CorruptSegmentError", "DataDirLockedError", "DiskFullError", "InvalidBatchError", "StorageError"]


class CorruptSegmentError(StorageError):
    """Corruption in the middle of a closed segment: never skipped silently."""

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"corrupt segment {path} at byte {position}: {reason}")
        self.path = path
        self.position = position
        self.reason = reason


def is_disk_full(err: OSError) -> bool:
    """ENOSPC, or a quota (EDQUOT): the same for the log, space is what is missing."""
    return err.errno in (errno.ENOSPC, errno.EDQUOT)


class DataDirLockedError(UserError):
    """Another process writes to this data directory."""
