"""Connector kinds written outside contraflow, as a user writes them: only the public API is used.

The tests copy this file's text into a package of a tiny installed
distribution (entry points) and next to a flow file (a `python` connector's
`class`); the runtime imports those copies, never this module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from contraflow.connectors import (
    ConnectionLost,
    Connector,
    ConnectorConfigError,
    ConnectorContext,
    DeliveryFailed,
    SinkEvent,
    SourceData,
)


class Counter(Connector[int]):
    """A source of `count` json lines `{"n": i, "from": alias}`, one per pull, each with its ack token.

    Only the first `first` are pulled until `more` is set: a test decides when the rest flow.
    """

    config_keys = frozenset({"count", "first"})
    required_keys = frozenset({"count"})

    @classmethod
    def read_config(cls, alias: str, config: Mapping[str, Any]) -> int:
        count = config["count"]
        if not isinstance(count, int) or count < 1:
            raise ConnectorConfigError(f"connector '{alias}' ({cls.kind}): config key 'count' must be >= 1")
        return count

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.first = int(ctx.config.get("first", self.options))
        self.pulled = 0
        self.more = asyncio.Event()
        self.acked: list[int] = []
        self.failed: list[int] = []

    async def pull(self) -> SourceData | None:
        if self.pulled == self.first:
            await self.more.wait()
        if self.pulled == self.options:
            return None  # exhausted
        n = self.pulled
        self.pulled += 1
        line = b'{"n": %d, "from": "%s"}\n' % (n, self.ctx.alias.encode())
        return SourceData(data=line, token=n)

    async def ack(self, token: Any) -> None:
        self.acked.append(token)

    async def fail(self, token: Any) -> None:
        self.failed.append(token)


class Collector(Connector[None]):
    """A sink keeping what it got (value and wire bytes); while `down`, its destination is gone.

    `fail_first`: the first batch fails once with a retryable `DeliveryFailed`.
    """

    config_keys = frozenset({"fail_first"})

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.down = False
        self.failures_left = 1 if ctx.config.get("fail_first") else 0
        self.connects = 0
        self.received: list[tuple[Any, bytes]] = []

    async def connect(self) -> None:
        if self.down:
            raise ConnectionLost("collector unreachable")
        self.connects += 1

    async def send(self, events: Sequence[SinkEvent]) -> None:
        if self.down:
            raise ConnectionLost("collector went away")
        if self.failures_left:
            self.failures_left -= 1
            raise DeliveryFailed("collector busy", retryable=True)
        self.received.extend((event.value(), b"".join(event.frames)) for event in events)


class NotAConnector:
    """Named in a `class` to show the error."""


class CheckCrashes(Connector[None]):
    """A sink whose own config check raises something that is not a config error."""

    @classmethod
    def check_config(cls, alias: str, config: Mapping[str, Any]) -> None:
        raise ValueError("boom")

    async def send(self, events: Sequence[SinkEvent]) -> None:
        """Never called."""
