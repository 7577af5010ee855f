"""The driver JVM a Spark session start is launching, ended before it finished starting.

PySpark launches the driver JVM (`spark-submit`, which execs java) as a child
of this process and keeps its `Popen` to itself until the JVM reports its port,
seconds later. A runtime stopping meanwhile should neither wait those seconds
nor leave the JVM behind: `end_launch` finds it by what only that launch has,
a child of this process whose environment carries PySpark's
`_PYSPARK_DRIVER_CONN_INFO_PATH`, and ends it. The start then fails in its own
thread, which is what the caller wanted. Linux only (it reads /proc); elsewhere
it finds nothing and the JVM ends by itself once this process exits (PySpark's
gateway exits when its standard input closes).

Another session of this process (a test suite's, or any started before) has a
JVM with the same mark: `end_launch` spares the ones that were already there
when the start began (`launching_gateways()` taken then), or it would end a
running session that has nothing to do with the start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

LAUNCH_MARK = b"_PYSPARK_DRIVER_CONN_INFO_PATH="
KILL_AFTER_S = 5.0  # a JVM that ignored SIGTERM this long is killed
POLL_S = 0.1


def launching_gateways() -> list[int]:
    """Process ids of this process's children that are a Spark driver JVM being launched
    (or the `spark-submit` script that execs it)."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            # stat: "pid (comm) state ppid ...": comm may hold spaces and parentheses
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == me and LAUNCH_MARK in (entry / "environ").read_bytes():
                found.append(int(entry.name))
    return found


def end_launch(start: Future[Any], spare: frozenset[int] = frozenset(), timeout_s: float = 60.0) -> bool:
    """End the JVM that `start` (a session start under way) launches, until `start` completes:
    SIGTERM (Spark's shutdown hooks clean up), SIGKILL if it is still there after KILL_AFTER_S.
    The JVM may not be launched yet: the thread is still importing or configuring; it is ended
    as soon as it is. `spare`: the gateways there before the start began (not its launch).
    True once `start` completed (failed, or had just finished starting)."""
    deadline = time.monotonic() + timeout_s
    first_seen: dict[int, float] = {}
    while not start.done() and time.monotonic() < deadline:
        now = time.monotonic()
        for pid in set(launching_gateways()) - spare:
            since = first_seen.setdefault(pid, now)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL if now - since > KILL_AFTER_S else signal.SIGTERM)
        time.sleep(POLL_S)
    return start.done()
