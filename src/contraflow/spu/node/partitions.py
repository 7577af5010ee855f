"""The server's single door to the storage engine.

Everything the server writes goes through here so three rules hold in one place:
- a per-partition write gate keeps plain produces out while a transaction
  commits, so a commit's appends are contiguous and can be undone by truncation;
- a commit's offsets are a `CommitRange`: committed reads stop where it starts
  until it is appended and the high watermark has passed its end (on a lone SPU
  `publish`, after the ledger's commit record and the fsync; in a cluster once
  the in-sync replicas hold it), so a committed reader never sees part of one;
- every publish wakes the partition's tailing streams.
With a single SPU the leader is the whole in-sync set: the engine's high
watermark follows the fsynced end, and `acks=committed` waits for that fsync.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from contraflow.spu.node.commit_ranges import CommitRanges
from contraflow.spu.node.idempotence.producers import OutOfOrderSequence, ProducerTable, SequencedBatch
from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.protocol.batch import (
    HEADER_SIZE,
    BatchHeader,
    CorruptBatchError,
    batch_size_at,
    check_batch,
)
from contraflow.spu.protocol.commit_marks import TRANSACTIONAL
from contraflow.spu.protocol.idempotence import numbered_batch
from contraflow.spu.protocol.topics import TopicPartition
from contraflow.spu.rpc.server import SENDFILE_MIN_BYTES, FileSlice, Part
from contraflow.spu.storage.partition import Partition
from contraflow.spu.storage.store import Store


class SharedGate:
    """A partition's write gate: plain produces share it (so their fsyncs can be one
    group commit), a transaction commit holds it alone. Waiting commits go first."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sharers = 0
        self._exclusive = False
        self._exclusive_waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive or self._exclusive_waiting:
                self._cond.wait()
            self._sharers += 1
        try:
            yield
        finally:
            with self._cond:
                self._sharers -= 1
                if not self._sharers:
                    self._cond.notify_all()

    def acquire_exclusive(self) -> None:
        with self._cond:
            self._exclusive_waiting += 1
            while self._exclusive or self._sharers:
                self._cond.wait()
            self._exclusive_waiting -= 1
            self._exclusive = True

    def release_exclusive(self) -> None:
        with self._cond:
            self._exclusive = False
            self._cond.notify_all()


def split_batches(payload: memoryview, *, verify: bool) -> list[memoryview]:
    """Cut a payload into its record batches (zero-copy); `verify` also checks each CRC."""
    batches: list[memoryview] = []
    pos = 0
    while pos < len(payload):
        if len(payload) - pos < HEADER_SIZE:
            raise SpuError(ErrorCode.CORRUPT_BATCH, f"truncated batch header at payload byte {pos}")
        size = batch_size_at(payload, pos)
        if size < HEADER_SIZE or pos + size > len(payload):
            raise SpuError(ErrorCode.CORRUPT_BATCH, f"batch at payload byte {pos} claims {size} bytes")
        batch = payload[pos : pos + size]
        if verify:
            try:
                check_batch(batch)
            except CorruptBatchError as err:
                raise SpuError(ErrorCode.CORRUPT_BATCH, str(err)) from None
        batches.append(batch)
        pos += size
    if not batches:
        raise SpuError(ErrorCode.INVALID_ARGUMENT, "the request carries no record batch")
    return batches


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """One produce request's batches; `durable`: answer only once fsynced (acks=committed);
    `built_here`: the SPU encoded them itself just now (the Kafka listener, after checking
    the client's CRC), so their CRC is not checked a second time."""

    batches: list[memoryview]
    durable: bool
    built_here: bool = False


AppendResult = tuple[int, int] | Exception


@dataclass(frozen=True, slots=True)
class ReadView:
    """A read ready to send: payload parts plus the offsets the client needs."""

    parts: list[Part]
    size: int
    next_offset: int
    high_watermark: int
    log_start_offset: int
    uncommitted_tail: bool = False  # appended data waits for the high watermark (an fsync)

    def fields(self) -> dict[str, Any]:
        return {
            "next_offset": self.next_offset,
            "high_watermark": self.high_watermark,
            "log_start_offset": self.log_start_offset,
        }


