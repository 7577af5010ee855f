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
