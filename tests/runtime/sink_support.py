"""A sink's runtime pump (`SinkRunner`) built outside a flow, for tests of one sink over one channel."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contraflow.connectors.base import Connector
from contraflow.runtime.connection import SharedConnect
from contraflow.runtime.gate import Gate
from contraflow.runtime.metrics import RuntimeMetrics
from contraflow.runtime.settings import DeliverySettings
from contraflow.runtime.sink import SinkRunner
from contraflow.spu.client import AsyncProducer, AsyncSpuClient
from tests.connectors.support import make

Breaker = Callable[[bool, str], None]


def sink_runner(
    connector: Connector,
    client: AsyncSpuClient,
    topic: str,
    consumer: str,
    breaker: Breaker = lambda _open, _why: None,
) -> SinkRunner:
    """The pump that tails `topic` as `consumer` into `connector`'s port `in`, with the default
    delivery settings and no error channel; `breaker(open, why)` hears its circuit breaker."""
    return SinkRunner(
        connector,
        [(topic, consumer, "in")],
        client,
        AsyncProducer(client),
        None,
        Gate(),
        DeliverySettings(),
        RuntimeMetrics(),
        breaker,
        SharedConnect(connector, lambda _why: None, asyncio.Event()),
    )


def file_sink_runner(
    client: AsyncSpuClient, out: Path, topic: str, postprocessors: list[Any] | None = None
) -> SinkRunner:
    """A file sink appending `topic`'s records to `out` (one per line unless `postprocessors` says
    otherwise), as the runtime runs one."""
    sink = make("file", {"path": str(out), "mode": "append"}, postprocessors=postprocessors or ["separate"])
    return sink_runner(sink, client, topic, "file-sink")
