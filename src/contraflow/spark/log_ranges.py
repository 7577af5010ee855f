"""Log ranges: envelopes by reference, so a routing-only query's events never cross Spark.

A pipeline that only routes (`analysis.routing_only`) needs nothing of its
events, not even to carry their bytes: with `columns = ranges` the source's
read task yields one row naming its offset range (`range_spu`, `range_topic`,
`range_partition`, `range_start`, `range_end`, and `records`, the events in it)
without touching the log, and the sink's write task fetches that range from
the SPU and stages its log batches as `log_envelopes` does (whole batches
restamped, the rest re-encoded). Spark moves one small row per task; the bytes
go SPU -> write task -> SPU. Before this the bytes crossed the JVM twice as
Arrow (source worker -> JVM rows -> sink worker), and the JVM's copies were the
largest CPU cost of a routed flow.

The range is the read task's own: the records in [start, end) of the partition
are in the log when the batch is planned, a retried task fetches them again,
and what the sink stages is still one SPU transaction per (query, batch), so a
replayed micro-batch stays a no-op. Offsets the log no longer holds
(retention) are skipped with a warning, as the reading source does; `records`
counts the range's offsets, so a gap left by retention counts as written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from contraflow.spark.log_envelopes import envelopes
from contraflow.spu.protocol.batch import DecodedBatch

log = logging.getLogger(__name__)

RANGE_COLUMN = "range_start"
RANGE_SCHEMA = pa.schema(
    [
        ("range_spu", pa.string()),
        ("range_topic", pa.string()),
        ("range_partition", pa.int32()),
        (RANGE_COLUMN, pa.int64()),
        ("range_end", pa.int64()),
        ("records", pa.int64()),
    ]
)
RANGE_DDL = (
    "range_spu string, range_topic string, range_partition int, range_start bigint, range_end bigint, "
    "records bigint"
)


def range_row(spu: str, topic: str, partition: int, start: int, end: int) -> pa.RecordBatch:
    """The one row a read task yields for its offsets [start, end) of `topic`/`partition`."""
    return pa.RecordBatch.from_pylist(
        [
            {
                "range_spu": spu,
                "range_topic": topic,
                "range_partition": partition,
                RANGE_COLUMN: start,
                "range_end": end,
                "records": end - start,
            }
        ],
        schema=RANGE_SCHEMA,
    )


def fetch_range(
    client: Any, topic: str, partition: int, start: int, end: int, fetch_bytes: int
) -> Iterator[tuple[int, list[DecodedBatch]]]:
    """The log batches holding offsets [start, end), per fetch with the offset it asked for (its
    first batch may start below it); the next fetch is in flight while the caller uses these.
    Shared by the source's read task and the sink's write task of a range."""
    offset = start
    pending = client.fetch_soon(topic, partition, offset, fetch_bytes)
    while pending is not None:
        result = pending.result()
        if not result.batches and result.next_offset <= offset:
            raise RuntimeError(f"{topic}/{partition}: no records at offset {offset} below {end}")
        fetched_from, offset = offset, max(offset, result.next_offset)
        pending = client.fetch_soon(topic, partition, offset, fetch_bytes) if offset < end else None
        if not result.batches:
            log.warning("%s/%s: offsets %s..%s are gone (retention)", topic, partition, fetched_from, offset)
        yield fetched_from, result.batches


def ranges_of(rows: pa.Table) -> Iterator[tuple[str, str, int, int, int]]:
    """(spu, topic, partition, start, end) of each range row, in row order."""
    columns = [rows.column(name).to_pylist() for name in RANGE_SCHEMA.names[:5]]
    yield from zip(*columns, strict=True)


class RangeFetcher:
    """A sink task's reading side: fetches range rows' records as envelopes, one SPU client per
    address the rows name, closed with the fetcher."""

    def __init__(self, fetch_bytes: int, connect: Callable[[str], Any]) -> None:
        self._fetch_bytes = fetch_bytes
        self._connect = connect
        self._clients: dict[str, Any] = {}

    def envelopes(self, rows: pa.Table) -> Iterator[memoryview]:
        """The log batches of every range in `rows`, in row and offset order (`log_envelopes.envelopes`)."""
        for spu, topic, partition, start, end in ranges_of(rows):
            client = self._clients.get(spu)
            if client is None:
                client = self._clients[spu] = self._connect(spu)
            for fetched_from, batches in fetch_range(client, topic, partition, start, end, self._fetch_bytes):
                for envelope in envelopes(batches, fetched_from, end):
                    yield memoryview(envelope)

    def __enter__(self) -> RangeFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
