"""`exit`: the first event it receives asks the runtime to stop (Tremor's `exit` connector).

Config: `delay` (nanoseconds to wait before stopping, default 0) and
`graceful` (default true: quiesce, i.e. drain and commit; false: stop at once).
An event that is a record may override both: `{"delay": ns, "graceful": b}`,
and carry `"exit": <code>` for the process exit code.

`send` returns at once so the triggering event is committed like any other;
the stop runs as its own task after the delay.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contraflow.connectors.base import Connector, ConnectorContext, SinkEvent, register
from contraflow.connectors.base.options import ConfigReader

NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class ExitRequest:
    delay_ns: int
    graceful: bool
    code: int


@register("exit")
class ExitConnector(Connector[ExitRequest]):
    config_keys = frozenset({"delay", "graceful"})
    structured = True

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.request: ExitRequest | None = None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> ExitRequest:
        return ExitRequest(cfg.integer("delay", 0), cfg.boolean("graceful", True), 0)

    async def send(self, events: Sequence[SinkEvent]) -> None:
        if self.request is not None or not events:
            return
        self.request = self._request_from(events[0].value())
        self.ctx.logger.info(
            "exit requested by an event: code %d, delay %d ns, graceful %s",
            self.request.code,
            self.request.delay_ns,
            self.request.graceful,
        )
        self._task = asyncio.create_task(self._stop_later(self.request.delay_ns))

    def _request_from(self, value: Any) -> ExitRequest:
        """Event fields override the config where they have the right type; others are ignored."""
        if not isinstance(value, dict):
            return self.options
        delay, graceful, code = _int(value.get("delay")), value.get("graceful"), _int(value.get("exit"))
        return ExitRequest(
            delay if delay is not None and delay >= 0 else self.options.delay_ns,
            graceful if isinstance(graceful, bool) else self.options.graceful,
            code if code is not None else 0,
        )

    async def _stop_later(self, delay_ns: int) -> None:
        await asyncio.sleep(delay_ns / NS_PER_S)
        self.ctx.stop_runtime()

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def status(self) -> dict[str, Any]:
        if self.request is None:
            return {"exit_requested": False}
        r = self.request
        return {"exit_requested": True, "code": r.code, "graceful": r.graceful, "delay_ns": r.delay_ns}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
