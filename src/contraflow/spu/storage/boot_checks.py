"""CRC checks that outlive a process: bytes checked since the machine booted.

Reads check each batch once per process (`Segment.verified`). So that the next
process on the same boot does not pay that CRC pass again, a writable
partition's clean close (and every roll, for the segments closed so far)
records in `crc-checked`, per segment, the checked
byte ranges with the log file's identity (device, inode, size, ctime) and the
kernel's boot id. An open in the same boot takes those ranges as checked only
if the file still has that identity:

- any write, truncation or replacement of the file changes its ctime, size or
  inode (the ctime is recorded only once the coarse clock has passed it, so a
  write in the same clock tick cannot keep it unchanged);
- a segment someone else changed while this process had it open (its identity
  is no longer the one this process's last write or open left) is not
  recorded: this process's checks do not cover those bytes;
- a reboot changes the boot id, so after one every byte is checked again on
  its first read, from the disk.

Within one boot this trusts the same thing the per-process check does: that a
page the kernel read back from the disk equals the page that was checked.
A read-only open only reads the record, never writes it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from contraflow.spu.storage.segment import Segment

log = logging.getLogger("contraflow.spu.storage")

CHECK_RECORD = "crc-checked"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
SETTLE_TRIES = 50  # clock ticks to wait for a ctime to fall behind the coarse clock
# the clock file timestamps come from; Python's time module does not name it
COARSE_CLOCK = getattr(time, "CLOCK_REALTIME_COARSE", 5 if sys.platform == "linux" else None)


@dataclass(frozen=True)
class FileIdentity:
    """What changes whenever a file's bytes change (within one boot)."""

    device: int
    inode: int
    size: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns)


@cache
def boot_id() -> str | None:
    """This boot's id; None where there is none (then nothing is recorded)."""
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def settled_identity(fd: int) -> FileIdentity | None:
    """The file's identity once its ctime lies before the coarse clock: any later
    write then gets a later ctime. None if it kept changing."""
    if COARSE_CLOCK is None:
        return None
    tick = time.clock_getres(COARSE_CLOCK)
    for _ in range(SETTLE_TRIES):
        now = time.clock_gettime_ns(COARSE_CLOCK)
        st = os.fstat(fd)
        if st.st_ctime_ns < now:
            return FileIdentity.of(st)
        time.sleep(tick)
    return None


def remember(directory: Path, segments: Sequence[Segment]) -> None:
    """Record the segments' checked ranges (a writer's roll or clean close, lock held)."""
    boot = boot_id()
    if boot is None:
        return
    entries = {}
    for seg in segments:
        ranges = seg.verified.ranges()
        identity = settled_identity(seg.file.fileno()) if ranges and seg.known_stat else None
        if identity is not None and seg.known_stat and identity == FileIdentity.of(seg.known_stat):
            entries[str(seg.base_offset)] = {**asdict(identity), "ranges": ranges}
    # renamed into place but never fsynced: a power loss is a reboot, after which
    # the record is void anyway; a torn or lost one only costs a CRC pass, so a
    # failure to write it must not fail the roll or close that asked for it
    path = directory / CHECK_RECORD
    tmp = path.with_name(f".{CHECK_RECORD}.tmp")
    try:
        tmp.write_bytes(json.dumps({"boot_id": boot, "segments": entries}).encode())
        os.replace(tmp, path)
    except OSError as err:
        log.warning("could not record the CRC checks of %s (they will be repeated): %s", directory, err)


def recall(directory: Path, segments: Iterable[Segment]) -> None:
    """Mark as checked what the record says was checked in this boot, for each
    segment whose file is unchanged since. A missing or unreadable record marks nothing."""
    boot = boot_id()
    try:
        record = json.loads((directory / CHECK_RECORD).read_bytes())
        if boot is None or record["boot_id"] != boot:
            return
        entries = record["segments"]
        for seg in segments:
            entry = entries.get(str(seg.base_offset))
            if entry is None:
                continue
            recorded = FileIdentity(entry["device"], entry["inode"], entry["size"], entry["ctime_ns"])
            if recorded == FileIdentity.of(os.fstat(seg.file.fileno())):
                for start, end in entry["ranges"]:
                    seg.verified.add(int(start), min(int(end), seg.size))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return
