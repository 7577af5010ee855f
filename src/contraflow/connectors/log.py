"""`log`: consume a user topic of the SPU as events, or produce events to one.

Config: `topic` (required), `partition` (a source reads every partition of
the topic unless one is named; a sink writes partition 0 unless one is
named); for consuming also
`consumer` (the consumer name whose committed offset is the resume point,
default `<flow>.<alias>`) and `start` (`earliest`, the default, or `latest`:
where a consumer with no committed offset begins).

Source: tails each partition with a push stream from the SPU (no polling,
`logtail.TopicTail`), reading committed records only; partitions are
interleaved as their records arrive, each in order. Every record is one chunk for the codec
(its value), with `$log = {"topic", "partition", "offset", "timestamp",
"key"}` (key as text when it is UTF-8, else null). A pull hands out every
record of one partition already received (up to `PULL_RECORDS`), not one: the
runtime appends each pull with one request, and on a cluster that round trip
(to the channel's leader) would otherwise cap the source at a few dozen records
a second. Acks commit the consumer
offset (the next offset to read) of each partition over its longest
acknowledged prefix, one commit in flight at a time; a fail rewinds that
partition to the failed record (at-least-once). A restart resumes at the committed offset.

Sink: each event becomes one record (its encoded frames; key from
`$log.key` when it is a string). When the runtime gives channel offsets
(`SinkEvent.offset >= 0`) a batch is written exactly once: it is staged and
committed as an SPU transaction under producer `log.<flow>.<alias>` with the
batch's first channel offset as batch id, and its last record carries the
header `contraflow.through` (the last channel offset written). After a
restart, a batch whose id the SPU ledger already holds is recognised, the
`through` header of the last record written says how far it went, and only
the rest is written. This relies on the runtime resuming at a batch boundary
it committed, which it does (it commits only after `send` returns).
Without channel offsets records are produced plainly (at-least-once).

Reconnects: the SPU client reconnects and retries by itself; an SPU that stays
away surfaces as `ConnectionLost` (breaker open, the runtime reconnects).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from contraflow.connectors.base import (
    ConnectionLost,
    Connector,
    ConnectorContext,
    SinkEvent,
    SourceData,
    register,
)
from contraflow.connectors.base.acks import AckWindow
from contraflow.connectors.base.logtail import TopicTail
from contraflow.connectors.base.options import ConfigReader
from contraflow.spu.client.aio import AsyncSpuClient
from contraflow.spu.protocol import SpuError
from contraflow.spu.protocol.batch import Record, encode_batch
from contraflow.spu.protocol.errors import ErrorCode

THROUGH_HEADER = "contraflow.through"
# Records one pull hands out at most: one channel append, one ack token.
PULL_RECORDS = 1024


@dataclass(frozen=True)
class LogOptions:
    topic: str
    partition: int | None  # None: every partition (source), partition 0 (sink)
    consumer: str | None  # None: named after the flow and alias (`LogConnector.consumer`)
    start: Literal["earliest", "latest"]

    @classmethod
    def read(cls, cfg: ConfigReader) -> LogOptions:
        return cls(
            cfg.string("topic"),
            cfg.optional_integer("partition"),
            cfg.string("consumer") if "consumer" in cfg.config else None,
            "latest" if cfg.choice("start", {"earliest", "latest"}, "earliest") == "latest" else "earliest",
        )


def _key_text(key: bytes | None) -> str | None:
    if key is None:
        return None
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return None


@register("log")
class LogConnector(Connector[LogOptions]):
    config_keys = frozenset({"topic", "partition", "consumer", "start"})
    required_keys = frozenset({"topic"})

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.producer_id = f"log.{ctx.flow_id}.{ctx.alias}"
        self.consumer = self.options.consumer or f"{ctx.flow_id}.{ctx.alias}"
        self._client: AsyncSpuClient | None = None
        self._partitions: list[int] = []
        self._tail: TopicTail | None = None
        self._windows: dict[int, AckWindow] = {}  # per partition: acknowledged prefix
        self._handed: dict[int, int] = {}  # per partition: next offset not yet handed out
        self._rewinds: dict[int, int] = {}
        self._to_commit: dict[int, int] = {}
        self._committer: asyncio.Task[None] | None = None
        self._written_through: int | None = None  # last channel offset known to be in the topic

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> LogOptions:
        return LogOptions.read(cfg)

    @property
    def sink_partition(self) -> int:
        return self.options.partition or 0

    # -- lifecycle ---------------------------------------------------------------------------------

    async def connect(self) -> None:
        if self._client is not None:
            return
        if not self.ctx.spu_addr:
            raise self.config_reader.problem("the runtime has no SPU address")
        client = AsyncSpuClient(self.ctx.spu_addr)
        try:
            description = await client.describe_topic(self.options.topic)
        except SpuError as err:
            await client.close()
            if err.code in (ErrorCode.UNKNOWN_TOPIC, ErrorCode.UNKNOWN_PARTITION):
                raise self.config_reader.problem(
                    f"topic '{self.options.topic}' does not exist "
                    f"(create it with `contraflow topic create {self.options.topic}`)"
                ) from None
            raise ConnectionLost(f"SPU {self.ctx.spu_addr}: {err}") from err
        count = len(description.partitions)
        wanted = self.options.partition
        if wanted is not None and wanted >= count:
            await client.close()
            raise self.config_reader.error(
                "partition", f"is {wanted}, but topic '{self.options.topic}' has {count} partition(s)"
            )
        self._partitions = [wanted] if wanted is not None else list(range(count))
        self._client = client

    async def _first_offset(self, partition: int) -> int:
        """Where a fresh run starts: the consumer's committed offset, else `start`."""
        assert self._client is not None
        o = self.options
        offset = await self._client.fetch_offset(self.consumer, o.topic, partition)
        if offset is None:
            offset = await self._client.list_offsets(o.topic, partition, o.start) or 0
        return offset

    async def _open_tail(self) -> TopicTail:
        """Tail every partition from the next offset not yet handed out (first: the committed one)."""
        assert self._client is not None
        for partition in self._partitions:
            if partition not in self._handed:  # not resumed from the channel log: committed offset
                self._handed[partition] = await self._first_offset(partition)
                self._windows[partition] = AckWindow(self._handed[partition])
        return TopicTail(self._client, self.options.topic, dict(self._handed), self.ctx.quiescing)

    async def close(self) -> None:
        if self._committer is not None:
            await asyncio.wait([self._committer])
        if self._tail is not None:
            await self._tail.close()
            self._tail = None
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    # -- source ------------------------------------------------------------------------------------

    async def pull(self) -> SourceData | None:
        if self._client is None or self.ctx.quiescing.is_set():
            return None
        if self._tail is None:
            self._tail = await self._open_tail()
        for partition, offset in self._rewinds.items():
            await self._tail.rewind(partition, offset)
            self._handed[partition] = offset
        self._rewinds.clear()
        try:
            item = await self._tail.next_run(PULL_RECORDS)
        except SpuError as err:
            await self._tail.close()
            self._tail = None  # the next pull resumes every partition after what was handed out
            raise ConnectionLost(f"tailing {self.options.topic}: {err}") from err
        if item is None:
            return None
        partition, records = item
        first, end = records[0].offset, records[-1].offset + 1
        self._handed[partition] = end
        self._windows[partition].issue(first, first, end)
        data = self.source_data(partition, records)
        data.token = (partition, first)  # acks and fails the pull's records together
        data.position = {str(p): offset for p, offset in self._handed.items()}
        return data

    def source_data(self, partition: int, records: list[Record]) -> SourceData:
        """What a pull's records become: each value a chunk for the codec, with `$log`."""
        return SourceData(chunks=[(record.value, self._log_meta(partition, record)) for record in records])

    def _log_meta(self, partition: int, record: Record) -> dict[str, Any]:
        return {
            "log": {
                "topic": self.options.topic,
                "partition": partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": _key_text(record.key),
            }
        }

    async def resume(self, position: Any) -> None:
        """Continue each partition after the records whose events already reached the channel log.

        `position` is the next offset per partition at the last pull the runtime found in the log;
        it is at or after the consumer's committed offset (acks only follow delivery)."""
        if not isinstance(position, dict):
            return
        for partition in self._partitions:
            offset = position.get(str(partition))
            if isinstance(offset, int):
                self._handed[partition] = offset
                self._windows[partition] = AckWindow(offset)
        if self._tail is not None:
            await self._tail.close()
            self._tail = None

    async def ack(self, token: Any) -> None:
        partition, offset = token
        committed = self._windows[partition].ack(offset)
        if committed is not None:
            self._to_commit[partition] = committed
            if self._committer is None or self._committer.done():
                self._committer = asyncio.create_task(self._commit_offsets())

    async def _commit_offsets(self) -> None:
        o = self.options
        while self._to_commit and self._client is not None:
            partition, offset = self._to_commit.popitem()
            try:
                await self._client.commit_offset(self.consumer, o.topic, partition, offset)
            except SpuError as err:  # the next ack commits a later offset; a restart re-reads a little
                self.ctx.logger.warning(
                    "committing offset %d of %s/%d failed: %s", offset, o.topic, partition, err
                )

    async def fail(self, token: Any) -> None:
        partition, offset = token
        position = self._windows[partition].fail(offset)
        if position is not None:
            self._rewinds[partition] = position

    # -- sink --------------------------------------------------------------------------------------

    async def send(self, events: Sequence[SinkEvent]) -> None:
        if self._client is None:
            raise ConnectionLost("not connected to the SPU")
        try:
            if events and all(e.offset >= 0 for e in events):
                await self._send_exactly_once(list(events))
            elif events:
                await self._client.produce(
                    self.options.topic, self.sink_partition, *self._columns(events, None)
                )
        except SpuError as err:
            self._written_through = None  # unknown whether it landed: ask the ledger next time
            raise ConnectionLost(f"producing to {self.options.topic}: {err}") from err

    async def _send_exactly_once(self, events: list[SinkEvent]) -> None:
        assert self._client is not None
        remaining = events
        if self._written_through is None:
            # After a restart (or a failure that left it unknown) the ledger says what was written:
            # every committed batch id found there is skipped up to its `through` header.
            while remaining:
                through = await self._through_from_ledger(remaining[0].offset)
                if through is None:
                    break
                remaining = [e for e in remaining if e.offset > through]
        else:
            remaining = [e for e in remaining if e.offset > self._written_through]
        if remaining:
            first, last = remaining[0].offset, remaining[-1].offset
            batch = encode_batch(*self._columns(remaining, last))
            await self._client.stage(self.producer_id, first, self.options.topic, self.sink_partition, batch)
            await self._client.commit(
                self.producer_id, first, partitions={(self.options.topic, self.sink_partition): 1}
            )
        self._written_through = events[-1].offset

    async def _through_from_ledger(self, batch_id: int) -> int | None:
        """The last channel offset a batch committed under `batch_id` wrote; None if there was none."""
        assert self._client is not None
        o = self.options
        ends = await self._client.ledger(self.producer_id, batch_id, topics=[o.topic])
        end = ends.get((o.topic, self.sink_partition)) if ends else None
        if end is None:
            return None
        result = await self._client.fetch(o.topic, self.sink_partition, end - 1)
        for batch in result.batches:
            for record in batch.records(start_offset=end - 1):
                for name, value in record.headers:
                    if name == THROUGH_HEADER:
                        return int(value)
        return None

    def _columns(
        self, events: Sequence[SinkEvent], through: int | None
    ) -> tuple[list[bytes], list[bytes | None], list[list[tuple[str, bytes]]]]:
        values = [b"".join(e.frames) for e in events]
        keys: list[bytes | None] = []
        for e in events:
            nested = e.meta.get("log")
            key = nested.get("key") if isinstance(nested, dict) else None
            keys.append(key.encode() if isinstance(key, str) else None)
        headers: list[list[tuple[str, bytes]]] = [[] for _ in events]
        if through is not None:
            headers[-1] = [(THROUGH_HEADER, str(through).encode())]
        return values, keys, headers

    def status(self) -> dict[str, Any]:
        committed = {str(p): w.committed for p, w in self._windows.items()}
        return {"topic": self.options.topic, "committed": committed}
