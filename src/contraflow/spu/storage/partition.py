"""A partition: an ordered list of segments, appends with a flush policy, reads.

Thread safety: one lock (`_lock`) guards the segment list and end offsets;
appends write to the page cache under it. Durability waits happen outside it,
on a condition variable, so concurrent appenders share one fsync (group commit):
the first waiter becomes the flush leader and fsyncs everything written so
far, the others sleep until the durable end passes their batch.
"""

from __future__ import annotations

import bisect
import io
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contraflow.atomic_files import fsync_dir, write_atomic
from contraflow.spu.protocol.batch import (
    MAGIC_POS,
    BatchHeader,
    Buffer,
    CorruptBatchError,
    Headers,
    check_batch,
    encode_batch,
    stamped_prefix,
    verify_crc,
)
from contraflow.spu.protocol.compression import Compression
from contraflow.spu.protocol.errors import OffsetOutOfRangeError
from contraflow.spu.protocol.topics import Isolation, PartitionInfo, TopicConfig
from contraflow.spu.storage import boot_checks
from contraflow.spu.storage.checkpoint import read_offset, write_offset
from contraflow.spu.storage.errors import (
    CorruptSegmentError,
    DiskFullError,
    InvalidBatchError,
    StorageError,
    is_disk_full,
)
from contraflow.spu.storage.recovery import (
    CLEAN_SHUTDOWN,
    HIGH_WATERMARK,
    RECOVERY_POINT,
    OpenState,
    RecoveryPoint,
    RecoveryReport,
    list_segment_bases,
    recover_segments,
)
from contraflow.spu.storage.segment import BadBatchError, Segment, SegmentSettings

log = logging.getLogger("contraflow.spu.storage")

DEFAULT_READ_BYTES = 1 << 20
CHECKPOINT_BYTES = 4 << 20  # the recovery point moves after this much fsynced data...
CHECKPOINT_SECONDS = 1.0  # ...or this long after it last moved, whichever comes first


@dataclass
class PartitionStats:
    """Counters for tests, benchmarks and metrics."""

    appends: int = 0
    fsyncs: int = 0
    rolls: int = 0
    corrupt_batches: int = 0  # distinct bad batches reads (or the scrubber) have met
    scrubbed_bytes: int = 0  # bytes the background scrubber CRC-checked ahead of reads


@dataclass(frozen=True)
class FileSlice:
    """A byte range of a segment file, for `os.sendfile(sock, slice.fileno, slice.position, slice.length)`.

    It holds the open file, so the range stays readable even if retention
    deletes the segment meanwhile.
    """

    file: io.FileIO
    position: int
    length: int

    @property
    def fileno(self) -> int:
        return self.file.fileno()


