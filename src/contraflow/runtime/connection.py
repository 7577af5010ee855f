"""(Re)connecting a connector with its `reconnect` policy, and the state the API reports."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contraflow.backoff import backoff
from contraflow.connectors.base import ConnectionLost, Connector
from contraflow.stopping import sleep_unless


@dataclass(frozen=True)
class ReconnectPolicy:
    """Tremor's `reconnect = {"retry": {...}}`; without one the runtime keeps retrying (capped backoff)."""

    interval_s: float = 0.5
    growth_rate: float = 1.5
    max_interval_s: float = 5.0
    max_retries: int | None = None

    @classmethod
    def of(cls, spec: dict[str, Any] | None) -> ReconnectPolicy:
        retry = (spec or {}).get("retry")
        if not isinstance(retry, dict):
            return cls()
        return cls(
            interval_s=float(retry.get("interval_ms", 500)) / 1000,
            growth_rate=float(retry.get("growth_rate", 1.5)),
            max_retries=retry.get("max_retries"),
        )


async def connect_with_retry(
    connector: Connector, policy: ReconnectPolicy, on_failure: Callable[[str], None], stop: asyncio.Event
) -> bool:
    """Call `connect()` until it succeeds (True) or retries run out or `stop` is set (False)."""
    delays = backoff(policy.interval_s, policy.max_interval_s, policy.growth_rate)
    attempt = 0
    while not stop.is_set():
        try:
            await connector.connect()
            return True
        except (ConnectionLost, OSError) as err:
            attempt += 1
            on_failure(f"cannot connect: {err}")
            if policy.max_retries is not None and attempt > policy.max_retries:
                return False
        await sleep_unless(stop, next(delays))
    return False


class SharedConnect:
    """One (re)connect at a time per connector: the source and sink sides of a bidirectional
    connector (tcp_client, http_client) may both notice a lost connection; they share the attempt."""

    def __init__(self, connector: Connector, on_failure: Callable[[str], None], stop: asyncio.Event) -> None:
        self.connector = connector
        self.policy = ReconnectPolicy.of(connector.ctx.spec.reconnect)
        self.on_failure = on_failure
        self.stop = stop
        self._attempt: asyncio.Task[bool] | None = None

    async def __call__(self) -> bool:
        if self._attempt is None or self._attempt.done():
            self._attempt = asyncio.ensure_future(
                connect_with_retry(self.connector, self.policy, self.on_failure, self.stop)
            )
        return await asyncio.shield(self._attempt)
