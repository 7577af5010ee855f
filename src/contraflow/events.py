"""How an event travels through a channel topic.

Every edge of a flow is a log partition, so every event crossing an edge is a
log record:

- `value`: the event as JSON bytes. A source whose codec is `json` appends
  the frame it read untouched (no decode, no re-encode); other codecs decode
  and the runtime encodes the value with orjson. Pipelines decode the value
  only if a node reads the event, and pass untouched events on as the same
  bytes. Bytes values (the `binary` codec) travel as `{"$bytes": base64}`.
- header `meta`: the event's metadata (`$` in tremor-script) as JSON, absent
  when empty.
- header `origin`: where the event came from, as JSON
  `[topic, partition, offset]` of the input record it derives from (set by
  pipelines), used for acknowledgement lineage. Sources leave it out.
- key: unused by the runtime (None), free for `log` connectors.

Keeping one format for all channels is what lets `contraflow consume` show
any edge of a flow, and lets pipelines, sinks and Spark agree without shared
memory.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

META_HEADER = "meta"
ORIGIN_HEADER = "origin"
BYTES_KEY = "$bytes"


def _default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {BYTES_KEY: base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"cannot encode {type(value).__name__} in an event")


def encode_value(value: Any) -> bytes:
    """An event value as channel bytes (JSON; bytes become {"$bytes": base64})."""
    return orjson.dumps(value, default=_default)


def _revive_bytes(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and BYTES_KEY in value and isinstance(value[BYTES_KEY], str):
            return base64.b64decode(value[BYTES_KEY])
        return {k: _revive_bytes(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_revive_bytes(v) for v in value]
    return value


def decode_value(data: bytes | memoryview) -> Any:
    """Channel bytes back to an event value."""
    value = orjson.loads(data)
    if isinstance(value, dict | list) and b'"$bytes"' in bytes(data):
        return _revive_bytes(value)
    return value


@dataclass
class Event:
    """An event as the runtime handles it between the log and connectors.

    `raw` keeps the channel bytes the event was read as, so a sink or pipeline
    that does not change the value can write them on without re-encoding.
    """

    value: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    raw: bytes | None = None
    origin: tuple[str, int, int] | None = None

    @classmethod
    def from_raw(cls, raw: bytes, meta: dict[str, Any] | None = None) -> Event:
        """An event whose value is still undecoded channel bytes (decoded on first access of `decoded`)."""
        return cls(None, meta or {}, raw)

    @property
    def decoded(self) -> Any:
        """The value, decoding `raw` on first use."""
        if self.value is None and self.raw is not None:
            self.value = decode_value(self.raw)
        return self.value

    def channel_bytes(self) -> bytes:
        """The value as channel bytes, reusing `raw` when the value was never decoded."""
        if self.raw is not None and self.value is None:
            return self.raw
        return encode_value(self.value)

    def headers(self) -> list[tuple[str, bytes]]:
        """Record headers carrying meta and origin."""
        out: list[tuple[str, bytes]] = []
        if self.meta:
            out.append((META_HEADER, orjson.dumps(self.meta, default=_default)))
        if self.origin is not None:
            out.append((ORIGIN_HEADER, orjson.dumps(self.origin)))
        return out


def event_from_record(value: bytes, headers: Sequence[tuple[str, bytes]]) -> Event:
    """Rebuild an Event from a channel record's value and headers."""
    meta: dict[str, Any] = {}
    origin = None
    for name, data in headers:
        if name == META_HEADER:
            meta = orjson.loads(data)
        elif name == ORIGIN_HEADER:
            topic, partition, offset = orjson.loads(data)
            origin = (topic, partition, offset)
    return Event(None, meta, bytes(value), origin)
