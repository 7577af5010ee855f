"""Opening a partition's segments after a clean or an unclean shutdown.

Rules (see docs/spu-storage.md):
- The `.clean-shutdown` marker is a hint, never trusted over the files: the
  active segment must end exactly where the `recovery-point` says (offset and
  byte position) and its indexes must check out, or it is scanned as after a
  crash.
- After a crash, scanning starts at the `recovery-point`: the segment and byte
  position up to which everything was fsynced. That prefix is only walked by
  its headers (reads CRC-check it later); what follows is CRC-scanned.
- A bad batch with intact batches after it is a hole: kept in place, reported,
  and read as an error naming its offsets. Intact data after it is never cut.
- Only a bad tail (nothing intact after it) is cut. The cut bytes are copied to
  a quarantine file beside the segment first, and the cut is logged at ERROR
  with its record and byte counts; below the committed offset it is data loss.
- A read-only open repairs nothing on disk: it works around damage in memory.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from contraflow.atomic_files import write_atomic
from contraflow.spu.storage.errors import CorruptSegmentError
from contraflow.spu.storage.segment import Hole, Segment, SegmentSettings

log = logging.getLogger("contraflow.spu.storage")

CLEAN_SHUTDOWN = ".clean-shutdown"
RECOVERY_POINT = "recovery-point"
HIGH_WATERMARK = "high-watermark"
QUARANTINE_SUFFIX = ".quarantine"


@dataclass(frozen=True)
class RecoveryPoint:
    """Everything below `offset` was fsynced: it lies in segment `segment_base`, whose
    first `position` bytes hold it (position None: an old file, scan that segment)."""

    offset: int
    segment_base: int = 0
    position: int | None = None

    def encode(self) -> bytes:
        return f"{self.offset} {self.segment_base} {self.position or 0}\n".encode()

    @classmethod
    def read(cls, path: Path) -> RecoveryPoint:
        """The stored point; offset 0 if the file is missing or unreadable."""
        try:
            fields = [int(f) for f in path.read_text().split()]
        except (FileNotFoundError, ValueError):
            return cls(0)
        if len(fields) == 3 and min(fields) >= 0:
            return cls(*fields)
        return cls(fields[0]) if len(fields) == 1 and fields[0] >= 0 else cls(0)

    def write(self, path: Path) -> None:
        write_atomic(path, self.encode())


@dataclass(frozen=True)
class Truncation:
    segment: Path
    position: int
    bytes_removed: int
    reason: str
    records: int = 0  # records cut: those whose headers still frame, at least the committed ones
    first_offset: int = 0  # the first offset cut
    data_loss: bool = False  # the cut reached below the committed offset
    quarantine: Path | None = None

    def __str__(self) -> str:
        kind = "DATA LOSS: cut committed records" if self.data_loss else "cut a torn tail"
        kept = f", kept in {self.quarantine.name}" if self.quarantine else ""
        return (
            f"{kind} of {self.segment.name} at byte {self.position} from offset {self.first_offset}: "
            f"{self.bytes_removed} bytes, {self.records} records ({self.reason}){kept}"
        )


@dataclass
class RecoveryReport:
    """What opening a partition found and repaired."""

    directory: Path
    clean_shutdown: bool
    read_only: bool = False  # nothing was changed on disk: the damage is worked around in memory
    scanned_segments: int = 0
    distrusted_marker: str | None = None  # why a clean-shutdown marker was not believed
    truncated: list[Truncation] = field(default_factory=list)
    holes: list[tuple[Path, Hole]] = field(default_factory=list)
    deleted_segments: list[Path] = field(default_factory=list)
    rebuilt_indexes: list[Path] = field(default_factory=list)

    @property
    def repaired(self) -> bool:
        return bool(self.truncated or self.deleted_segments or self.rebuilt_indexes or self.holes)

    @property
    def damaged(self) -> bool:
        """Data was cut or cannot be read: an error, not a routine repair."""
        return bool(self.truncated or self.holes)

    def damage(self) -> list[str]:
        """One line per cut or hole, for `topic describe`."""
        return [str(t) for t in self.truncated] + [f"hole in {p.name}: {h}" for p, h in self.holes]

    def __str__(self) -> str:
        parts = [f"{self.directory}: {'clean' if self.clean_shutdown else 'unclean'} shutdown"]
        if self.distrusted_marker:
            parts.append(f"clean-shutdown marker not trusted ({self.distrusted_marker})")
        parts += self.damage()
        if self.read_only and self.repaired:
            parts.append("read-only open: the files are left as they are")
        parts += [f"deleted {p.name} (after the truncation point)" for p in self.deleted_segments]
        parts += [f"rebuilt indexes of {p.name}" for p in self.rebuilt_indexes]
        return "; ".join(parts)


def list_segment_bases(directory: Path) -> list[int]:
    """Base offsets of the `{base:020}.log` files, ascending."""
    bases = []
    for path in directory.glob("*.log"):
        stem = path.stem
        if len(stem) == 20 and stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


@dataclass(frozen=True)
class OpenState:
    """What the partition's files say before recovery looks at the segments."""

    clean: bool
    point: RecoveryPoint
    committed: int  # offsets below this were acknowledged as durable


