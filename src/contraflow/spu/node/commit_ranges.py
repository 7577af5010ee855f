"""Offset ranges of commits that readers must see whole or not at all.

A commit appends several batches to a partition; until all of them are
appended and committed (fsynced on a lone SPU, replicated to the in-sync set in
a cluster) the high watermark readers see stops where the commit starts, then
jumps past it. A range is *open* while the commit appends (its end unknown),
*closed* once appended, and dropped once the high watermark passes its end.
An open range found while no commit holds the partition's write gate means a
commit failed midway (a storage error): its partial appends stay hidden.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from contraflow.spu.protocol.topics import TopicPartition


@dataclass(slots=True)
class _Range:
    start: int
    end: int | None = None  # None: still appending


class CommitRanges:
    """Thread-safe: commits open and close ranges in worker threads, readers ask on the loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ranges: dict[TopicPartition, list[_Range]] = {}

    def open(self, tp: TopicPartition, start: int) -> None:
        with self._lock:
            self._ranges.setdefault(tp, []).append(_Range(start))

    def close(self, tp: TopicPartition, end: int) -> None:
        """The commit that opened the newest range appended everything up to `end`."""
        with self._lock:
            ranges = self._ranges.get(tp)
            if ranges and ranges[-1].end is None:
                ranges[-1].end = end

    def add_closed(self, tp: TopicPartition, start: int, end: int) -> None:
        """A commit already in the log but not below the high watermark yet (a new leader's)."""
        with self._lock:
            self._ranges.setdefault(tp, []).append(_Range(start, end))

    def failed_midway(self, tp: TopicPartition) -> bool:
        with self._lock:
            return any(r.end is None for r in self._ranges.get(tp, ()))

    def visible(self, tp: TopicPartition, high_watermark: int) -> int:
        """The high watermark readers may use: never inside a range; ranges it has
        passed are forgotten."""
        if tp not in self._ranges:  # the common case, without the lock
            return high_watermark
        with self._lock:
            ranges = self._ranges.get(tp)
            if ranges is None:
                return high_watermark
            while ranges and ranges[0].end is not None and ranges[0].end <= high_watermark:
                ranges.pop(0)
            if not ranges:
                del self._ranges[tp]
                return high_watermark
            return min(high_watermark, ranges[0].start)

    def forget(self, tp: TopicPartition) -> None:
        """The partition changed role (led anew or followed): its ranges are rebuilt or moot."""
        with self._lock:
            self._ranges.pop(tp, None)