class Partitions:
    """Thread-safe wrapper of a Store for the server (appends run in worker threads)."""

    def __init__(self, store: Store, on_publish: Callable[[TopicPartition], None]) -> None:
        self.store = store
        self._on_publish = on_publish
        self._gates: dict[TopicPartition, SharedGate] = {}
        self._gates_lock = threading.Lock()
        # Commits in progress or not yet committed: committed reads stop where they start.
        self.commit_ranges = CommitRanges()
        # In a cluster: idempotent producers' last batches (retries are answered, not appended).
        self.producers = ProducerTable()  # both protocols' idempotent producers
        self._group_fsync = False
        self._append_produced = self._append_plain

    def partition(self, tp: TopicPartition) -> Partition:
        return self.store.partition(*tp)

    def check_exists(self, tp: TopicPartition) -> None:
        self.partition(tp)

    # -- writes (worker threads) -----------------------------------------------------------------

    def _gate(self, tp: TopicPartition) -> SharedGate:
        with self._gates_lock:
            gate = self._gates.get(tp)
            if gate is None:
                gate = self._gates[tp] = SharedGate()
            return gate

    @contextmanager
    def locked(self, tps: Iterable[TopicPartition]) -> Iterator[None]:
        """Hold the write gates of `tps` alone, taken in sorted order so commits cannot deadlock."""
        gates = [self._gate(tp) for tp in sorted(set(tps))]
        taken: list[SharedGate] = []
        try:
            for gate in gates:
                gate.acquire_exclusive()
                taken.append(gate)
            yield
        finally:
            for gate in reversed(taken):
                gate.release_exclusive()

    def produce(
        self, tp: TopicPartition, batches: list[memoryview], durable: bool, *, built_here: bool = False
    ) -> tuple[int, int]:
        """Append one plain produce; returns (first offset, last offset)."""
        (result,) = self.produce_many(tp, [AppendRequest(batches, durable, built_here)])
        if isinstance(result, BaseException):
            raise result
        return result

    def produce_many(self, tp: TopicPartition, requests: list[AppendRequest]) -> list[AppendResult]:
        """Append produce requests in order, each answered on its own (a bad batch fails
        only its request). Produces share the gate: the engine orders concurrent appends
        and groups their fsyncs; one fsync covers every request here that asked for it."""
        results: list[AppendResult] = []
        # In a cluster, a group of every-batch produces shares one fsync after its appends
        # (a lone SPU keeps its per-batch fsync; docs/spu-server.md).
        one_fsync = self._group_fsync and self.partition(tp).config.flush.mode == "every_batch"
        with self._gate(tp).shared():
            for request in requests:
                try:
                    self._check_not_fenced(tp)
                    first, last = -1, -1
                    for batch in request.batches:
                        base, last = self._append_produced(
                            tp, batch, wait=not one_fsync, crc_checked=request.built_here
                        )
                        first = base if first < 0 else first
                    results.append((first, last))
                except Exception as err:
                    results.append(err)
            if one_fsync:
                self._on_publish(tp)  # followers copy while this replica fsyncs
            if one_fsync or any(r.durable for r in requests):
                try:
                    self.sync(tp)
                except Exception as err:
                    results = [err if r.durable else res for r, res in zip(requests, results, strict=True)]
        self._on_publish(tp)
        return results

    def _check_not_fenced(self, tp: TopicPartition) -> None:
        """Gate held and still fenced: a commit failed midway; appending now would put
        acknowledged records behind data the restart will cut away."""
        if self.commit_ranges.failed_midway(tp):
            raise SpuError(
                ErrorCode.STORAGE_ERROR,
                f"{tp[0]}/{tp[1]} holds a half-written transaction after a storage failure; restart the SPU",
            )

    def log_end(self, tp: TopicPartition) -> int:
        return self.partition(tp).log_end_offset

    def fence(self, tp: TopicPartition, offset: int) -> None:
        """A commit starts appending at `offset` (write gate held alone)."""
        self._check_not_fenced(tp)
        self.commit_ranges.open(tp, offset)

    def append(self, tp: TopicPartition, batch: bytes | memoryview) -> tuple[int, int]:
        return self.partition(tp).append_encoded(batch)

    def keep_producers(self) -> None:
        """At start, in a cluster: the SPU protocol's produces go through the idempotent
        producers' table, and a group of every-batch produces shares one fsync (followers
        copy meanwhile)."""
        self._group_fsync = True
        self._append_produced = self._append_idempotent

    def _append_plain(
        self, tp: TopicPartition, batch: memoryview, *, wait: bool, crc_checked: bool
    ) -> tuple[int, int]:
        """A produced batch, appended. `wait`: for the flush policy's fsync (else the caller
        syncs once for many)."""
        return self.partition(tp).append_encoded(batch, wait_durable=wait, crc_checked=crc_checked)

    def _append_idempotent(
        self, tp: TopicPartition, batch: memoryview, *, wait: bool, crc_checked: bool
    ) -> tuple[int, int]:
        """A produced batch: appended, unless it repeats its idempotent producer's last batch,
        which answers the offsets it got the first time."""
        header = BatchHeader.parse(batch)
        if header.attributes & TRANSACTIONAL:
            raise SpuError(
                ErrorCode.INVALID_ARGUMENT, "a produced batch must not carry a commit mark (attribute 0x08)"
            )
        numbered = (
            numbered_batch(header.producer_id, header.record_count) if header.producer_id >= 0 else None
        )
        if numbered is None:
            return self._append_plain(tp, batch, wait=wait, crc_checked=crc_checked)
        producer, first, last_sequence, window = numbered
        producers = self.producers
        with producers.lock(tp):
            try:
                earlier = producers.duplicate(tp, producer, 0, first, last_sequence)
            except OutOfOrderSequence as err:
                raise SpuError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE,
                    f"producer {producer} sent sequence {first} to {tp[0]}/{tp[1]}, expected {err.expected}",
                ) from None
            if earlier is not None:
                return earlier
            base, last = self._append_plain(tp, batch, wait=wait, crc_checked=crc_checked)
            producers.record(tp, producer, 0, SequencedBatch(first, last_sequence, base, last), window)
            return base, last

    def append_unsynced(self, tp: TopicPartition, batch: bytes | memoryview) -> tuple[int, int]:
        """A transaction's append: made durable by the `sync` after all of them (one fsync).
        Its CRC was checked when it was staged (`txn_stage`), not again here."""
        return self.partition(tp).append_encoded(batch, wait_durable=False, crc_checked=True)

    def sync(self, tp: TopicPartition) -> None:
        self.partition(tp).flush()

    def publish(self, tp: TopicPartition) -> None:
        """A commit appended everything: its range ends here; wake the tailing streams
        (and followers, which copy it)."""
        self.commit_ranges.close(tp, self.log_end(tp))
        self._on_publish(tp)

    # -- reads (event loop: page cache, no fsync) ------------------------------------------------

    def start_offset(self, tp: TopicPartition, offset: int) -> int:
        """Where a stream asked to start at `offset` really starts (-1 means the end)."""
        part = self.partition(tp)
        if offset < 0:
            return part.log_end_offset
        if offset > part.log_end_offset:
            part.read(offset, 1)  # raises the engine's out-of-range error
        return max(offset, part.log_start_offset)

    def read(
        self, tp: TopicPartition, offset: int, max_bytes: int, isolation: str, *, views: bool = False
    ) -> ReadView:
        """Whole batches as payload parts: file slices for sendfile when the read is big
        enough to be worth it, else the mmap views themselves (written without a copy).
        `views`: always the mmap views, one per batch (for a reader that re-encodes them)."""
        result = self.partition(tp).read(offset, max_bytes, isolation=isolation)  # type: ignore[arg-type]
        batches = result.batches
        slices = [FileSlice(s.file, s.position, s.length) for s in result.slices]
        high_watermark, next_offset = result.high_watermark, result.next_offset
        # Ask for the commit ranges after the data: a range seen gone here means the
        # commit that wrote any data in it had finished (all of it is committed).
        visible = self.commit_ranges.visible(tp, high_watermark)
        if visible < high_watermark:
            high_watermark = visible
            if isolation == "committed" and next_offset > visible:
                batches, slices, next_offset = _cut_at(batches, slices, visible, offset)
        size = sum(s.length for s in slices)
        sendfile = size >= SENDFILE_MIN_BYTES and not views
        parts: list[Part] = list(slices) if sendfile else list(batches)
        tail = result.log_end_offset > high_watermark
        return ReadView(parts, size, next_offset, high_watermark, result.log_start_offset, tail)

    def list_offset(self, tp: TopicPartition, at: str | int, isolation: str) -> int | None:
        part = self.partition(tp)
        if at == "earliest":
            return int(part.log_start_offset)
        if at == "latest":
            if isolation != "committed":
                return int(part.log_end_offset)
            return int(self.commit_ranges.visible(tp, part.high_watermark))
        result = part.offset_for_timestamp(int(at))
        return None if result is None else int(result)


def _cut_at(
    batches: list[memoryview], slices: list[FileSlice], fence: int, offset: int
) -> tuple[list[memoryview], list[FileSlice], int]:
    """Drop the batches at or past `fence` from the end of a read (they are one contiguous tail)."""
    drop = 0
    next_offset = max(offset, 0)
    kept_views: list[memoryview] = []
    for view in batches:
        header = BatchHeader.parse(view)
        if header.last_offset >= fence:
            drop += header.total_size
        else:
            next_offset = header.next_offset
            kept_views.append(view)
    kept: list[FileSlice] = []
    for s in reversed(slices):
        if drop >= s.length:
            drop -= s.length
            continue
        kept.append(FileSlice(s.file, s.position, s.length - drop))
        drop = 0
    kept.reverse()
    return kept_views, kept, next_offset