def recover_segments(
    directory: Path, settings: SegmentSettings, state: OpenState, *, writable: bool
) -> tuple[list[Segment], RecoveryReport]:
    """Open and check every segment; returns them (the last one ready for appends when writable)."""
    report = RecoveryReport(directory, state.clean, not writable)
    bases = list_segment_bases(directory)
    if not bases:
        if not writable:
            return [], report
        return [Segment.create(directory, 0, settings)], report
    segments = [Segment.open(directory, b, settings, writable=writable) for b in bases]
    first_scan: int | None = None
    if state.clean:
        report.distrusted_marker = _clean_tail_problem(segments[-1], state.point)
    if not state.clean or report.distrusted_marker:
        first_scan = max((i for i, b in enumerate(bases) if b <= state.point.offset), default=0)
    closed = len(segments) - 1 if first_scan is None else first_scan
    for i, seg in enumerate(segments[:closed]):
        _check_closed(seg, segments[i + 1].base_offset, report)
    kept = segments
    if first_scan is not None:
        kept = _scan_tail(segments, first_scan, state, report, writable)
    if writable:
        for seg in kept[:-1]:
            seg.freeze()
        kept[-1].make_active()
    _log_report(report, writable)
    return kept, report


def _log_report(report: RecoveryReport, writable: bool) -> None:
    if report.damaged:
        log.error("recovered %s", report)
    elif report.repaired or report.distrusted_marker:
        log.log(logging.WARNING if writable else logging.DEBUG, "recovered %s", report)


def _clean_tail_problem(seg: Segment, point: RecoveryPoint) -> str | None:
    """Why the last segment does not look cleanly closed (None if it does)."""
    if not seg.indexes_consistent(None):
        return "indexes do not check out"
    if not seg.load_tail():
        return f"{seg.log_path.name} does not end on a batch boundary ({seg.size} bytes)"
    if point.position is not None and (point.segment_base, point.position, point.offset) != (
        seg.base_offset,
        seg.size,
        seg.next_offset,
    ):
        return (
            f"{seg.log_path.name} ends at offset {seg.next_offset}, byte {seg.size}; the recovery point "
            f"says offset {point.offset}, byte {point.position} of segment {point.segment_base}"
        )
    return None


def _check_closed(seg: Segment, next_base: int, report: RecoveryReport) -> None:
    """A segment before the recovery point: verify its indexes, rebuild them if needed.
    Bad bytes found then are holes (the next segment says where the log goes on)."""
    if seg.indexes_consistent(next_base) and seg.load_tail() and seg.next_offset == next_base:
        return
    outcome = seg.rebuild(seg.base_offset)
    report.rebuilt_indexes.append(seg.log_path)
    report.holes += [(seg.log_path, h) for h in outcome.holes]
    if outcome.error is not None or seg.next_offset < next_base:
        _hole_to_end(seg, outcome.valid_end, next_base, outcome.error or "segment ends early", report)
    elif seg.next_offset > next_base:
        raise CorruptSegmentError(
            seg.log_path,
            seg.size,
            f"segment ends at offset {seg.next_offset} but the next segment starts at {next_base}",
        )


