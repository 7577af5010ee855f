"""A partition's leader-epoch history: which epoch wrote from which offset on.

Every batch carries the epoch of the leader that appended it; this file keeps
`[[epoch, start offset], ...]` so that a replica can answer "where does epoch E
end in your log" (KIP-101) without scanning batches. It lives next to the
segments (`leader-epochs.json`), is replaced atomically on every change, and is
cut back with the log.
"""

from __future__ import annotations

import threading
from pathlib import Path

import orjson

from contraflow.atomic_files import write_atomic

EPOCHS_FILE = "leader-epochs.json"
NO_EPOCH = -1


class EpochHistory:
    def __init__(self, partition_dir: Path, log_end: int) -> None:
        self._path = partition_dir / EPOCHS_FILE
        self._lock = threading.Lock()
        entries: list[list[int]] = []
        if self._path.exists():
            entries = [[int(e), int(s)] for e, s in orjson.loads(self._path.read_bytes())]
        # A crash can leave an entry for batches that never made it to disk.
        self._entries = [e for e in entries if e[1] <= log_end]

    @property
    def latest(self) -> int:
        with self._lock:
            return self._entries[-1][0] if self._entries else NO_EPOCH

    def entries(self) -> list[list[int]]:
        with self._lock:
            return [list(e) for e in self._entries]

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` writes from `start_offset` on (no-op if not newer)."""
        with self._lock:
            if self._entries and epoch <= self._entries[-1][0]:
                return
            self._entries.append([epoch, start_offset])
            self._save()

    def end_offset(self, epoch: int, log_end: int) -> tuple[int, int]:
        """(the largest epoch <= `epoch` here, the offset where it ends); (NO_EPOCH, -1)
        when the history has no such epoch."""
        with self._lock:
            found = NO_EPOCH
            end = -1
            for i, (e, _) in enumerate(self._entries):
                if e > epoch:
                    break
                found = e
                end = self._entries[i + 1][1] if i + 1 < len(self._entries) else log_end
            return found, end

    def truncate_from(self, offset: int) -> None:
        """The log was cut to end at `offset`: forget epochs that start at or after it."""
        with self._lock:
            kept = [e for e in self._entries if e[1] < offset]
            if kept != self._entries:
                self._entries = kept
                self._save()

    def _save(self) -> None:
        write_atomic(self._path, orjson.dumps(self._entries))
