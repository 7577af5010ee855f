"""A sink connector written in Python: append an alert line for each event whose `field` is above `above`.

flow.troy sends its anomalies here as `define connector alert_file from python
with config = {"class": "alert_file:AlertFile", ...}`; contraflow finds this
module next to the flow file. Everything but the file itself is the runtime's:
the json codec and the `separate` postprocessor made each event's bytes, a
write that fails (a full disk, an I/O error) opens the circuit breaker, and
`connect` is called again until the file can be opened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from contraflow.connectors import ConnectionLost, Connector, ConnectorConfigError, SinkEvent


@dataclass(frozen=True)
class AlertOptions:
    path: Path
    field: str
    above: float


class AlertFile(Connector[AlertOptions]):
    """Appends to `path` the wire bytes of every event whose `field` is a number above `above`."""

    config_keys = frozenset({"path", "field", "above"})
    required_keys = frozenset({"path", "field", "above"})

    @classmethod
    def read_config(cls, alias: str, config: Mapping[str, Any]) -> AlertOptions:
        above = config["above"]
        if isinstance(above, bool) or not isinstance(above, int | float):
            raise ConnectorConfigError(
                f"connector '{alias}' ({cls.kind}): config key 'above' must be a number"
            )
        return AlertOptions(Path(config["path"]), str(config["field"]), float(above))

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.file: IO[bytes] | None = None

    async def connect(self) -> None:
        try:
            self.options.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = self.options.path.open("ab")
        except OSError as err:
            raise ConnectionLost(f"cannot open {self.options.path}: {err}") from err

    async def send(self, events: Sequence[SinkEvent]) -> None:
        if self.file is None:
            raise ConnectionLost("not connected")
        alerts = [b"".join(e.frames) for e in events if self._alarming(e.value())]
        try:
            self.file.write(b"".join(alerts))
            self.file.flush()
        except OSError as err:  # the next connect() opens the file again
            self.file = None
            raise ConnectionLost(f"cannot write {self.options.path}: {err}") from err
        self.ctx.logger.info("%d of %d events were alerts", len(alerts), len(events))

    def _alarming(self, value: Any) -> bool:
        reading = value.get(self.options.field) if isinstance(value, dict) else None
        return (
            isinstance(reading, int | float)
            and not isinstance(reading, bool)
            and reading > self.options.above
        )

    async def close(self) -> None:
        if self.file is not None:
            self.file.close()
