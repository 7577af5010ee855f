"""`tremor::origin::` functions: the origin URI of the current event.

A standalone script or a pipeline event without a recorded origin has none, so
every accessor returns null, as Tremor does for events without an origin.
"""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.stdlib import tremor_fn


def _none() -> Any:
    return None


for _part in ("as_uri_string", "as_uri_record", "scheme", "host", "port", "path", "query"):
    tremor_fn(f"origin::{_part}")(_none)
