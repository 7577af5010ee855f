"""`system::` functions."""

from __future__ import annotations

import socket
import time

from contraflow.lang.script.stdlib import tremor_fn


@tremor_fn("system::hostname")
def hostname() -> str:
    return socket.gethostname()


@tremor_fn("system::nanotime")
def nanotime() -> int:
    return time.time_ns()


@tremor_fn("system::ingest_ns")
def ingest_ns() -> int:
    """The current time; the runtime has no separate ingest timestamp for scripts run standalone."""
    return time.time_ns()
