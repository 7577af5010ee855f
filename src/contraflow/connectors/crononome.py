"""`crononome`: events on cron schedules with seconds, in UTC (Tremor's).

Config: `entries`, a list of `{"name", "expr", "payload"}` (`payload`
optional). `expr` is a cron expression with seconds (`base.cron`). Each due
entry emits `{"connector": "crononome", "ingest_ns", "id", "trigger":
{"name", "payload"}}` with `$crononome.trigger` = its name. Entries due in
the same second go out in one pull, in their config order. After a stall
(back-pressure, a paused flow) the missed firings are skipped: the schedule
continues from now, as Tremor's queue does on reconnect.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

from contraflow.connectors.base import Connector, ConnectorContext, SourceData, register
from contraflow.connectors.base.cron import CronError, CronSchedule
from contraflow.connectors.base.options import ConfigReader
from contraflow.stopping import sleep_unless


@dataclass(frozen=True)
class CronEntry:
    name: str
    schedule: CronSchedule
    payload: Any  # None: the trigger has no `payload`


@register("crononome")
class CrononomeConnector(Connector[list[CronEntry]]):
    config_keys = frozenset({"entries"})
    required_keys = frozenset({"entries"})
    structured = True

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self._id = 0
        self._due: list[tuple[dt.datetime, int]] = []  # (next firing, entry index)

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> list[CronEntry]:
        entries = cfg.config.get("entries")
        if not isinstance(entries, list) or not entries:
            raise cfg.error(
                "entries", f"must be a non-empty list of {{name, expr, payload}}, got {entries!r}"
            )
        result = []
        for i, entry in enumerate(entries):
            where = f"entries[{i}]"
            if not isinstance(entry, dict) or set(entry) - {"name", "expr", "payload"}:
                raise cfg.error(where, f"must be a record with name, expr and payload, got {entry!r}")
            name, expr = entry.get("name"), entry.get("expr")
            if not isinstance(name, str) or not isinstance(expr, str):
                raise cfg.error(where, "needs a string `name` and a string `expr`")
            try:
                schedule = CronSchedule.parse(expr)
            except CronError as err:
                raise cfg.error(f"{where}.expr", f"is not a cron schedule: {err}") from None
            result.append(CronEntry(name, schedule, entry.get("payload")))
        return result

    async def connect(self) -> None:
        """(Re)start every schedule from now: nothing missed while away is fired late."""
        now = dt.datetime.now(dt.UTC)
        self._due = []
        for index, entry in enumerate(self.options):
            at = entry.schedule.next_after(now)
            if at is not None:
                self._due.append((at, index))

    async def pull(self) -> SourceData | None:
        if not self._due:
            await self.ctx.quiescing.wait()
            return None
        at = min(self._due)[0]
        if await sleep_unless(self.ctx.quiescing, (at - dt.datetime.now(dt.UTC)).total_seconds()):
            return None
        now = dt.datetime.now(dt.UTC)
        fired, waiting = [d for d in self._due if d[0] <= at], [d for d in self._due if d[0] > at]
        events = []
        for _, index in sorted(fired, key=lambda d: d[1]):
            entry = self.options[index]
            events.append(self._event(entry))
            following = entry.schedule.next_after(max(now, at))
            if following is not None:
                waiting.append((following, index))
        self._due = waiting
        return SourceData(events=events)

    def _event(self, entry: CronEntry) -> tuple[dict[str, Any], dict[str, Any]]:
        trigger: dict[str, Any] = {"name": entry.name}
        if entry.payload is not None:
            trigger["payload"] = entry.payload
        event = {"connector": "crononome", "ingest_ns": time.time_ns(), "id": self._id, "trigger": trigger}
        self._id += 1
        return event, {"crononome": {"trigger": entry.name}}
