"""`metrics`: the runtime's own metrics as events, in Tremor's shape, so flows can process them.

No config (Tremor's has none). Every `metrics_interval_s` of the connector's
own `with` block (default 10 s) the source emits one event per metric
sample of the runtime's registry (what `GET /metrics` shows, every flow):
`{"measurement", "tags", "fields", "timestamp"}` with the timestamp in ns.

- connector counters (`contraflow_connector_events_total`) become Tremor's
  `{"measurement": "connector_events", "tags": {"flow", "connector",
  "port"}, "fields": {"count": n}}`;
- pipeline counters (`contraflow_pipeline_events_total`, direction `in` or
  `out`) become Tremor's `{"measurement": "events", "tags": {"flow",
  "pipeline", "node", "direction": "input"|"output", "port"}, "fields":
  {"count": n}}`, `node` and `port` being the pipeline's `in` or `out`;
- every other sample keeps its labels as tags, its name without the
  `contraflow_` prefix as measurement and `{"value": v}` as fields
  (histogram buckets and creation times are left out).

Events sent to `in` (a flow's own measurements) come out on `out` with the
next pull, as Tremor's metrics connector forwards what it is sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from contraflow.connectors.base import Connector, ConnectorContext, SinkEvent, SourceData, register
from contraflow.connectors.base.inbox import Inbox
from contraflow.connectors.base.timing import Ticker

DEFAULT_INTERVAL_S = 10.0
PREFIX = "contraflow_"
_PIPELINE_DIRECTIONS = {"in": "input", "out": "output"}

Measurement = dict[str, Any]


@register("metrics")
class MetricsConnector(Connector):
    structured = True

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.interval_s = ctx.spec.metrics_interval_s or DEFAULT_INTERVAL_S
        self.inbox = Inbox(ctx.quiescing)
        self._ticker = Ticker(self.interval_s)

    async def connect(self) -> None:
        self._ticker = Ticker(self.interval_s)

    async def pull(self) -> SourceData | None:
        """Forwarded events as they come, a snapshot whenever the interval is up; None on quiescing."""
        while not self.ctx.quiescing.is_set():
            delay = self._ticker.delay()
            if delay <= 0:
                self._ticker.advance()
                return SourceData(events=[(m, {}) for m in self.snapshot()])
            try:
                async with asyncio.timeout(delay):  # not wait_for, which may swallow a cancel (3.11)
                    return await self.inbox.get()
            except TimeoutError:
                continue
        return None

    def snapshot(self) -> list[Measurement]:
        """Every sample of the runtime's registry now, as Tremor measurements."""
        registry = self.ctx.runtime_metrics
        if registry is None:
            return []
        now = time.time_ns()
        return [
            measurement(sample.name, sample.labels, sample.value, now)
            for family in registry.collect()
            for sample in family.samples
            if not sample.name.endswith(("_created", "_bucket"))
        ]

    async def send(self, events: Sequence[SinkEvent]) -> None:
        if "out" not in self.ctx.outputs:
            return
        for event in events:
            await self.inbox.put(SourceData(events=[(event.value(), dict(event.meta))]))


def measurement(name: str, labels: dict[str, str], value: float, timestamp: int) -> Measurement:
    """One sample in Tremor's metrics shape (see the module docstring for the mapping)."""
    if name == f"{PREFIX}connector_events_total":
        return _shape("connector_events", dict(labels), {"count": int(value)}, timestamp)
    direction = _PIPELINE_DIRECTIONS.get(labels.get("direction", ""))
    if name == f"{PREFIX}pipeline_events_total" and direction is not None:
        port = labels["direction"]
        tags = {"flow": labels.get("flow"), "pipeline": labels.get("pipeline")}
        tags |= {"node": port, "direction": direction, "port": port}
        return _shape("events", tags, {"count": int(value)}, timestamp)
    short = name.removeprefix(PREFIX)
    return _shape(short, dict(labels), {"value": value}, timestamp)


def _shape(name: str, tags: dict[str, Any], fields: dict[str, Any], timestamp: int) -> Measurement:
    return {"measurement": name, "tags": tags, "fields": fields, "timestamp": timestamp}
