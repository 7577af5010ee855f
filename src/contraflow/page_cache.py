"""Handing the page cache of a file written front to back back to the kernel, a window behind its end.

A log segment or a sink's output file is written once at its end, and what
readers still want from memory is its last few megabytes. Left to the
kernel's reclaim, the pages of everything before stay cached and every write
takes fresh ones. On a VM that gives free memory back to its host
(virtio-balloon free page reporting) a fresh page costs a host fault the
first time the write's copy touches it, which the guest sees as a slow copy:
writing 384 MB in 4 MiB batches took 1.0-2.8 s of kernel CPU into fresh
pages and 0.3-0.7 s when each batch's pages were handed back after it was
read (`benchmarks`-style loop, side by side, loaded box). Pages handed back
now are what the next writes' pages are made of.

Only clean pages are dropped: the kernel writes a dirty range back first
(the advice starts that), so a range is advised again on later calls until
it has left the cache. A reader behind the window reads from disk.
"""

from __future__ import annotations

import contextlib
import mmap
import os

HUGE_PAGE_BYTES = 2 << 20  # the largest page-cache folio on x86-64: released ranges end on one
STEP_BYTES = 4 << 20  # released in steps of this, not per write


class TailCache:
    """The page cache of one file kept for its last `window` bytes; released in `step`s."""

    def __init__(self, window: int, step: int = STEP_BYTES) -> None:
        self.window = window
        self.step = step
        self.released = 0  # bytes below this were advised away at least once

    def release(self, fd: int, end: int, read_map: mmap.mmap | None = None) -> None:
        """Bytes before `end - window` (`end`: how far the file is written, or fsynced) leave the
        page cache. Each call advises again from two steps back: a large folio that straddled the
        last call's end was kept whole, and a dirty range was only sent to disk then.
        `read_map`: this process's map of the file, whose mapped pages would stay cached."""
        upto = (end - self.window) & ~(HUGE_PAGE_BYTES - 1)
        if upto - self.released < self.step:
            return
        start = max(0, self.released - 2 * self.step) & ~(mmap.PAGESIZE - 1)
        with contextlib.suppress(OSError, ValueError):  # advice only: where refused, pages stay cached
            if read_map is not None and start < min(upto, len(read_map)):
                read_map.madvise(mmap.MADV_DONTNEED, start, min(upto, len(read_map)) - start)
            os.posix_fadvise(fd, start, upto - start, os.POSIX_FADV_DONTNEED)
        self.released = upto
