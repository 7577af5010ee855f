"""Acknowledging a source: each pulled token waits until what it produced is delivered (or persisted).

A source's tokens are kept in pull order with the end offset each reached in
every channel it appended to. The flow monitor computes, per channel, the
*delivered frontier*: every record below it has been handled by every path
downstream (sinks committed it, pipelines consumed it and their own outputs
were delivered). A token is acked once the frontier passes all its ends and
every earlier token was acked; with `ack = "persisted"` the frontier is the
log itself (the append was confirmed).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contraflow.connectors.base import Connector

log = logging.getLogger("contraflow.runtime.acks")


@dataclass
class _Pending:
    token: Any
    appends: dict[str, asyncio.Future[int]]  # channel topic -> offset of the token's last record


class AckTracker:
    """Pending tokens of one acknowledging source."""

    def __init__(self, connector: Connector, persisted: bool) -> None:
        self.connector = connector
        self.persisted = persisted
        self._pending: deque[_Pending] = deque()
        self.acked = 0
        self.failed = 0

    def track(self, token: Any, appends: dict[str, asyncio.Future[int]]) -> None:
        """Remember `token`, whose last record in each topic will be at `appends[topic]`'s offset."""
        self._pending.append(_Pending(token, appends))

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def advance(self, delivered: Mapping[str, int] | None = None) -> None:
        """Ack every leading token whose records are below the delivered frontier of each topic."""
        while self._pending:
            head = self._pending[0]
            state = self._state(head, delivered)
            if state == "wait":
                return
            self._pending.popleft()
            try:
                if state == "ack":
                    await self.connector.ack(head.token)
                    self.acked += 1
                else:
                    await self.connector.fail(head.token)
                    self.failed += 1
            except Exception:
                log.exception("%s: ack/fail of a token failed", self.connector.ctx.name)

    def _state(self, pending: _Pending, delivered: Mapping[str, int] | None) -> str:
        for topic, future in pending.appends.items():
            if not future.done():
                return "wait"
            if future.cancelled() or future.exception() is not None:
                return "fail"
            if not self.persisted and (delivered is None or future.result() >= delivered.get(topic, -1)):
                return "wait"
        return "ack"

    async def fail_all(self) -> None:
        """Quiescing without delivery: every token still waiting is failed (its data will be re-read)."""
        while self._pending:
            pending = self._pending.popleft()
            try:
                await self.connector.fail(pending.token)
            except Exception:
                log.exception("%s: fail of a token failed", self.connector.ctx.name)
