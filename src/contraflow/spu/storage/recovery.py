"""Opening a partition's segments after a clean or an unclean shutdown.

Rules (see docs/spu-storage.md):
- A `.clean-shutdown` marker means every segment was fsynced and its indexes
  trimmed: indexes are only sanity-checked (and rebuilt if that fails).
- Without it, every segment from the one holding the `recovery-point`
  checkpoint onwards (the active one, and any rolled after the checkpoint was
  last written) is CRC-scanned with its indexes rebuilt. The first torn or
  corrupt batch ends the log: the file is truncated there and later segments
  are deleted.
- A segment before the recovery point is known to have been fsynced whole, so
  a bad batch found while rebuilding its index is real corruption:
  `CorruptSegmentError` with the path and byte position, never skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from contraflow.spu.storage.errors import CorruptSegmentError
from contraflow.spu.storage.segment import Segment, SegmentSettings

log = logging.getLogger("contraflow.spu.storage")

CLEAN_SHUTDOWN = ".clean-shutdown"
RECOVERY_POINT = "recovery-point"
HIGH_WATERMARK = "high-watermark"


@dataclass(frozen=True)
class Truncation:
    segment: Path
    position: int
    bytes_removed: int
    reason: str


@dataclass
class RecoveryReport:
    """What opening a partition found and repaired."""

    directory: Path
    clean_shutdown: bool
    scanned_segments: int = 0
    truncated: list[Truncation] = field(default_factory=list)
    deleted_segments: list[Path] = field(default_factory=list)
    rebuilt_indexes: list[Path] = field(default_factory=list)

    @property
    def repaired(self) -> bool:
        return bool(self.truncated or self.deleted_segments or self.rebuilt_indexes)

    def __str__(self) -> str:
        parts = [f"{self.directory}: {'clean' if self.clean_shutdown else 'unclean'} shutdown"]
        parts += [
            f"truncated {t.segment.name} at byte {t.position} ({t.bytes_removed} bytes: {t.reason})"
            for t in self.truncated
        ]
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


def recover_segments(
    directory: Path,
    settings: SegmentSettings,
    recovery_point: int,
    *,
    clean: bool,
    writable: bool,
) -> tuple[list[Segment], RecoveryReport]:
    """Open and check every segment; returns them (the last one ready for appends when writable)."""
    report = RecoveryReport(directory, clean)
    bases = list_segment_bases(directory)
    if not bases:
        if not writable:
            return [], report
        return [Segment.create(directory, 0, settings)], report
    segments = [Segment.open(directory, b, settings, writable=writable) for b in bases]
    first_scan = len(segments) - 1
    if not clean:
        first_scan = max(0, max((i for i, b in enumerate(bases) if b <= recovery_point), default=0))
    for i, seg in enumerate(segments[:first_scan]):
        _check_closed(seg, segments[i + 1].base_offset, report)
    kept = segments[: first_scan + 1] if clean else _scan_tail(segments, first_scan, report, writable)
    last = kept[-1]
    if clean:
        _check_closed(last, None, report)
    if writable:
        for seg in kept[:-1]:
            seg.freeze()
        last.make_active()
    if report.repaired:  # a read-only open repairs nothing on disk: it only works around it
        log.log(logging.WARNING if writable else logging.DEBUG, "recovered %s", report)
    return kept, report


def _check_closed(seg: Segment, next_base: int | None, report: RecoveryReport) -> None:
    """A segment trusted to be whole: verify its indexes, rebuild them if needed."""
    if seg.indexes_consistent(next_base):
        seg.load_tail()
        if next_base is None or seg.next_offset == next_base:
            return
    outcome = seg.rebuild(seg.base_offset)
    report.rebuilt_indexes.append(seg.log_path)
    if outcome.error is not None and next_base is not None:
        raise CorruptSegmentError(seg.log_path, outcome.valid_end, outcome.error)
    if outcome.error is not None:
        raise CorruptSegmentError(
            seg.log_path, outcome.valid_end, f"{outcome.error} (after a clean shutdown)"
        )
    if next_base is not None and seg.next_offset != next_base:
        raise CorruptSegmentError(
            seg.log_path,
            seg.size,
            f"segment ends at offset {seg.next_offset} but the next segment starts at {next_base}",
        )


def _scan_tail(segments: list[Segment], first: int, report: RecoveryReport, writable: bool) -> list[Segment]:
    """CRC-scan segments[first:], cut the log at the first bad batch."""
    expected = segments[first].base_offset
    for i in range(first, len(segments)):
        seg = segments[i]
        report.scanned_segments += 1
        if seg.base_offset != expected:
            return _cut(
                segments, i, 0, f"segment starts at {seg.base_offset}, expected {expected}", report, writable
            )
        outcome = seg.rebuild(expected)
        report.rebuilt_indexes.append(seg.log_path)
        if outcome.error is not None:
            return _cut(segments, i, outcome.valid_end, outcome.error, report, writable)
        expected = seg.next_offset
    return segments


def _cut(
    segments: list[Segment], i: int, position: int, reason: str, report: RecoveryReport, writable: bool
) -> list[Segment]:
    """End the log at byte `position` of segment i: truncate it there and drop every
    later segment (segment i too when nothing of it survives and it is not the first)."""
    seg = segments[i]
    report.truncated.append(Truncation(seg.log_path, position, seg.size - position, reason))
    drop_whole = i > 0 and position == 0
    kept, doomed = (segments[:i], segments[i:]) if drop_whole else (segments[: i + 1], segments[i + 1 :])
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
    return kept
