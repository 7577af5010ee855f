"""`system::` functions."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from contraflow.lang.script.stdlib import tremor_fn


class _IngestClock(threading.local):
    """Where `system::ingest_ns()` reads the ingest time of the event being processed.

    A pipeline executor points `source` at its context (an object whose `now_ns` it sets
    per event) whenever it starts processing on this thread; the call then costs one
    attribute read. Standalone scripts have no source and read the wall clock.
    """

    source: Any = None


INGEST_CLOCK = _IngestClock()


@tremor_fn("system::hostname")
def hostname() -> str:
    return socket.gethostname()


@tremor_fn("system::nanotime")
def nanotime() -> int:
    return time.time_ns()


@tremor_fn("system::ingest_ns")
def ingest_ns() -> int:
    """The ingest time of the current event inside a pipeline (so `contraflow query --ingest-ns
    index` is deterministic); the wall clock for a script run on its own."""
    source = INGEST_CLOCK.source
    return time.time_ns() if source is None else int(source.now_ns)


@tremor_fn("system::instance")
def instance() -> str:
    """The name of this runtime instance (Tremor's default instance name)."""
    return "tremor"


@tremor_fn("system::version")
def version() -> str:
    """The contraflow version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("contraflow")
    except PackageNotFoundError:
        return "0.0.0"
