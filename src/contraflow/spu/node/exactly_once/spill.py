"""Staged transaction batches kept in a file instead of memory, past a memory threshold.

A writer stages a batch's records before committing them (`transactions.py`). Held in
memory only, staging was bounded by nothing but connections x the per-connection limit;
so once the SPU's staging in memory reaches its threshold, further staged batches go to
their transaction's spill file and are read back when they are committed.

A spill file is unlinked from the moment it exists (`tempfile.TemporaryFile`): staging is
meant to be lost with the process (the writer replays its batch, `UNKNOWN_TRANSACTION`),
so a crash leaves nothing behind to clean up, and no fsync is ever needed.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import BinaryIO

from contraflow.spu.protocol.batch import Buffer
from contraflow.spu.protocol.errors import DiskFullError
from contraflow.spu.storage.errors import is_disk_full


class SpilledBatch:
    """Where one staged batch lies in its transaction's spill file."""

    __slots__ = ("_file", "length", "position")

    def __init__(self, file: BinaryIO, position: int, length: int) -> None:
        self._file = file
        self.position = position
        self.length = length

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The batch's bytes, exactly as they were staged."""
        data = os.pread(self._file.fileno(), self.length, self.position)
        if len(data) != self.length:
            raise OSError(f"spill file ended after {len(data)} of {self.length} bytes at {self.position}")
        return data


class SpillFile:
    """One transaction's spilled batches, appended one after the other; created on first use."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._file: BinaryIO | None = None
        self._end = 0

    def write(self, batch: Buffer) -> SpilledBatch:
        """Append `batch`; a full disk refuses the stage (DISK_FULL) with nothing half-kept."""
        try:
            if self._file is None:
                self._directory.mkdir(parents=True, exist_ok=True)
                self._file = tempfile.TemporaryFile(dir=self._directory)  # noqa: SIM115 - closed by close()
            view, position = memoryview(batch), self._end
            written = 0
            while written < len(view):
                written += os.pwrite(self._file.fileno(), view[written:], position + written)
        except OSError as err:
            if is_disk_full(err):
                raise DiskFullError("staging a transaction batch on disk", self._directory) from err
            raise
        self._end += len(view)
        return SpilledBatch(self._file, position, len(view))

    @property
    def size(self) -> int:
        """Bytes written to the file so far (batches of a replaced attempt stay until closed)."""
        return self._end

    def close(self) -> None:
        """Give the file's space back (its batches can no longer be read)."""
        if self._file is not None:
            self._file.close()
            self._file = None
