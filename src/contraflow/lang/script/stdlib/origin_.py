"""`tremor::origin::` functions: the origin URI of the current event.

A standalone script or a pipeline event without a recorded origin has none, so
every accessor returns null, as Tremor does for events without an origin.
"""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.stdlib import tremor_fn


@tremor_fn("origin::as_uri_string")
def as_uri_string() -> Any:
    return None


@tremor_fn("origin::scheme")
def scheme() -> Any:
    return None


@tremor_fn("origin::host")
def host() -> Any:
    return None


@tremor_fn("origin::port")
def port() -> Any:
    return None


@tremor_fn("origin::path")
def path() -> Any:
    return None


@tremor_fn("origin::query")
def query() -> Any:
    return None
