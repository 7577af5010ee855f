"""Undo a crashed commit's appends: cut a partition's log back to an offset.

Runs at server start, before the store opens the partition (the storage engine
has no live truncate yet). It only ever cuts at a batch boundary, deletes the
indexes of the cut segment and the segments after it, and leaves a state the
engine's unclean-shutdown recovery rebuilds from: no clean-shutdown marker, the
recovery point at or before the cut segment, the high watermark at most the cut.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from contraflow.atomic_files import fsync_dir
from contraflow.spu.protocol.batch import HEADER_SIZE, BatchHeader
from contraflow.spu.storage.checkpoint import read_offset, write_offset
from contraflow.spu.storage.recovery import (
    CLEAN_SHUTDOWN,
    HIGH_WATERMARK,
    RECOVERY_POINT,
    RecoveryPoint,
    list_segment_bases,
)
from contraflow.spu.storage.segment import segment_name


def _cut_position(log_path: Path, offset: int) -> int | None:
    """Byte position of the first batch at or after `offset` (None: the segment ends before it)."""
    size = log_path.stat().st_size
    if size == 0:
        return None
    with open(log_path, "rb") as file, mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as data:
        pos = 0
        while pos + HEADER_SIZE <= size:
            header = BatchHeader.parse(data, pos)
            if header.base_offset >= offset:
                return pos
            if header.batch_length <= 0:
                break
            pos += header.total_size
    return None


def _delete_segment(directory: Path, base: int) -> None:
    for suffix in (".log", ".index", ".timeindex"):
        (directory / segment_name(base, suffix)).unlink(missing_ok=True)


def truncate_partition_dir(directory: Path, offset: int) -> bool:
    """Remove every batch at or after `offset`; True if anything was removed."""
    bases = list_segment_bases(directory) if directory.is_dir() else []
    holding = [b for b in bases if b <= offset] or bases[:1]
    if not holding:
        return False
    keep_base = holding[-1]
    changed = False
    for base in bases:
        if base > keep_base:
            _delete_segment(directory, base)
            changed = True
    log_path = directory / segment_name(keep_base, ".log")
    cut = _cut_position(log_path, offset)
    if cut is not None:
        with open(log_path, "r+b") as file:
            file.truncate(cut)
            os.fsync(file.fileno())
        changed = True
    if not changed:
        return False
    for suffix in (".index", ".timeindex"):
        (directory / segment_name(keep_base, suffix)).unlink(missing_ok=True)
    (directory / CLEAN_SHUTDOWN).unlink(missing_ok=True)
    point = RecoveryPoint.read(directory / RECOVERY_POINT)
    if point.segment_base >= keep_base or point.offset > keep_base:  # it may point past the cut
        RecoveryPoint(keep_base, keep_base, 0).write(directory / RECOVERY_POINT)
    high_watermark = read_offset(directory / HIGH_WATERMARK)
    if high_watermark is not None and high_watermark > offset:
        write_offset(directory / HIGH_WATERMARK, offset)
    fsync_dir(directory)
    return True
