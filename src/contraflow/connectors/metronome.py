"""`metronome`: emits `{"onramp": "metronome", "ingest_ns": ..., "id": n}` every `interval` (Tremor's).

Config: `interval` in nanoseconds (required, > 0; Tremor 0.12's unit, e.g.
`nanos::from_secs(1)` in Troy). Ticks follow a fixed schedule; after a stall
(back-pressure, a paused flow) the schedule restarts instead of bursting.
"""

from __future__ import annotations

import time

from contraflow.connectors.base import Connector, ConnectorContext, SourceData, register
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.timing import Ticker
from contraflow.stopping import sleep_unless

NS_PER_S = 1_000_000_000


@register("metronome")
class MetronomeConnector(Connector[int]):
    config_keys = frozenset({"interval"})
    required_keys = frozenset({"interval"})
    structured = True

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self._ticker = Ticker(self.options / NS_PER_S)
        self._id = 0

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> int:
        """The interval in nanoseconds."""
        return cfg.integer("interval", minimum=1)

    async def connect(self) -> None:
        self._ticker = Ticker(self.options / NS_PER_S)

    async def pull(self) -> SourceData | None:
        if await sleep_unless(self.ctx.quiescing, self._ticker.delay()):
            return None
        self._ticker.advance()
        event = {"onramp": "metronome", "ingest_ns": time.time_ns(), "id": self._id}
        self._id += 1
        return SourceData(events=[(event, {})])
