"""Sparse, memory-mapped segment indexes.

Both indexes are fixed-size little-endian entry tables. While a segment is
active its index files are preallocated (sparse) to the largest size the
segment can need and written through a shared mmap; when the segment is
frozen (rolled or closed cleanly) they are trimmed to the entries written, so
a clean index's entry count is its file size divided by the entry size. After
an unclean shutdown the active segment is re-scanned and its indexes rebuilt,
so the preallocated zeros are never trusted.

- offset index: (relative offset u32, file position u32), one entry each time
  `index_interval_bytes` of batches have been written since the previous entry.
- time index: (max timestamp so far i64, relative offset u32), written with the
  offset index entries whenever the running maximum timestamp grew, plus one
  final entry at freeze. An entry (T, R) promises every batch up to and
  including the one at R has timestamps <= T.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Final

OFFSET_ENTRY: Final = struct.Struct("<II")
TIME_ENTRY: Final = struct.Struct("<qI")


class EntryTable:
    """A table of fixed-size entries over an mmap'ed file, or over memory when
    the store is opened read-only and an index has to be rebuilt."""

    def __init__(self, path: Path | None, entry: struct.Struct, capacity: int, *, writable: bool) -> None:
        self.path = path
        self.entry = entry
        self.capacity = max(capacity, 1)
        self.count = 0
        self.writable = writable
        self._file: int | None = None
        self._buf: mmap.mmap | bytearray = bytearray()
        self._backed = 0  # bytes of the mapped file known to have disk space behind them

    # -- opening ----------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path, entry: struct.Struct, capacity: int, *, writable: bool) -> EntryTable | None:
        """Open a trimmed (cleanly frozen) index; None if missing or not a whole number of entries."""
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return None
        if size % entry.size:
            return None
        table = cls(path, entry, max(capacity, size // entry.size), writable=writable)
        table.count = size // entry.size
        table._map(size)
        return table

    @classmethod
    def create(cls, path: Path | None, entry: struct.Struct, capacity: int, *, writable: bool) -> EntryTable:
        """A new empty index (file-backed when writable, in memory otherwise)."""
        table = cls(path if writable else None, entry, capacity, writable=writable)
        if table.path is not None:
            fd = os.open(table.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            os.close(fd)
        table.activate()
        return table

    def _map(self, size: int) -> None:
        assert self.path is not None
        if size == 0:
            self._buf = bytearray()
            return
        flags = os.O_RDWR if self.writable else os.O_RDONLY
        fd = os.open(self.path, flags)
        try:
            access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
            self._buf = mmap.mmap(fd, size, access=access)
        finally:
            os.close(fd)

    def activate(self) -> None:
        """Make room for appends: preallocate the file (sparse) and map it writable."""
        size = self.capacity * self.entry.size
        if self.path is None:
            buf = bytearray(size)
            buf[: self.count * self.entry.size] = self._buf[: self.count * self.entry.size]
            self._buf = buf
            return
        self._close_map()
        os.truncate(self.path, size)
        self._backed = self.count * self.entry.size
        self._map(size)

    def reserve_next(self) -> None:
        """Give the page the next entry goes to its disk space now. The file is sparse and
        mapped: writing a page the filesystem cannot back (a full disk) is a SIGBUS that kills
        the process, where `posix_fallocate` is an ENOSPC the append refuses cleanly, before
        anything of it is written."""
        end = (self.count + 1) * self.entry.size
        if self.path is None or not self.writable or self.full or end <= self._backed:
            return
        start = self._backed - self._backed % mmap.PAGESIZE
        length = -(-(end - start) // mmap.PAGESIZE) * mmap.PAGESIZE
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, start, min(length, self.capacity * self.entry.size - start))
        finally:
            os.close(fd)
        self._backed = start + length

    def freeze(self) -> None:
        """Flush and trim to the written entries; the table stays readable."""
        if self.path is None or not self.writable:
            return
        used = self.count * self.entry.size
        self.flush()
        self._close_map()
        os.truncate(self.path, used)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._map(used)

    def flush(self) -> None:
        if isinstance(self._buf, mmap.mmap) and self.writable:
            self._buf.flush()

    def _close_map(self) -> None:
        buf, self._buf = self._buf, bytearray()
        if isinstance(buf, mmap.mmap):
            buf.close()

    def close(self) -> None:
        self._close_map()

    # -- entries ----------------------------------------------------------------------------------

    @property
    def full(self) -> bool:
        return self.count >= self.capacity

    def append(self, *fields: int) -> None:
        if self.full or (self.path is not None and not self.writable):
            return  # a sparse index may skip entries; lookups then scan a little further
        self.entry.pack_into(self._buf, self.count * self.entry.size, *fields)
        self.count += 1

    def get(self, i: int) -> tuple[int, ...]:
        return self.entry.unpack_from(self._buf, i * self.entry.size)

    def last(self) -> tuple[int, ...] | None:
        return self.get(self.count - 1) if self.count else None

    def floor(self, key: int, field: int = 0, *, strict: bool = False) -> tuple[int, ...] | None:
        """The last entry whose `field` is <= key (< key when strict), by binary search."""
        lo, hi = 0, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            value = self.get(mid)[field]
            if value < key or (value == key and not strict):
                lo = mid + 1
            else:
                hi = mid
        return self.get(lo - 1) if lo else None

    def truncate(self, count: int) -> None:
        self.count = min(self.count, count)

    def is_consistent(self, log_size: int, next_relative: int) -> bool:
        """Cheap sanity check on open (Kafka's): the last entry lies inside the log.
        The segment additionally checks that it points at a batch boundary."""
        last = self.last()
        if last is None:
            return True
        if self.entry is OFFSET_ENTRY:
            rel, pos = last
            first_pos = self.get(0)[1]
            return rel < next_relative and 0 < first_pos <= pos < log_size
        return last[1] < next_relative
