"""One log segment: a `.log` file of batches plus its offset and time indexes.

A segment knows nothing about locking or flush policy; the partition owns
both and calls into it with its lock held.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from contraflow.page_cache import TailCache
from contraflow.spu.protocol.batch import (
    HEADER_SIZE,
    LENGTH_PREFIX,
    MAGIC,
    MAGIC_POS,
    BatchHeader,
    Buffer,
    CorruptBatchError,
    DecodedBatch,
    verify_crc,
)
from contraflow.spu.storage.index import OFFSET_ENTRY, TIME_ENTRY, EntryTable
from contraflow.spu.storage.ranges import RangeSet

MAX_RELATIVE_OFFSET = (1 << 32) - 1
# A segment's page cache kept behind its durable end: what its readers (a sink's pushes, 16 MiB in
# flight; a pipeline's next micro-batch) still want from memory.
TAIL_CACHE_BYTES = 64 << 20


def _copy_range(src: int, dst: int, length: int) -> None:
    """Copy the first `length` bytes of one file to another, in the kernel when it can."""
    done = 0
    try:
        while done < length:
            n = os.copy_file_range(src, dst, length - done, done, done)
            if n == 0:
                break
            done += n
    except OSError:  # no copy_file_range across these files: copy through user space
        pass
    while done < length:
        chunk = os.pread(src, min(1 << 20, length - done), done)
        if not chunk:
            raise OSError(f"file ended at byte {done} while copying {length} bytes")
        done += os.pwrite(dst, chunk, done)


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True)
class SegmentSettings:
    segment_bytes: int
    index_interval_bytes: int

    @property
    def index_capacity(self) -> int:
        return self.segment_bytes // self.index_interval_bytes + 2


@dataclass(frozen=True)
class Hole:
    """Bytes [start, end) of a segment that hold no intact batch although intact
    batches follow: offsets [first_offset, next_offset) cannot be read. Kept in
    place (never cut) so the intact data after it stays readable."""

    start: int
    end: int
    first_offset: int
    next_offset: int
    reason: str

    def __str__(self) -> str:
        return (
            f"bytes {self.start}..{self.end} ({self.reason}): "
            f"offsets {self.first_offset}..{self.next_offset - 1} unreadable"
        )


@dataclass(frozen=True)
class ScanOutcome:
    """Where a CRC scan stopped: `valid_end` bytes are good except the holes;
    `error` says why it stopped early (a torn or corrupt tail)."""

    valid_end: int
    error: str | None
    holes: tuple[Hole, ...] = ()


@dataclass(frozen=True)
class Damage:
    """A bad stretch a verification found: bytes [start, end) from offset `offset` on."""

    start: int
    end: int
    offset: int
    reason: str


class BadBatchError(CorruptBatchError):
    """A read reached a batch that fails its checks, or a hole."""

    def __init__(self, segment: Path, position: int, offset: int, reason: str) -> None:
        super().__init__(f"{reason} (segment {segment}, byte {position})")
        self.segment = segment
        self.position = position
        self.offset = offset
        self.reason = reason


class Segment:
    """A segment file with mmap'ed reads and preallocated, mmap'ed indexes."""

    def __init__(
        self, directory: Path, base_offset: int, settings: SegmentSettings, *, writable: bool
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.settings = settings
        self.writable = writable
        self.log_path = directory / segment_name(base_offset, ".log")
        self.index_path = directory / segment_name(base_offset, ".index")
        self.timeindex_path = directory / segment_name(base_offset, ".timeindex")
        self.file: io.FileIO
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.last_batch_offset = -1
        self._since_index = 0
        self._last_end = 0
        self._map: mmap.mmap | None = None
        self._tail_cache = TailCache(TAIL_CACHE_BYTES)
        self._indexes_loaded = True
        self.index: EntryTable
        self.time_index: EntryTable
        self.verified = RangeSet()  # bytes whose batches passed their CRC check in this process
        # the log file as this process last wrote or opened it: a change since is someone else's
        self.known_stat: os.stat_result | None = None
        self.holes: dict[int, Hole] = {}  # by start position

    # -- lifecycle --------------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, settings: SegmentSettings) -> Segment:
        seg = cls(directory, base_offset, settings, writable=True)
        seg.file = io.FileIO(seg.log_path, "x+")
        seg.known_stat = os.fstat(seg.file.fileno())
        seg.index = EntryTable.create(seg.index_path, OFFSET_ENTRY, settings.index_capacity, writable=True)
        seg.time_index = EntryTable.create(
            seg.timeindex_path, TIME_ENTRY, settings.index_capacity, writable=True
        )
        return seg

    @classmethod
    def open(cls, directory: Path, base_offset: int, settings: SegmentSettings, *, writable: bool) -> Segment:
        """Open the files; indexes are loaded if present (check with `indexes_consistent`)."""
        seg = cls(directory, base_offset, settings, writable=writable)
        seg.file = io.FileIO(seg.log_path, "r+" if writable else "r")
        seg.known_stat = os.fstat(seg.file.fileno())
        seg.size = seg.known_stat.st_size
        capacity = settings.index_capacity
        index = EntryTable.load(seg.index_path, OFFSET_ENTRY, capacity, writable=writable)
        time_index = EntryTable.load(seg.timeindex_path, TIME_ENTRY, capacity, writable=writable)
        seg.index = index or EntryTable(None, OFFSET_ENTRY, capacity, writable=False)
        seg.time_index = time_index or EntryTable(None, TIME_ENTRY, capacity, writable=False)
        seg._indexes_loaded = index is not None and time_index is not None
        return seg

    def indexes_consistent(self, next_offset: int | None) -> bool:
        """Both indexes exist, lie inside the log, and the last offset entry points at the batch it names."""
        if not self._indexes_loaded:
            return False
        limit = MAX_RELATIVE_OFFSET if next_offset is None else next_offset - self.base_offset
        if not (
            self.index.is_consistent(self.size, limit) and self.time_index.is_consistent(self.size, limit)
        ):
            return False
        last = self.index.last()
        if last is None:
            return True
        rel, pos = last
        try:
            header = self.header_at(pos)
        except CorruptBatchError:
            return False
        return header.base_offset == self.base_offset + rel and header.magic == MAGIC

    def load_tail(self) -> bool:
        """After a clean open: find the end state by walking the few batches after the
        last index entry. False if that walk does not end exactly at the end of the file."""
        last = self.index.last()
        start = end = last[1] if last else 0
        time_last = self.time_index.last()
        self.max_timestamp = time_last[0] if time_last else -1
        for pos, header in self.headers_from(start):
            self.next_offset = header.next_offset
            self.last_batch_offset = header.base_offset
            self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
            end = pos + header.total_size
        self._since_index = self.size - start
        return end == self.size

    def make_active(self) -> None:
        """Ready a reopened last segment for appends: extend its indexes again."""
        self.index.activate()
        self.time_index.activate()

    def rebuild(self, expected_base: int, *, trusted_end: int = 0) -> ScanOutcome:
        """CRC-scan the segment, rebuilding both indexes (in memory when read-only).

        The first `trusted_end` bytes (known to have been fsynced whole) are only
        walked, not checked: reads check them later. A bad batch followed by
        intact ones becomes a `Hole`; one with nothing intact after it ends the
        scan, and the caller decides whether that tail is cut or is corruption.
        """
        self._reset_indexes(expected_base)
        pos = self._walk_trusted(trusted_end) if trusted_end else 0
        holes: list[Hole] = []
        while pos < self.size:
            header, error = self._check_at(pos, self.next_offset)
            if header is None:
                found = self._resync(pos + 1, self.next_offset)
                if found is None:
                    return ScanOutcome(pos, error, tuple(holes))
                hole = Hole(pos, found[0], self.next_offset, found[1].base_offset, error)
                holes.append(hole)
                self.holes[pos] = hole
                self.next_offset, pos = hole.next_offset, hole.end
                continue
            self._track(pos, header)
            self.verified.add(pos, pos + header.total_size)
            pos += header.total_size
        return ScanOutcome(pos, None, tuple(holes))

    def _reset_indexes(self, expected_base: int) -> None:
        capacity = self.settings.index_capacity
        self.index = EntryTable.create(self.index_path, OFFSET_ENTRY, capacity, writable=self.writable)
        self.time_index = EntryTable.create(self.timeindex_path, TIME_ENTRY, capacity, writable=self.writable)
        self._indexes_loaded = True
        self.next_offset = expected_base
        self.max_timestamp = -1
        self._since_index = 0
        self._last_end = 0
        self.verified.clear()
        self.holes.clear()

    def _walk_trusted(self, trusted_end: int) -> int:
        """Index the fsynced prefix by its headers alone; 0 (scan it all) if the
        headers do not lead exactly to `trusted_end`."""
        expected = self.next_offset
        for pos, header in self.headers_from(0, min(trusted_end, self.size)):
            if header.base_offset != self.next_offset:
                break
            self._track(pos, header)
        if self._last_end == trusted_end:
            return trusted_end
        self._reset_indexes(expected)
        return 0

    def _resync(self, pos: int, expected: int) -> tuple[int, BatchHeader] | None:
        """The next intact batch at or after byte `pos` whose base offset continues
        the log (not below `expected`): where readable data resumes after a bad batch."""
        buf = self._mapped(self.size)
        marker = bytes([MAGIC])
        candidate = buf.find(marker, pos + MAGIC_POS)
        while candidate != -1:
            start = candidate - MAGIC_POS
            header, _ = self._check_at(start, None)
            if header is not None and expected <= header.base_offset < expected + MAX_RELATIVE_OFFSET:
                return start, header
            candidate = buf.find(marker, candidate + 1)
        return None

    def verify(self) -> list[Damage]:
        """CRC-check every batch again (whatever earlier checks covered), without touching
        the indexes or the checked ranges: each bad stretch found, the check resuming at
        the next intact batch after it."""
        pos, expected = 0, self.base_offset
        damage: list[Damage] = []
        while pos < self.size:
            header, error = self._check_at(pos, expected)
            if header is None:
                found = self._resync(pos + 1, expected)
                damage.append(Damage(pos, found[0] if found else self.size, expected, error))
                if found is None:
                    break
                pos, expected = found[0], found[1].base_offset
                continue
            pos += header.total_size
            expected = header.next_offset
        return damage

    def first_unchecked(self) -> int | None:
        """Position of the first batch no check has covered yet (known holes aside), None if none."""
        pos = self.verified.first_gap(self.size)
        while pos is not None and pos in self.holes:
            pos = self.verified.first_gap(self.size, self.holes[pos].end)
        return pos

    def unchecked_spans(self, pos: int, max_bytes: int) -> list[tuple[int, int]]:
        """Byte spans of the batches from `pos` (a batch boundary) on that no check covers
        yet, found by their headers alone: about `max_bytes` of them, at least one."""
        spans: list[tuple[int, int]] = []
        for start, header in self.headers_from(pos):
            end = start + header.total_size
            if (spans and end - pos > max_bytes) or self.verified.covers(start, end):
                break
            spans.append((start, end))
        return spans

    def take_checked(self, spans: Sequence[tuple[int, int]], crc_intact: Sequence[bool]) -> None:
        """Mark a scrub's batches as checked, given their CRC results (computed without the
        partition's lock); each batch's other checks run here, as a read's would. The first
        bad batch raises BadBatchError (the ones before it are marked)."""
        expected: int | None = None
        for (start, end), intact in zip(spans, crc_intact, strict=True):
            header, error = self._check_frame(start, expected)
            if header is None or not intact or start + header.total_size != end:
                offset = expected if expected is not None else self.header_at(start).base_offset
                raise BadBatchError(self.log_path, start, offset, error or "CRC32C mismatch")
            self.verified.add(start, end)
            expected = header.next_offset

    def _check_at(self, pos: int, expected_offset: int | None) -> tuple[BatchHeader | None, str]:
        """Check the batch at `pos` (its base offset too, unless `expected_offset` is None)."""
        header, error = self._check_frame(pos, expected_offset)
        if header is not None and not verify_crc(self.view(pos, pos + header.total_size)):
            return None, "CRC32C mismatch"
        return header, error

    def _check_frame(self, pos: int, expected_offset: int | None) -> tuple[BatchHeader | None, str]:
        """`_check_at` without the CRC: magic, length, offset and counts."""
        if self.size - pos < HEADER_SIZE:
            return None, f"torn batch header ({self.size - pos} bytes left)"
        header = self.header_at(pos)
        if header.magic != MAGIC:
            return None, f"bad magic {header.magic}"
        if header.batch_length < HEADER_SIZE - LENGTH_PREFIX or pos + header.total_size > self.size:
            return None, f"torn batch (length {header.total_size}, {self.size - pos} bytes left)"
        if expected_offset is not None and header.base_offset != expected_offset:
            return None, f"batch offset {header.base_offset} where {expected_offset} was expected"
        if header.record_count <= 0 or header.last_offset_delta != header.record_count - 1:
            return None, "inconsistent record count"
        return header, ""

    def scan_appended(self) -> ScanOutcome:
        """Read-only followers of a live writer: take in batches appended since the last
        look. A batch still being written fails its checks and is retried next time."""
        pos = self.size
        self.size = os.fstat(self.file.fileno()).st_size
        while pos < self.size:
            header, error = self._check_at(pos, self.next_offset)
            if header is None:
                self.size = pos
                return ScanOutcome(pos, error)
            self._track(pos, header)
            self.verified.add(pos, pos + header.total_size)
            pos += header.total_size
        return ScanOutcome(pos, None)

    def cut(self, position: int) -> None:
        """Drop everything from `position` (a batch boundary) while readers may hold views.

        Truncating a mapped file in place would make their pages vanish (SIGBUS),
        so the kept prefix is copied to a new file that replaces the old one; open
        maps and FileSlices keep reading the old inode until they are dropped.
        """
        tmp = self.log_path.with_name(self.log_path.name + ".cut")
        with io.FileIO(tmp, "w") as out:
            _copy_range(self.file.fileno(), out.fileno(), position)
            os.fsync(out.fileno())
        os.replace(tmp, self.log_path)
        self.file = io.FileIO(self.log_path, "r+")
        self.known_stat = os.fstat(self.file.fileno())
        self._map = None
        self.size = position
        outcome = self.rebuild(self.base_offset)
        if outcome.error is not None:  # the prefix was checked on open and on append
            raise CorruptBatchError(f"{self.log_path} at byte {outcome.valid_end}: {outcome.error}")

    def truncate_file(self, size: int) -> None:
        """Cut the log file (recovery only: never while readers hold views of the tail)."""
        self._map = None
        self.file.truncate(size)
        os.fsync(self.file.fileno())
        self.size = size
        self.known_stat = os.fstat(self.file.fileno())
        self.verified.clip(size)

    def freeze(self) -> None:
        """Make a segment read-mostly: final time entry, fsync, trim indexes."""
        if not self.writable:
            return
        last = self.time_index.last()
        if self.last_batch_offset >= 0 and (last is None or self.max_timestamp > last[0]):
            self.time_index.reserve_next()
            self.time_index.append(self.max_timestamp, self.last_batch_offset - self.base_offset)
        os.fsync(self.file.fileno())
        self.index.freeze()
        self.time_index.freeze()

    def fsync(self) -> None:
        os.fsync(self.file.fileno())

    def release_cache(self, durable: int) -> None:
        """Hand back the page cache of the bytes more than TAIL_CACHE_BYTES behind `durable` (a
        position already fsynced: clean pages). Readers of a log read its tail; the pages of the
        bytes far behind it are better made into the next appends' pages (`contraflow.page_cache`)."""
        self._tail_cache.release(self.file.fileno(), durable, self._map)

    def close(self) -> None:
        self._map = None
        self.index.close()
        self.time_index.close()
        self.file.close()

    def delete(self) -> None:
        """Remove the files. Open mmaps and file handles held by readers stay valid."""
        for path in (self.log_path, self.index_path, self.timeindex_path):
            path.unlink(missing_ok=True)

    # -- appends ----------------------------------------------------------------------------------

    def fits(self, batch_size: int, record_count: int) -> bool:
        if self.size == 0:
            return True
        if self.size + batch_size > self.settings.segment_bytes:
            return False
        return self.next_offset + record_count - self.base_offset <= MAX_RELATIVE_OFFSET

    def append(self, parts: Sequence[Buffer], header: BatchHeader, base_offset: int) -> int:
        """Write one batch (as consecutive buffers, already stamped with `base_offset`,
        which `header` may predate) at the end; returns its position."""
        pos = self.size
        fd = self.file.fileno()
        self.index.reserve_next()  # a full disk fails here, before the log has anything of it
        self.time_index.reserve_next()
        try:
            written = os.pwritev(fd, parts, pos)
            if written != header.total_size:  # rare short write (a full disk): finish it the slow way
                rest = b"".join(bytes(p) for p in parts)[written:]
                while rest:
                    n = os.pwrite(fd, rest, pos + header.total_size - len(rest))
                    rest = rest[n:]
        except OSError:
            # Cut what part of the batch got written (ENOSPC midway): the file keeps exactly the
            # batches appended, and the next open finds no torn tail to quarantine (on a full disk).
            with contextlib.suppress(OSError):
                os.ftruncate(fd, pos)
            raise
        self.size = pos + header.total_size
        self._track(pos, header, base_offset)
        self.verified.add(pos, self.size)  # the partition checked the batch before writing it
        self.known_stat = os.fstat(fd)
        return pos

    def _track(self, pos: int, header: BatchHeader, base_offset: int | None = None) -> None:
        """Account one batch: sparse index entries, end offset, timestamps."""
        base = header.base_offset if base_offset is None else base_offset
        rel = base - self.base_offset
        if self._since_index >= self.settings.index_interval_bytes:
            self.index.append(rel, pos)
            running = max(self.max_timestamp, header.max_timestamp)
            last = self.time_index.last()
            if last is None or running > last[0]:
                self.time_index.append(running, rel)
            self._since_index = 0
        self._since_index += header.total_size
        self._last_end = pos + header.total_size
        self.next_offset = base + header.record_count
        self.last_batch_offset = base
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp

    # -- reads ------------------------------------------------------------------------------------

    def _mapped(self, end: int) -> mmap.mmap:
        """The read-only mmap, remapped when the file has grown past it. A replaced
        map lives on as long as some reader still holds a view of it."""
        if self._map is None or len(self._map) < end:
            self._map = mmap.mmap(self.file.fileno(), self.size, access=mmap.ACCESS_READ)
        return self._map

    def view(self, start: int, end: int) -> memoryview:
        """Zero-copy view of bytes [start, end) of the log file."""
        if end <= start:
            return memoryview(b"")
        return memoryview(self._mapped(end))[start:end]

    def header_at(self, pos: int) -> BatchHeader:
        if self.size - pos < HEADER_SIZE:
            raise CorruptBatchError(f"truncated batch header at byte {pos}")
        return BatchHeader.parse(self._mapped(pos + HEADER_SIZE), pos)

    def headers_from(self, pos: int, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Walk batch headers (no CRC check) from a batch boundary."""
        end = self.size if end is None else end
        holes = self.holes
        while pos + HEADER_SIZE <= end:
            if holes and pos in holes:
                pos = holes[pos].end
                continue
            header = self.header_at(pos)
            if pos + header.total_size > end or header.batch_length <= 0:
                return
            yield pos, header
            pos += header.total_size

    def checked_headers(self, pos: int, offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """`headers_from` for a reader of `offset`: a batch is only yielded once it passed
        its checks (CRC included, once per process); a bad batch or a hole raises BadBatchError."""
        lost = self.hole_at_offset(offset) if self.holes else None
        if lost is not None:
            raise BadBatchError(self.log_path, lost.start, offset, str(lost))
        expected: int | None = None
        while pos + HEADER_SIZE <= self.size:
            hole = self.holes.get(pos) if self.holes else None
            if hole is not None:
                raise BadBatchError(self.log_path, pos, hole.first_offset, str(hole))
            header = self.header_at(pos)
            end = pos + header.total_size
            if not self.verified.covers(pos, end):
                checked, error = self._check_at(pos, expected)
                if checked is None:
                    raise BadBatchError(self.log_path, pos, expected or header.base_offset, error)
                self.verified.add(pos, end)
            yield pos, header
            expected = header.next_offset
            pos = end

    def hole_at_offset(self, offset: int) -> Hole | None:
        """The hole whose lost offsets include `offset`, if any."""
        return next((h for h in self.holes.values() if h.first_offset <= offset < h.next_offset), None)

    def position_of(self, offset: int) -> int:
        """Position of the batch containing `offset` (or the first one after it; size at the end)."""
        entry = self.index.floor(offset - self.base_offset)
        start = entry[1] if entry else 0
        for pos, header in self.headers_from(start):
            if header.next_offset > offset:
                return pos
        return self.size

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """First offset in this segment whose record timestamp is >= `timestamp`."""
        if self.max_timestamp < timestamp:
            return None
        entry = self.time_index.floor(timestamp, 0, strict=True)
        start = self.position_of(self.base_offset + entry[1]) if entry else 0
        for pos, header in self.headers_from(start):
            if header.max_timestamp >= timestamp:
                batch = DecodedBatch(self.view(pos, pos + header.total_size), header)
                for offset, ts in zip(batch.offsets(), batch.timestamps(), strict=True):
                    if ts >= timestamp:
                        return offset
        return None