def _hole_to_end(seg: Segment, start: int, next_base: int, reason: str, report: RecoveryReport) -> None:
    hole = Hole(start, seg.size, seg.next_offset, next_base, reason)
    seg.holes[start] = hole
    seg.next_offset = next_base
    report.holes.append((seg.log_path, hole))


def _scan_tail(
    segments: list[Segment], first: int, state: OpenState, report: RecoveryReport, writable: bool
) -> list[Segment]:
    """CRC-scan segments[first:] from the recovery point; cut the log only at a bad tail."""
    expected = segments[first].base_offset
    point = state.point
    for i in range(first, len(segments)):
        seg = segments[i]
        report.scanned_segments += 1
        if seg.base_offset < expected:
            reason = f"segment starts at {seg.base_offset}, below the end of the one before ({expected})"
            return _cut(segments, i, 0, reason, state, report, writable)
        trusted = (point.position or 0) if point.segment_base == seg.base_offset else 0
        outcome = seg.rebuild(seg.base_offset, trusted_end=trusted)
        report.rebuilt_indexes.append(seg.log_path)
        report.holes += [(seg.log_path, h) for h in outcome.holes]
        if outcome.error is not None:
            if i == len(segments) - 1:
                return _cut(segments, i, outcome.valid_end, outcome.error, state, report, writable)
            _hole_to_end(seg, outcome.valid_end, segments[i + 1].base_offset, outcome.error, report)
        expected = seg.next_offset
    return segments


def _cut(
    segments: list[Segment],
    i: int,
    position: int,
    reason: str,
    state: OpenState,
    report: RecoveryReport,
    writable: bool,
) -> list[Segment]:
    """End the log at byte `position` of segment i. Writable opens copy the cut bytes
    to a quarantine file first (later segments are renamed into quarantine whole)."""
    seg = segments[i]
    drop_whole = i > 0 and position == 0
    kept, doomed = (segments[:i], segments[i:]) if drop_whole else (segments[: i + 1], segments[i + 1 :])
    first_offset = seg.next_offset if position else seg.base_offset
    framed = _framed_records(seg, position) + sum(_framed_records(o, 0) for o in segments[i + 1 :])
    records = max(framed, state.committed - first_offset)  # a torn batch no longer frames
    cut_bytes = seg.size - position + sum(o.size for o in segments[i + 1 :])
    quarantine = None
    if writable:
        quarantine = _quarantine(seg, position) if seg.size > position else None
        for other in segments[i + 1 :]:
            _quarantine(other, 0)
    if not drop_whole:
        if writable:
            seg.truncate_file(position)
        else:
            seg.size = position
    for other in doomed:
        other.close()
        if writable:
            other.delete()
            report.deleted_segments.append(other.log_path)
    loss = first_offset < state.committed
    report.truncated.append(
        Truncation(seg.log_path, position, cut_bytes, reason, records, first_offset, loss, quarantine)
    )
    return kept


def _framed_records(seg: Segment, position: int) -> int:
    """Records counted by the headers that still frame in bytes [position, end)."""
    return sum(h.record_count for _, h in seg.headers_from(position) if h.record_count > 0)


def _quarantine(seg: Segment, position: int) -> Path:
    """Copy bytes [position, end) of the segment to a new quarantine file beside it."""
    stem = f"{seg.log_path.name}.{position}"
    path = seg.log_path.with_name(stem + QUARANTINE_SUFFIX)
    n = 1
    while path.exists():
        path = seg.log_path.with_name(f"{stem}.{n}{QUARANTINE_SUFFIX}")
        n += 1
    data = seg.view(position, seg.size).tobytes()
    write_atomic(path, data)
    os.chmod(path, 0o444)
    return path
