"""`wal`: Tremor's write-ahead log, kept in a topic of its own on contraflow's log.

Config (Tremor's, all required): `dir`, `chunk_size` (bytes), `max_chunks`.
The log is the SPU topic `wal.<flow>.<alias>` (one partition), created on
first connect with segments of `chunk_size` bytes (at least 1 KiB) and an
fsync before every append returns; `dir` names Tremor's storage directory
and is not used (the topic lives in the runtime's data directory). Nothing
is deleted that was not read and acknowledged: `max_chunks` is accepted but
does not bound the topic (Tremor's bound drops events; here the SPU's
retention settings apply, `contraflow topic` can set them).

Sink: every event (value and metadata) becomes one record, exactly once per
channel offset (the `log` sink's transactions); `send` returns, and so the
event is acknowledged upstream, once the records are persisted.
Source: replays the topic from the connector's committed consumer offset,
each record as the event it was (value and metadata), acknowledging by
committing that offset, so a restart sends again what was not delivered
downstream (at least once, as Tremor's WAL).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from contraflow.connectors.base import ConnectionLost, ConnectorContext, SinkEvent, SourceData, register
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.log import THROUGH_HEADER, LogConnector, LogOptions
from contraflow.events import META_HEADER, decode_value
from contraflow.spu.client.aio import AsyncSpuClient
from contraflow.spu.protocol import SpuError
from contraflow.spu.protocol.batch import Record
from contraflow.spu.protocol.errors import ErrorCode
from contraflow.spu.protocol.topics import TopicConfig

MIN_SEGMENT_BYTES = 1024


@dataclass(frozen=True)
class WalOptions:
    dir: str
    chunk_size: int
    max_chunks: int

    @classmethod
    def read(cls, cfg: ConfigReader) -> WalOptions:
        return cls(
            cfg.string("dir"), cfg.integer("chunk_size", minimum=1), cfg.integer("max_chunks", minimum=1)
        )


def wal_topic(flow_id: str, alias: str) -> str:
    return f"wal.{flow_id}.{alias}"


@register("wal")
class WalConnector(LogConnector):
    config_keys = frozenset({"dir", "chunk_size", "max_chunks"})
    required_keys = frozenset({"dir", "chunk_size", "max_chunks"})
    structured = True

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.wal = WalOptions.read(self.config_reader)

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> LogOptions:
        WalOptions.read(cfg)
        return LogOptions(topic="wal", partition=0, consumer=None, start="earliest")

    @classmethod
    def options_for(cls, ctx: ConnectorContext) -> LogOptions:
        return dataclasses.replace(
            cls.read_config(ctx.alias, ctx.config), topic=wal_topic(ctx.flow_id, ctx.alias)
        )

    async def connect(self) -> None:
        if self._client is None and self.ctx.spu_addr:
            await self._create_topic(self.ctx.spu_addr)
        await super().connect()

    async def _create_topic(self, spu_addr: str) -> None:
        client = AsyncSpuClient(spu_addr)
        try:
            segment = max(MIN_SEGMENT_BYTES, self.wal.chunk_size)
            await client.create_topic(self.options.topic, TopicConfig(segment_bytes=segment))
        except SpuError as err:
            if err.code != ErrorCode.TOPIC_EXISTS:
                raise ConnectionLost(f"creating the WAL topic {self.options.topic}: {err}") from err
        finally:
            await client.close()

    def source_data(self, partition: int, records: list[Record]) -> SourceData:
        return SourceData(events=[(decode_value(record.value), _event_meta(record)) for record in records])

    def _columns(
        self, events: Sequence[SinkEvent], through: int | None
    ) -> tuple[list[bytes], list[bytes | None], list[list[tuple[str, bytes]]]]:
        values = [e.raw for e in events]
        headers = [[(META_HEADER, orjson.dumps(e.meta))] if e.meta else [] for e in events]
        if through is not None:
            headers[-1].append((THROUGH_HEADER, str(through).encode()))
        return values, [None] * len(events), headers


def _event_meta(record: Record) -> dict[str, Any]:
    """The metadata the event had when the sink wrote it (its header), else none."""
    meta: dict[str, Any] = {}
    for name, data in record.headers:
        if name == META_HEADER:
            meta = orjson.loads(data)
    return meta
