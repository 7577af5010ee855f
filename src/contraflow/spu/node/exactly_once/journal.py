"""The batch ledger: a durable journal of transaction intents, commits and aborts.

A commit spans partitions, and partitions are separate files, so atomicity comes
from this journal (a write-ahead intent, then the appends, then a commit record):

    intent  (producer, batch, {tp: log end before the appends})   fsync
    ... appends to every partition, fsync ...
    commit  (producer, batch, {tp: log end after the appends})    fsync

On open, an intent without its commit or abort is returned as *dangling*: the
caller truncates those partitions back to the recorded start offsets and then
records an abort, so the undo happens exactly once. Committed entries answer
`lookup` (exactly-once: committing a batch id twice returns the same end offsets,
also after a restart).

File format: records of `u32 length | u32 crc32c(body) | body`, body a msgpack
list `[kind, producer, batch_id, [[topic, partition, offset], ...]]`. A torn or
corrupt tail (crash mid-write) is cut off on open. The file is rewritten with
only the retained commits when it has grown well past them.
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import crc32c
import msgpack

from contraflow.spu.protocol.topics import TopicPartition

Offsets = dict[TopicPartition, int]

_RECORD = struct.Struct(">II")
INTENT, COMMIT, ABORT, FLOOR = "intent", "commit", "abort", "floor"


@dataclass(frozen=True, slots=True)
class DanglingIntent:
    """A commit that crashed between its intent and its commit record."""

    producer_id: str
    batch_id: int
    starts: Offsets


def _encode(kind: str, producer_id: str, batch_id: int, offsets: Offsets) -> bytes:
    body: bytes = msgpack.packb(
        [kind, producer_id, batch_id, [[t, p, o] for (t, p), o in sorted(offsets.items())]]
    )
    return _RECORD.pack(len(body), crc32c.crc32c(body)) + body


def _decode_records(data: bytes) -> tuple[list[tuple[str, str, int, Offsets]], int]:
    """Every intact record and the byte length of the intact prefix."""
    records: list[tuple[str, str, int, Offsets]] = []
    pos = 0
    while pos + _RECORD.size <= len(data):
        length, crc = _RECORD.unpack_from(data, pos)
        body = data[pos + _RECORD.size : pos + _RECORD.size + length]
        if len(body) < length or crc32c.crc32c(body) != crc:
            break
        try:
            kind, producer, batch_id, entries = msgpack.unpackb(body)
            offsets = {(str(t), int(p)): int(o) for t, p, o in entries}
        except (ValueError, TypeError):
            break
        records.append((kind, producer, batch_id, offsets))
        pos += _RECORD.size + length
    return records, pos


class BatchLedger:
    """Thread-safe; every record is fsynced before the call returns."""

    def __init__(self, path: Path, *, retain_per_producer: int = 10_000) -> None:
        self._path = path
        self._retain = retain_per_producer
        self._lock = threading.Lock()
        self._commits: dict[str, dict[int, Offsets]] = {}
        self._floor: dict[str, int] = {}  # lowest batch id still remembered, per producer
        self._open_intents: dict[tuple[str, int], Offsets] = {}
        self._records = 0
        self._file = self._load()

    # -- opening ---------------------------------------------------------------------------------

    def _load(self) -> BinaryIO:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        data = self._path.read_bytes() if self._path.exists() else b""
        records, good = _decode_records(data)
        for kind, producer, batch_id, offsets in records:
            self._apply(kind, producer, batch_id, offsets)
        self._records = len(records)
        file = open(self._path, "ab")  # noqa: SIM115 - lives as long as the ledger
        if good < len(data):
            file.truncate(good)
            os.fsync(file.fileno())
        return file

    def _apply(self, kind: str, producer: str, batch_id: int, offsets: Offsets) -> None:
        if kind == INTENT:
            self._open_intents[(producer, batch_id)] = offsets
        elif kind == COMMIT:
            self._open_intents.pop((producer, batch_id), None)
            self._commits.setdefault(producer, {})[batch_id] = offsets
            self._evict(producer)
        elif kind == ABORT:
            self._open_intents.pop((producer, batch_id), None)
        elif kind == FLOOR:
            self._floor[producer] = max(self._floor.get(producer, 0), batch_id)

    def _evict(self, producer: str) -> None:
        """Forget the oldest commits beyond the retention; remember where memory starts."""
        commits = self._commits[producer]
        while len(commits) > self._retain:
            oldest = min(commits)
            del commits[oldest]
            self._floor[producer] = oldest + 1

    def dangling(self) -> list[DanglingIntent]:
        """Intents with neither commit nor abort: the caller must undo them, then `record_abort`."""
        with self._lock:
            return [DanglingIntent(p, b, dict(s)) for (p, b), s in self._open_intents.items()]

    # -- recording -------------------------------------------------------------------------------

    def _write(self, kind: str, producer: str, batch_id: int, offsets: Offsets) -> None:
        with self._lock:
            self._file.write(_encode(kind, producer, batch_id, offsets))
            self._file.flush()
            os.fsync(self._file.fileno())
            self._apply(kind, producer, batch_id, offsets)
            self._records += 1
            if self._records > 4 * self._retained_count() + 1024:
                self._compact()

    def record_intent(self, producer_id: str, batch_id: int, starts: Offsets) -> None:
        self._write(INTENT, producer_id, batch_id, starts)

    def record_commit(self, producer_id: str, batch_id: int, ends: Offsets) -> None:
        self._write(COMMIT, producer_id, batch_id, ends)

    def record_abort(self, producer_id: str, batch_id: int) -> None:
        self._write(ABORT, producer_id, batch_id, {})

    # -- reading ---------------------------------------------------------------------------------

    def lookup(self, producer_id: str, batch_id: int) -> Offsets | None:
        """End offsets of a committed batch, or None if it was never committed (or is forgotten)."""
        with self._lock:
            found = self._commits.get(producer_id, {}).get(batch_id)
            return dict(found) if found is not None else None

    def is_forgotten(self, producer_id: str, batch_id: int) -> bool:
        """True for a batch id below what the ledger still remembers: it cannot answer for it."""
        with self._lock:
            return batch_id < self._floor.get(producer_id, 0)

    # -- maintenance -----------------------------------------------------------------------------

    def _retained_count(self) -> int:
        return sum(len(c) for c in self._commits.values()) + len(self._open_intents)

    def _compact(self) -> None:
        """Rewrite the journal with only what is remembered (atomic rename). Lock held."""
        tmp = self._path.with_suffix(".compact")
        with open(tmp, "wb") as out:
            for producer, floor in self._floor.items():
                out.write(_encode(FLOOR, producer, floor, {}))
            for producer, commits in self._commits.items():
                for batch_id, ends in sorted(commits.items()):
                    out.write(_encode(COMMIT, producer, batch_id, ends))
            for (producer, batch_id), starts in self._open_intents.items():
                out.write(_encode(INTENT, producer, batch_id, starts))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self._path)
        dir_fd = os.open(self._path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._file.close()
        self._file = open(self._path, "ab")  # noqa: SIM115
        self._records = self._retained_count()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> BatchLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
