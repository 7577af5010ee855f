"""`cb`: Tremor's circuit-breaker test connector: replays files, checks every event came back, steers breakers.

Config (Tremor's): `path` (one file, Tremor 0.12) or `paths` (a list, 0.13),
needed only when `out` is connected; `timeout` (ns, default 10 s) to wait for
the last acks once every line was sent; `expect_batched` (default false).

Source: one line per pull, the files taken in turn, each file its own
stream (Tremor's order). Every line carries an ack token. Once every line
was sent, the source waits until each one was acknowledged or failed (or
`timeout` passed), prints the verdict on stderr (`All required CB events
received.` or what is missing) and asks the runtime to stop, as Tremor's
does. With `expect_batched` every line still counts: contraflow acks each
pulled line once its events were delivered, batched downstream or not.

Sink: each event's `cb` command (from `$cb`, else the value's `cb` field;
a string or a list) says what happens to it: `ack` (or nothing) delivers it,
`fail` turns it into an error event on this connector's `err` port (the rest
of the batch is delivered), `trigger`/`close` opens this sink's circuit
breaker (upstream sources stop pulling) and `restore`/`open` closes it again.
Tremor's "close" the breaker is contraflow's "open" it: both mean stop.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contraflow.connectors.base import (
    Connector,
    ConnectorContext,
    SinkEvent,
    SourceData,
    register,
)
from contraflow.connectors.base.inbox import Inbox
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.undelivered import report_undelivered

NS_PER_S = 1_000_000_000
DEFAULT_TIMEOUT_NS = 10 * NS_PER_S
ALL_RECEIVED = "All required CB events received."


@dataclass(frozen=True)
class CbOptions:
    paths: tuple[str, ...]
    timeout_ns: int
    expect_batched: bool


def commands_of(event: SinkEvent) -> set[str]:
    """The `cb` commands an event carries: in its metadata first, else in its value."""
    found = event.meta.get("cb")
    if found is None:
        value = event.value()
        found = value.get("cb") if isinstance(value, dict) else None
    if isinstance(found, str):
        return {found}
    if isinstance(found, list):
        return {c for c in found if isinstance(c, str)}
    return set()


@register("cb")
class CbConnector(Connector[CbOptions]):
    # `chunk_size`: older Tremor versions took it (their integration tests still set it); no effect here.
    config_keys = frozenset({"path", "paths", "timeout", "expect_batched", "chunk_size"})

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.inbox = Inbox(ctx.quiescing)  # error events for `fail` commands
        self._lines: list[tuple[int, list[bytes]]] = []  # per file: its stream, lines to send (reversed)
        self._sent = 0
        self._next_file = 0
        self.acked = 0
        self.failed = 0
        self._progress = asyncio.Event()
        self._finished = False

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> CbOptions:
        paths = [cfg.string("path")] if "path" in cfg.config else []
        listed = cfg.config.get("paths", [])
        if not isinstance(listed, list) or not all(isinstance(p, str) and p for p in listed):
            raise cfg.error("paths", f"must be a list of file paths, got {listed!r}")
        return CbOptions(
            tuple(paths + listed),
            cfg.integer("timeout", DEFAULT_TIMEOUT_NS),
            cfg.boolean("expect_batched", False),
        )

    async def connect(self) -> None:
        if "out" not in self.ctx.outputs or self._lines or self._sent:
            return
        if not self.options.paths:
            raise self.config_reader.error("paths", "is needed for `out`")
        self._lines = await asyncio.to_thread(_read_files, self.options.paths)

    # -- source ------------------------------------------------------------------------------------

    async def pull(self) -> SourceData | None:
        if not self.inbox.empty():
            return await self.inbox.get()
        if "out" in self.ctx.outputs and not self._finished:
            line = self._next_line()
            if line is not None:
                return line
            self._finished = True
            if await self._wait_for_acks():
                return await self.inbox.get()  # an error event arrived while waiting
            self._report()
            self.ctx.stop_runtime()
        return await self.inbox.get()  # until the flow quiesces: `fail` commands still need `err`

    def _next_line(self) -> SourceData | None:
        """The next line of the next file in turn; a file that ran out ends its stream."""
        while self._lines:
            index = self._next_file % len(self._lines)
            stream, remaining = self._lines[index]
            if remaining:
                self._next_file += 1
                self._sent += 1
                return SourceData(data=remaining.pop(), stream=stream, token=self._sent)
            del self._lines[index]
            return SourceData(stream=stream, end_stream=True)
        return None

    async def _wait_for_acks(self) -> bool:
        """Wait until every line was acked or failed, or the timeout; True if an error event interrupts."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.timeout_ns / NS_PER_S
        while not self.all_received and not self.ctx.quiescing.is_set():
            if not self.inbox.empty():
                return True
            self._progress.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                async with asyncio.timeout(remaining):  # not wait_for, which may swallow a cancel (3.11)
                    await self._progress.wait()
            except TimeoutError:
                break
        return False

    @property
    def all_received(self) -> bool:
        return self.acked + self.failed == self._sent

    def _report(self) -> None:
        if self.all_received:
            print(ALL_RECEIVED, file=sys.stderr)
        else:
            print(f"Expected CB events for {self._sent} events.", file=sys.stderr)
        print(f"Got acks: {self.acked}", file=sys.stderr)
        print(f"Got fails: {self.failed}", file=sys.stderr)

    async def ack(self, token: Any) -> None:
        self.acked += 1
        self._progress.set()

    async def fail(self, token: Any) -> None:
        self.failed += 1
        self._progress.set()

    # -- sink --------------------------------------------------------------------------------------

    async def send(self, events: Sequence[SinkEvent]) -> None:
        for event in events:
            commands = commands_of(event)
            if commands & {"trigger", "close"}:
                self.ctx.open_breaker("cb: trigger")
            elif commands & {"restore", "open"}:
                self.ctx.close_breaker()
            if "fail" in commands and "ack" not in commands:
                report_undelivered(self.ctx, self.inbox, "cb: fail", event)
                self._progress.set()

    def status(self) -> dict[str, Any]:
        return {"sent": self._sent, "acked": self.acked, "failed": self.failed}


def _read_files(paths: Sequence[str]) -> list[tuple[int, list[bytes]]]:
    """Every file's stream and non-empty lines, reversed so that `pop()` takes the next one."""
    files = []
    for stream, path in enumerate(paths):
        lines = [line for line in Path(path).read_bytes().splitlines() if line.strip()]
        lines.reverse()
        files.append((stream, lines))
    return files