@dataclass(frozen=True)
class ReadResult:
    """Whole batches from `offset` on, as zero-copy views and as file slices."""

    batches: list[memoryview]
    slices: list[FileSlice]
    next_offset: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int

    @property
    def size(self) -> int:
        return sum(s.length for s in self.slices)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Partition:
    """One partition of a topic. Obtain it from `Store.partition`."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        number: int,
        config: TopicConfig,
        *,
        writable: bool = True,
        hw_follows_flush: bool = True,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.number = number
        self.config = config
        self.writable = writable
        self.hw_follows_flush = hw_follows_flush
        self.leader_epoch = 0
        self._settings = SegmentSettings(config.segment_bytes, config.index_interval_bytes)
        self._lock = threading.RLock()
        self._flush_cond = threading.Condition(threading.Lock())
        self._flushing = False
        self._unflushed_bytes = 0
        self._first_unflushed = 0.0
        self._closed = False
        self.stats = PartitionStats()
        self.read_errors: dict[tuple[int, int], str] = {}  # (segment base, byte) -> what a read met
        self._scrub_failed: set[tuple[int, int]] = set()  # (segment base, byte) the scrubber found bad
        if writable:
            directory.mkdir(parents=True, exist_ok=True)
        checkpoint = read_offset(directory / HIGH_WATERMARK)
        self.segments, self.recovery = self._open(checkpoint or 0)
        self._bases = [s.base_offset for s in self.segments]
        self._leo = self.segments[-1].next_offset if self.segments else 0
        self._durable_end = self._leo
        self._hw = self._leo if hw_follows_flush or checkpoint is None else min(checkpoint, self._leo)
        self._checkpointed_at = (time.monotonic(), self._end_position())
        if writable:
            self._skippable(self._write_recovery_point, self._leo)

    def _skippable(self, write: Callable[..., None], *args: Any) -> None:
        """Write a checkpoint that only saves work (recovery reads less of the log); a full disk
        skips it with a warning, and the next open recovers from the log itself."""
        try:
            write(*args)
        except OSError as err:
            if not is_disk_full(err):
                raise
            log.warning("%s/%d: checkpoint skipped, the disk is full: %s", self.topic, self.number, err)

    def _open(self, hw_checkpoint: int) -> tuple[list[Segment], RecoveryReport]:
        marker = self.directory / CLEAN_SHUTDOWN
        point = RecoveryPoint.read(self.directory / RECOVERY_POINT)
        state = OpenState(marker.exists(), point, max(point.offset, hw_checkpoint))
        segments, report = recover_segments(self.directory, self._settings, state, writable=self.writable)
        boot_checks.recall(self.directory, segments)
        if self.writable:
            if state.clean:  # from now on a crash must be noticed
                marker.unlink()
            segments[-1].fsync()
            fsync_dir(self.directory)
        return segments, report

    def _end_position(self) -> int:
        """Bytes in the active segment (0 when there is none yet)."""
        return self.segments[-1].size if self.segments else 0

    def _write_recovery_point(self, offset: int) -> None:
        """Persist: everything below `offset` (the active segment's end) is fsynced."""
        seg = self.segments[-1]
        RecoveryPoint(offset, seg.base_offset, seg.size).write(self.directory / RECOVERY_POINT)
        self._checkpointed_at = (time.monotonic(), seg.size)

    def _checkpoint_due(self) -> bool:
        since, position = self._checkpointed_at
        grown = self._end_position() - position
        return grown >= CHECKPOINT_BYTES or (grown > 0 and time.monotonic() - since >= CHECKPOINT_SECONDS)

    # -- offsets --------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        with self._lock:
            return self.segments[0].base_offset if self.segments else 0

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    def set_high_watermark(self, offset: int, *, persist: bool = True) -> None:
        """Move the committed offset (replication sets it from follower acks).

        Clamped to [log start, log end]; persisted to the `high-watermark` checkpoint
        unless `persist` is False (a replicated leader moves it per produce and
        checkpoints it now and then with `checkpoint_high_watermark`)."""
        with self._lock:
            self._hw = max(self.log_start_offset, min(offset, self._leo))
            if self.writable and persist:
                write_offset(self.directory / HIGH_WATERMARK, self._hw)

    def checkpoint_high_watermark(self) -> None:
        """Persist the in-memory high watermark (a lower one after a crash is safe: it only
        delays committed reads until the followers report again)."""
        with self._lock:
            if self.writable and not self._closed:
                write_offset(self.directory / HIGH_WATERMARK, self._hw)

    @property
    def policy_end(self) -> int:
        """The end below which everything is as durable as the flush policy asks: what a
        replica may count towards the high watermark (fsynced under every_batch)."""
        return self._durable_end if self.config.flush.mode == "every_batch" else self._leo

    # -- appends --------------------------------------------------------------------------------

    def append_records(
        self,
        values: Sequence[Buffer],
        keys: Sequence[Buffer | None] | None = None,
        headers: Sequence[Headers] | None = None,
        timestamps: Sequence[int] | None = None,
        compression: Compression | str | None = None,
    ) -> tuple[int, int]:
        """Encode records as one batch and append it; returns (first offset, last offset)."""
        batch = encode_batch(values, keys, headers, timestamps, compression)
        return self._append(memoryview(batch), BatchHeader.parse(batch))

    def append_encoded(
        self,
        batch: Buffer,
        *,
        assign_offsets: bool = True,
        wait_durable: bool = True,
        crc_checked: bool = False,
    ) -> tuple[int, int]:
        """Append a producer-built batch: the CRC is checked, the offset and leader epoch
        are stamped (without copying the body); returns (first offset, last offset).

        With `assign_offsets=False` (a follower copying its leader's log) the batch
        keeps its offsets and epoch, and must start exactly at the log end. With
        `wait_durable=False` the flush policy's fsync is left to the caller's next
        `flush()`, so a writer appending several batches at once (a transaction
        commit) pays for one fsync instead of one per batch. `crc_checked=True`:
        the caller checked this very buffer's CRC when it arrived (a staged
        transaction batch), so it is not computed again."""
        view = memoryview(batch)
        try:
            header = check_batch(view, crc=not crc_checked)
        except CorruptBatchError as err:
            raise InvalidBatchError(f"rejected batch for {self.topic}/{self.number}: {err}") from None
        return self._append(view, header, assign=assign_offsets, wait_durable=wait_durable)

    def _append(
        self, view: memoryview, header: BatchHeader, *, assign: bool = True, wait_durable: bool = True
    ) -> tuple[int, int]:
        with self._lock:
            self._check_writable()
            if not assign and header.base_offset != self._leo:
                raise InvalidBatchError(
                    f"batch for {self.topic}/{self.number} starts at offset {header.base_offset}, "
                    f"but the log ends at {self._leo}"
                )
            base = self._leo
            parts = (stamped_prefix(view, base, self.leader_epoch), view[MAGIC_POS:]) if assign else (view,)
            try:
                seg = self.segments[-1]
                if not seg.fits(header.total_size, header.record_count):
                    seg = self._roll()
                seg.append(parts, header, base)  # a torn write past `seg.size` is overwritten next time
            except OSError as err:
                if is_disk_full(err):
                    raise DiskFullError(f"append to {self.topic}/{self.number}", self.directory) from err
                raise
            end = self._leo = base + header.record_count
            self.stats.appends += 1
            sync = self._after_write(header.total_size)
        if sync and wait_durable:
            self._wait_durable(end)
        return base, end - 1

    def _after_write(self, size: int) -> bool:
        """Apply the flush policy to a write; True if the caller must wait for an fsync."""
        policy = self.config.flush
        if policy.mode == "never":
            if self.hw_follows_flush:
                self._hw = self._leo
            return False
        if policy.mode == "every_batch":
            return True
        if not self._unflushed_bytes:
            self._first_unflushed = time.monotonic()
        self._unflushed_bytes += size
        return policy.mode == "bytes" and self._unflushed_bytes >= policy.bytes or self._flush_due()

    def _flush_due(self) -> bool:
        elapsed_ms = (time.monotonic() - self._first_unflushed) * 1000
        return self._unflushed_bytes > 0 and elapsed_ms >= self.config.flush.interval_ms

    def _wait_durable(self, end: int) -> None:
        """Group commit: return once offsets below `end` are fsynced, or cut by a truncation
        meanwhile (a follower's, in another thread): waiting for those would fsync in a loop
        until new appends passed `end`, and the follower's apply waiting on it would stall."""
        with self._flush_cond:
            while self._durable_end < min(end, self._leo):
                if self._flushing:
                    self._flush_cond.wait()
                    continue
                self._flushing = True
                with self._lock:
                    seg, target, position = self.segments[-1], self._leo, self.segments[-1].size
                    self._unflushed_bytes = 0
                self._flush_cond.release()
                try:
                    seg.fsync()
                    self.stats.fsyncs += 1
                    seg.release_cache(position)
                finally:
                    self._flush_cond.acquire()
                    self._flushing = False
                    self._flush_cond.notify_all()
                self._durable_end = max(self._durable_end, target)
                if self.hw_follows_flush:
                    self._hw = max(self._hw, target)
                self._checkpoint_if_due(RecoveryPoint(target, seg.base_offset, position))

    def _checkpoint_if_due(self, synced: RecoveryPoint) -> None:
        """Move the recovery point to what a flush just made durable, every few MB or
        seconds, so a crash rescans only what came after it (flush leader only; the
        file is written outside the partition lock, so appends do not wait for it)."""
        with self._lock:
            if self._closed or synced.segment_base != self.segments[-1].base_offset:
                return  # rolled meanwhile: the roll moved it
            if not self._checkpoint_due():
                return
            self._checkpointed_at = (time.monotonic(), synced.position or 0)
        synced.write(self.directory / RECOVERY_POINT)

    def flush(self) -> None:
        """Make everything appended so far durable now, whatever the policy."""
        if self.writable:
            self._wait_durable(self._leo)
            if self.hw_follows_flush:
                self._hw = max(self._hw, self._durable_end)

    def flush_if_due(self) -> None:
        """Called periodically by the store: the time half of the bytes/interval policies."""
        with self._lock:
            due = self.writable and not self._closed and self._flush_due()
        if due:
            self.flush()

    def _roll(self) -> Segment:
        """Close the active segment and start a new one at the log end (lock held)."""
        old = self.segments[-1]
        old.freeze()
        boot_checks.remember(self.directory, self.segments)  # a crash keeps the closed segments' checks
        self.stats.rolls += 1
        try:
            seg = Segment.create(self.directory, self._leo, self._settings)
        except OSError:  # a full disk: the next roll creates the same files again
            Segment(self.directory, self._leo, self._settings, writable=True).delete()
            raise
        fsync_dir(self.directory)
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        self._skippable(self._write_recovery_point, seg.base_offset)
        self.enforce_retention()
        return seg

    def truncate_to(self, offset: int) -> int:
        """Remove every batch at or after `offset` (a whole batch when `offset` falls
        inside one) and return the new log end. For followers whose log diverged from
        the leader's, and for undoing appends. Readers holding views or file slices
        of the removed data keep valid (old) bytes: nothing mapped is cut in place."""
        with self._lock:
            self._check_writable()
            if offset >= self._leo:
                return self._leo
            if offset < self.log_start_offset:
                raise OffsetOutOfRangeError(
                    f"cannot truncate {self.topic}/{self.number} to {offset}: "
                    f"the log starts at {self.log_start_offset}"
                )
            keep = bisect.bisect_right(self._bases, offset) - 1
            for doomed in self.segments[keep + 1 :]:
                doomed.delete()
            del self.segments[keep + 1 :], self._bases[keep + 1 :]
            seg = self.segments[-1]
            position = seg.position_of(offset)
            if position < seg.size:
                seg.cut(position)
            else:
                seg.make_active()
            self._leo = seg.next_offset
            self._durable_end = min(self._durable_end, self._leo)
            self._hw = min(self._hw, self._leo)
            RecoveryPoint(seg.base_offset, seg.base_offset, 0).write(self.directory / RECOVERY_POINT)
            if not self.hw_follows_flush:
                write_offset(self.directory / HIGH_WATERMARK, self._hw)
            fsync_dir(self.directory)
            return self._leo

    def _check_writable(self) -> None:
        if self._closed:
            raise StorageError(f"partition {self.topic}/{self.number} is closed")
        if not self.writable:
            raise StorageError(f"partition {self.topic}/{self.number} is open read-only")

    # -- reads ----------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int = DEFAULT_READ_BYTES, isolation: Isolation = "committed"
    ) -> ReadResult:
        """Whole batches from the one holding `offset`, up to `max_bytes` (at least one batch).

        Committed reads stop at the high watermark, uncommitted ones at the log
        end; an offset below the log start reads from the log start, one past
        the log end raises OffsetOutOfRangeError."""
        with self._lock:
            if offset > self._leo or offset < 0:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range for {self.topic}/{self.number} "
                    f"(log start {self.log_start_offset}, log end {self._leo})"
                )
            limit = self._hw if isolation == "committed" else self._leo
            next_offset = max(offset, self.log_start_offset)
            batches: list[memoryview] = []
            slices: list[FileSlice] = []
            budget = max_bytes
            first = max(0, bisect.bisect_right(self._bases, next_offset) - 1)
            try:
                for seg in self.segments[first:]:
                    if next_offset >= limit:
                        break
                    start = end = seg.position_of(next_offset)
                    full = False
                    try:
                        for pos, header in seg.checked_headers(start, next_offset):
                            full = header.last_offset >= limit or (
                                bool(batches) and header.total_size > budget
                            )
                            if full:
                                break
                            end = pos + header.total_size
                            budget -= header.total_size
                            next_offset = header.next_offset
                            batches.append(seg.view(pos, end))
                    finally:
                        if end > start:
                            slices.append(FileSlice(seg.file, start, end - start))
                    if full:
                        break
            except BadBatchError as err:
                if not batches:  # serve the good batches before it; the next read reports it
                    raise self._corrupt(err) from None
            return ReadResult(batches, slices, next_offset, self._hw, self.log_start_offset, self._leo)

    def _corrupt(self, err: BadBatchError) -> CorruptSegmentError:
        """Count a bad batch (once per position) and name it for the reader."""
        key = (int(err.segment.stem), err.position)
        if key not in self.read_errors:
            self.stats.corrupt_batches += 1
            self.read_errors[key] = f"offset {err.offset}: {err}"
        return CorruptSegmentError(
            err.segment,
            err.position,
            f"corrupt batch in {self.topic}/{self.number} at offset {err.offset}: {err.reason}",
        )

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is >= `timestamp_ms`, None if none is."""
        with self._lock:
            for seg in self.segments:
                found = seg.offset_for_timestamp(timestamp_ms)
                if found is not None:
                    return found
            return None

    def refresh(self) -> None:
        """Read-only opens: pick up batches and segments a live writer added, and
        forget segments retention removed."""
        with self._lock:
            if self.writable:
                return
            on_disk = list_segment_bases(self.directory)
            while self.segments and self.segments[0].base_offset not in on_disk:
                self.segments.pop(0).close()
            if self.segments:
                self.segments[-1].scan_appended()
            for base in on_disk:
                if self.segments and base <= self.segments[-1].base_offset:
                    continue
                if base != self._leo_of_segments():
                    break  # the writer is mid-roll: the previous segment is not all visible yet
                seg = Segment.open(self.directory, base, self._settings, writable=False)
                seg.size = seg.rebuild(base).valid_end
                self.segments.append(seg)
            self._bases = [s.base_offset for s in self.segments]
            self._leo = self._durable_end = self._hw = self._leo_of_segments()

    def verify(self) -> list[str]:
        """CRC-check every batch of every segment again (a full scrub, whatever earlier checks
        covered; it records nothing): one line per bad stretch, naming the offset, the
        segment file and the byte range. Empty when every batch is intact."""
        with self._lock:
            segments = list(self.segments)
        return [
            f"offset {d.offset}: {d.reason} (segment {seg.log_path}, bytes {d.start}..{d.end})"
            for seg in segments
            for d in seg.verify()
        ]

    def scrub_step(self, max_bytes: int) -> int:
        """Check about `max_bytes` of the batches no read or earlier step has checked (the
        background scrubber's unit of work), so later reads of them only look them up.
        The CRC runs without the lock: appends and reads never wait for it. Returns the
        bytes checked, 0 once every batch is checked (or known bad). A bad batch is
        counted and reported as a read meeting it would be."""
        with self._lock:
            found = self._next_unchecked(max_bytes)
            if found is None:
                return 0
            seg, spans = found
            file, views = seg.file, [seg.view(start, end) for start, end in spans]
        intact = [verify_crc(view) for view in views]
        with self._lock:
            if self._closed or seg.file is not file or seg not in self.segments:
                return 1  # cut or deleted meanwhile: the next step looks again
            try:
                seg.take_checked(spans, intact)
            except BadBatchError as err:
                self._scrub_failed.add((seg.base_offset, err.position))
                log.error("scrub: %s", self._corrupt(err))
        walked = spans[-1][1] - spans[0][0]
        self.stats.scrubbed_bytes += walked
        return walked

    def _next_unchecked(self, max_bytes: int) -> tuple[Segment, list[tuple[int, int]]] | None:
        """The first segment with batches no check covers, and their spans (lock held)."""
        if self._closed:
            return None
        for seg in self.segments:
            pos = seg.first_unchecked()
            if pos is None or (seg.base_offset, pos) in self._scrub_failed:
                continue
            spans = seg.unchecked_spans(pos, max_bytes)
            if spans:
                return seg, spans
        return None

    def record_checks(self) -> None:
        """Record what was checked so far (`crc-checked`) for the next open in this boot."""
        with self._lock:
            if self.writable and not self._closed:
                boot_checks.remember(self.directory, self.segments)

    def _leo_of_segments(self) -> int:
        return self.segments[-1].next_offset if self.segments else 0

    # -- retention, description, shutdown -------------------------------------------------------

    def enforce_retention(self, now_ms: int | None = None) -> list[int]:
        """Delete the oldest closed segments that are past the retention time (by their
        newest record) or not needed to keep `retention_bytes`; never the active one.
        Returns the deleted segments' base offsets."""
        now = _now_ms() if now_ms is None else now_ms
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        deleted: list[int] = []
        with self._lock:
            if not self.writable or (retention_ms is None and retention_bytes is None):
                return deleted
            total = sum(s.size for s in self.segments)
            while len(self.segments) > 1:
                oldest = self.segments[0]
                expired = retention_ms is not None and now - oldest.max_timestamp > retention_ms
                surplus = retention_bytes is not None and total - oldest.size >= retention_bytes
                if not (expired or surplus):
                    break
                total -= oldest.size
                deleted.append(self._delete_oldest())
            self._after_deleting(deleted)
        return deleted

    def drop_before(self, offset: int) -> list[int]:
        """Delete the closed segments that hold only records below `offset`, never the active
        one; returns their base offsets. For a log whose records below `offset` say nothing
        any more (a replicated table's snapshot starts there) or that its leader no longer has."""
        deleted: list[int] = []
        with self._lock:
            self._check_writable()
            while self.closed_before(offset):
                deleted.append(self._delete_oldest())
            self._after_deleting(deleted)
        return deleted

    def closed_before(self, offset: int) -> bool:
        """Whether the oldest segment is closed and holds only records below `offset`."""
        with self._lock:
            return len(self.segments) > 1 and self.segments[1].base_offset <= offset

    def restart_at(self, offset: int) -> None:
        """Empty the log and start it again at `offset`, past its end: a follower whose log ends
        before its leader's log starts has nothing the leader could still send after it."""
        with self._lock:
            self._check_writable()
            if offset <= self._leo:
                raise ValueError(f"{self.topic}/{self.number}: {offset} is not past the log end {self._leo}")
            for old in self.segments:
                old.delete()  # as retention does: readers' views of it stay valid
            fsync_dir(self.directory)
            seg = Segment.create(self.directory, offset, self._settings)
            fsync_dir(self.directory)
            self.segments, self._bases = [seg], [offset]
            self._leo = self._durable_end = self._hw = offset
            RecoveryPoint(offset, offset, 0).write(self.directory / RECOVERY_POINT)
            write_offset(self.directory / HIGH_WATERMARK, offset)

    @property
    def active_base_offset(self) -> int:
        """Where the active segment starts: every record below it is in a closed segment."""
        with self._lock:
            return self.segments[-1].base_offset if self.segments else 0

    def _delete_oldest(self) -> int:
        """Remove the oldest segment (lock held, another one left); returns its base offset."""
        oldest = self.segments.pop(0)
        self._bases.pop(0)
        oldest.delete()
        return oldest.base_offset

    def _after_deleting(self, deleted: list[int]) -> None:
        if deleted:
            fsync_dir(self.directory)
            self._hw = max(self._hw, self.log_start_offset)

    def describe(self) -> PartitionInfo:
        with self._lock:
            return PartitionInfo(
                self.number,
                self.log_start_offset,
                self._leo,
                self._hw,
                sum(s.size for s in self.segments),
                len(self.segments),
                self.stats.corrupt_batches,
                self.recovery.damage() + list(self.read_errors.values()),
            )

    def close(self) -> None:
        """Flush, trim indexes, write checkpoints and the clean-shutdown marker."""
        if self._closed:
            return
        if self.writable:
            self.flush()
        with self._lock:
            self._closed = True
            if self.writable:
                self._skippable(self._close_checkpoints)
            for seg in self.segments:
                seg.close()

    def _close_checkpoints(self) -> None:
        """What a clean close leaves for a fast next open (none of it needed for a correct one)."""
        self.segments[-1].freeze()
        write_offset(self.directory / HIGH_WATERMARK, self._hw)
        self._write_recovery_point(self._leo)
        boot_checks.remember(self.directory, self.segments)
        write_atomic(self.directory / CLEAN_SHUTDOWN, b"")

    def discard(self) -> None:
        """Close without writing anything: the partition is being deleted (so nothing of it
        needs to survive), and on a full disk the checkpoints `close` writes would fail."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for seg in self.segments:
                seg.close()

    def __repr__(self) -> str:
        return f"Partition({self.topic!r}, {self.number}, leo={self._leo}, hw={self._hw})"


def remove_partition_files(directory: Path) -> None:
    """Delete a partition directory (topic deletion)."""
    for path in directory.iterdir():
        path.unlink()
    os.rmdir(directory)
