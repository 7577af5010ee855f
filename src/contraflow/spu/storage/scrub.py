"""The background scrubber: CRC-checks, at the lowest CPU priority, what no read has checked yet.

After a reboot nothing in an existing log is on record as checked
(`boot_checks`), so every batch's first read pays a CRC pass. The SPU runs
one scrubber over every partition of its store from start-up: in a thread at
nice 19 (the CRC itself runs without the GIL), about a MiB at a time under
the partition's lock, it checks what no read has reached yet, then records it
in `crc-checked`, so later reads, and later opens in this boot, only look it
up. Readers still check whatever it has not reached (the two share the
segment's checked ranges), and a bad batch it finds is counted and reported
exactly as a read meeting it would be. Data written while the SPU runs is
checked on append, so one pass at start-up is all there is to do.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import time

from contraflow.spu.storage.errors import StorageError
from contraflow.spu.storage.partition import Partition
from contraflow.spu.storage.store import Store

log = logging.getLogger("contraflow.spu.storage")

STEP_BYTES = 1 << 20  # checked per step (~0.1 ms of CRC)
LOWEST_PRIORITY = 19
THREAD_NAME = "spu-scrub"  # also the OS thread's name: `top -H` shows what the scrub costs
PR_SET_NAME = 15  # prctl option (linux/prctl.h)


def _name_os_thread(name: str) -> None:
    """Give the calling thread `name` in the kernel too (Python 3.11 names only its own object)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, name.encode(), 0, 0, 0)


class Scrubber:
    """One pass over a store's partitions in a background thread; `stop()` ends it early."""

    def __init__(self, store: Store, step_bytes: int = STEP_BYTES) -> None:
        self.store = store
        self.step_bytes = step_bytes
        self.checked_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        _name_os_thread(THREAD_NAME)
        with contextlib.suppress(OSError):  # per thread on Linux: only the scrub yields
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)
        began = time.monotonic()
        try:
            partitions = self.scrub_all()
        except Exception:  # the scrub is an optimisation: reads still check everything
            log.exception("the background CRC scrub stopped")
            return
        if self.checked_bytes:
            log.info(
                "scrub: CRC-checked %.1f MB ahead of reads in %d partitions (%.1f s, %.2f s of CPU)",
                self.checked_bytes / 1e6,
                partitions,
                time.monotonic() - began,
                time.thread_time(),
            )
        # the thread stays until stop(): its CPU time stays visible per thread (/proc/PID/task)
        self._stop.wait()

    def scrub_all(self) -> int:
        """Check every partition of the store; returns how many there were."""
        count = 0
        for topic in self.store.list_topics():
            try:
                partitions = self.store.topic_config(topic).partitions
            except StorageError:  # deleted meanwhile
                continue
            for number in range(partitions):
                if self._stop.is_set():
                    return count
                try:
                    self.scrub(self.store.partition(topic, number))
                except StorageError:  # deleted or closed meanwhile
                    continue
                count += 1
        return count

    def scrub(self, part: Partition) -> None:
        """Check what no read has checked in one partition, then record it for this boot."""
        checked = 0
        while not self._stop.is_set():
            step = part.scrub_step(self.step_bytes)
            if not step:
                break
            checked += step
        self.checked_bytes += checked
        if checked:
            part.record_checks()
