"""Helpers shared by the pipeline executor tests."""

from __future__ import annotations

from typing import Any

import pytest

from contraflow.events import Event
from contraflow.lang.graph import PipelineGraph
from contraflow.pipeline.local import compile_query


def values(events: list[tuple[str, Event]] | list[Event], port: str | None = None) -> list[Any]:
    """Decoded values of emitted events (optionally only those on `port`)."""
    out = []
    for entry in events:
        if isinstance(entry, tuple):
            if port is not None and entry[0] != port:
                continue
            entry = entry[1]
        out.append(entry.decoded)
    return out


@pytest.fixture
def query() -> Any:
    def build(text: str) -> PipelineGraph:
        return compile_query(text, name="query.trickle")

    return build
