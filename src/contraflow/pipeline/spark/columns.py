"""Pipeline rows in Spark: the input columns a pipeline reads and the output columns it writes.

Input rows are the `contraflow` source's rows plus the pipeline input `port`
they arrived on and their `ingest_ns`. Output rows are what the `contraflow`
sink takes: `topic` (one per output port), `value` (channel bytes) and
`headers` (the record headers already packed, as the log stores them).

Output columns are built as Python lists of bytes and turned into Arrow arrays
once per batch: no per-row dicts, and untouched events keep the very bytes
they were read as.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from contraflow.events import META_HEADER, Event
from contraflow.pipeline.spark.plan import IngestMode
from contraflow.spark.arrow_log import repeated_text
from contraflow.spu.protocol.batch import pack_headers

INPUT_DDL = (
    "port string, topic string, partition int, offset bigint, ingest_ns bigint, value binary, "
    "headers array<struct<key: string, value: binary>>"
)
OUTPUT_DDL = "topic string, value binary, headers binary"
OUTPUT_SCHEMA = pa.schema([("topic", pa.string()), ("value", pa.binary()), ("headers", pa.binary())])

Origin = tuple[str, int, int]


def ingest_times(rows: pa.RecordBatch, mode: IngestMode) -> pa.Array:
    """Each row's ingest time in ns: its log timestamp, or its offset (deterministic tests)."""
    if mode == "offset":
        return rows.column("offset")
    micros = rows.column("timestamp").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    return pc.multiply(micros, 1000)


class IngestTimes(Sequence[int]):
    """An ingest-time column (`ingest_times`) read as Python ints only where they are asked for: the
    columnar path reads the few rows that fall back, and a list of the whole batch cost an int
    object per event."""

    def __init__(self, column: pa.Array) -> None:
        self._column = column

    def __len__(self) -> int:
        return len(self._column)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return self._column[index].to_pylist()
        if not -len(self._column) <= index < len(self._column):
            raise IndexError(index)
        return self._column[index].as_py()

    def __iter__(self) -> Iterator[int]:
        return iter(self._column.to_pylist())


def with_port_and_ingest(rows: pa.RecordBatch, port: str, mode: IngestMode) -> pa.RecordBatch:
    """Source rows as INPUT_DDL rows: the input port and each row's ingest time added (in Python:
    the same columns projected in the JVM cost a pass over every row there)."""
    columns = [
        repeated_text(port, rows.num_rows),
        rows.column("topic"),
        rows.column("partition"),
        rows.column("offset"),
    ]
    columns += [ingest_times(rows, mode), rows.column("value"), rows.column("headers")]
    names = ["port", "topic", "partition", "offset", "ingest_ns", "value", "headers"]
    return pa.RecordBatch.from_arrays(columns, names=names)


def input_events(batch: pa.RecordBatch) -> Iterator[tuple[str, Event, int]]:
    """(port, event, ingest_ns) for each row; the event keeps its raw bytes and gets its origin."""
    columns = batch.to_pydict()
    headers = _header_lists(batch.column(batch.schema.get_field_index("headers")))
    for port, topic, partition, offset, ingest_ns, value, hdrs in zip(
        columns["port"],
        columns["topic"],
        columns["partition"],
        columns["offset"],
        columns["ingest_ns"],
        columns["value"],
        headers,
        strict=True,
    ):
        yield port, make_event(value, hdrs, (topic, partition, offset)), ingest_ns


def _header_lists(column: pa.Array) -> Sequence[Sequence[tuple[str, bytes]]]:
    """Each row's headers as (key, value) pairs; skips Python objects when no row has any."""
    if len(column.values) == 0:
        return [()] * len(column)
    return [[(h["key"], h["value"]) for h in row or ()] for row in column.to_pylist()]


def meta_rows(column: pa.Array) -> tuple[list[int], list[bytes]]:
    """(row index, `meta` header value) of the rows that carry metadata, found in C.

    Most rows of a batch carry no headers, or only the source's resume marker
    on a pull's last record: only the rows that do carry `meta` reach Python."""
    if len(column.values) == 0:
        return [], []
    entries = column.flatten()
    is_meta = pc.equal(entries.field("key"), META_HEADER)
    rows = pc.filter(pc.list_parent_indices(column), is_meta).to_pylist()
    return rows, pc.filter(entries.field("value"), is_meta).to_pylist()


def input_metas(column: pa.Array) -> list[dict[str, Any] | None] | None:
    """Each row's metadata (its `meta` header), or None when no row has any."""
    rows, values = meta_rows(column)
    if not rows:
        return None
    metas: list[dict[str, Any] | None] = [None] * len(column)
    for row, value in zip(rows, values, strict=True):
        metas[row] = _decoded_meta(value) or None
    return metas


def _meta(headers: Sequence[tuple[str, bytes]]) -> dict[str, Any]:
    for name, data in headers:
        if name == META_HEADER:
            return _decoded_meta(data)
    return {}


def _decoded_meta(data: bytes) -> dict[str, Any]:
    """A `meta` header's value as metadata (a record; anything else counts as none)."""
    meta = orjson.loads(data)
    return meta if isinstance(meta, dict) else {}


def meta_headers(metas: Sequence[bytes | None]) -> pa.Array:
    """Packed record headers carrying each row's metadata JSON (null for rows without)."""
    if not any(metas):
        return pa.nulls(len(metas), pa.binary())
    return pa.array([pack_headers([(META_HEADER, m)]) if m else None for m in metas], pa.binary())


def make_event(value: bytes | None, headers: Sequence[tuple[str, bytes]], origin: Origin) -> Event:
    """An input record as an undecoded event (meta from its `meta` header)."""
    return Event(None, _meta(headers), value if value is not None else b"null", origin)


class OutputColumns:
    """Collects (port, event) pairs as the sink's columns; ports without a topic are dropped."""

    def __init__(self, topics: Mapping[str, str]) -> None:
        self.topics = topics
        self.topic: list[str] = []
        self.value: list[bytes] = []
        self.headers: list[bytes | None] = []

    def __len__(self) -> int:
        return len(self.value)

    def add(self, port: str, event: Event, origin: Origin | None = None) -> None:
        topic = self.topics.get(port)
        if topic is None:
            return
        if event.origin is None and origin is not None:
            event.origin = origin
        self.topic.append(topic)
        self.value.append(event.channel_bytes())
        headers = event.headers()
        self.headers.append(pack_headers(headers) if headers else None)

    def add_columns(self, port: str, values: Sequence[bytes], metas: Sequence[bytes | None]) -> None:
        """Rows of one port as channel bytes and packed meta JSON (what batch entry points return)."""
        topic = self.topics.get(port)
        if topic is None or not values:
            return
        self.topic.extend([topic] * len(values))
        self.value.extend(values)
        self.headers.extend(pack_headers([(META_HEADER, m)]) if m else None for m in metas)

    def extend(self, outputs: Sequence[tuple[str, Event]], origin: Origin | None = None) -> None:
        for port, event in outputs:
            self.add(port, event, origin)

    def to_arrow(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self.topic, pa.string()),
                pa.array(self.value, pa.binary()),
                pa.array(self.headers, pa.binary()),
            ],
            schema=OUTPUT_SCHEMA,
        )
        self.topic, self.value, self.headers = [], [], []
        return batch

    def rows(self) -> Iterator[tuple[str, bytes, bytes | None]]:
        """The collected rows as tuples (for the row-based stateful API), then empties itself."""
        rows = zip(self.topic, self.value, self.headers, strict=True)
        self.topic, self.value, self.headers = [], [], []
        return iter(list(rows))
