"""Envelopes: many pipeline events in one Spark row, for the stateful operator.

PySpark's row-based `transformWithState` turns every input cell into a Python
object and every output row into a dict, which costs more than the pipeline
itself. So rows travel to it in envelopes instead: one row per input Arrow
batch (and partition key), holding the batch's events as an Arrow IPC stream,
and its outputs leave the same way. Spark then moves a handful of large rows
per micro-batch and the Python side decodes each envelope in one call.

`PackEvents` (run per input port in the source's read task, see
`contraflow.spark.transform`) builds the envelopes. If the
pipeline splits (see `contraflow.pipeline.spark.split`) it first runs the stateless
prefix there, in parallel over the input partitions, and envelopes what the
prefix emitted: events for the stateful rest (`in:` + cut port) and events
already final (`out:` + output port), in emission order, each with the offset
and ingest time of the input it came from. With `partials` (see
`contraflow.pipeline.spark.partial`) the events for a windowed select are
folded per group first: the envelope then carries one head per segment, with
the segment in column `partial`. `UnpackOutputs` turns the stateful
operator's output envelopes back into the sink's rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from contraflow.events import encode_value
from contraflow.pipeline.columnar import ColumnarTraced
from contraflow.pipeline.executor import Traced, no_cyclic_gc
from contraflow.pipeline.item import UNDECODED
from contraflow.pipeline.spark.columns import (
    OUTPUT_SCHEMA,
    IngestTimes,
    ingest_times,
    input_metas,
    make_event,
    meta_rows,
)
from contraflow.pipeline.spark.keying import GroupStreams
from contraflow.pipeline.spark.partial import PARTIAL_FIELD, PLACE_FIELD, PartialAggregation
from contraflow.pipeline.spark.plan import IngestMode, PipelinePlan, failure_event
from contraflow.spark.arrow_log import repeated_text

ENVELOPE_DDL = "key string, port string, topic string, partition int, first_offset bigint, events binary, event_count int"
ENVELOPE_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("port", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("first_offset", pa.int64()),
        ("events", pa.binary()),
        ("event_count", pa.int32()),  # the rows in `events`: observed as the events crossing the shuffle
    ]
)
EVENTS_SCHEMA = pa.schema(
    [
        ("target", pa.string()),
        ("offset", pa.int64()),
        ("ingest_ns", pa.int64()),
        ("value", pa.binary()),
        ("meta", pa.binary()),
    ]
)
OUTPUT_ENVELOPE_DDL = "events binary"


def late_column(index: int) -> str:
    """The output envelope's column counting the events the `index`th late-calling node (see
    `analysis.late_nodes`) called late in the call: the query observes their sums."""
    return f"late_{index}"


def output_envelope_ddl(late_nodes: int) -> str:
    """The stateful operator's output rows: the events, and one late count per late-calling node."""
    return ", ".join([OUTPUT_ENVELOPE_DDL, *(f"{late_column(i)} bigint" for i in range(late_nodes))])


REST_INPUT = "in:"
FINAL_OUTPUT = "out:"


def to_ipc(batch: pa.RecordBatch) -> bytes:
    """One record batch as an Arrow IPC stream (what an envelope carries)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


@dataclass(frozen=True)
class PackEvents:
    """The rows transform that envelopes one input port's rows (picklable: plain data only).

    `prefix` is the plan of the split pipeline's stateless prefix (None: the
    whole graph is stateful and events go into envelopes untouched);
    `partition_by` picks the key as in `start_pipeline`; without it, `groups`
    (if the pipeline's groups are independent, see `contraflow.pipeline.spark.keying`)
    keys each event by its group's stream.
    """

    port: str
    ingest: IngestMode
    prefix: PipelinePlan | None
    cut_ports: tuple[str, ...]
    partition_by: str | None
    groups: GroupStreams | None = None
    partials: PartialAggregation | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if self.prefix is not None:
            self.prefix.apply_signals(self.prefix.executor())
        for rows in batches:
            if rows.num_rows:
                # The collector stays off until the batch's decoded events are gone (see
                # `no_cyclic_gc`): back on while they lived, its first pass scanned them all.
                with no_cyclic_gc():
                    envelopes = self._envelopes(rows)
                yield envelopes

    def _envelopes(self, rows: pa.RecordBatch) -> pa.RecordBatch:
        events, sources = self._events(rows)
        topic = rows.column("topic")[0].as_py()
        partition = rows.column("partition")[0].as_py()
        first = rows.column("offset")[0].as_py()
        keyed = self._split_by_key(rows, events, sources)
        return pa.RecordBatch.from_pylist(
            [
                {
                    "key": key,
                    "port": self.port,
                    "topic": topic,
                    "partition": partition,
                    "first_offset": first,
                    "events": to_ipc(part),
                    "event_count": part.num_rows,
                }
                for key, part in keyed
            ],
            schema=ENVELOPE_SCHEMA,
        )

    def _events(self, rows: pa.RecordBatch) -> tuple[pa.RecordBatch, Traced | None]:
        """The events to envelope and, after a prefix, what it emitted (with the input row each
        output came from)."""
        offsets = rows.column("offset")
        ingest = ingest_times(rows, self.ingest)
        if self.prefix is None:
            count = rows.num_rows
            columns = [
                repeated_text(REST_INPUT + self.port, count),
                offsets,
                ingest,
                rows.column("value"),
                meta_bytes(rows),
            ]
            return pa.RecordBatch.from_arrays(columns, schema=EVENTS_SCHEMA), None
        traced = self._run_prefix(rows, ingest)
        folded: pa.Array | None = None
        if self.partials is not None:
            traced, folded = self.partials.collapse(traced, ingest)
        targets, sources, values, metas = self._output_columns(traced)
        columns = [targets, offsets.take(sources), ingest.take(sources), values, metas]
        if folded is None:
            return pa.RecordBatch.from_arrays(columns, schema=EVENTS_SCHEMA), traced
        columns += [folded, pa.array(range(len(folded)), pa.int32())]
        schema = EVENTS_SCHEMA.append(PARTIAL_FIELD).append(PLACE_FIELD)
        return pa.RecordBatch.from_arrays(columns, schema=schema), traced

    def _output_columns(self, traced: Traced) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
        """The prefix's outputs as the envelope's `target`, input row, `value` and `meta` columns
        (after a columnar prefix its own columns, without a list per output)."""
        cut = set(self.cut_ports)
        if isinstance(traced, ColumnarTraced) and traced.outputs is not None:
            outputs = traced.outputs
            ports = pc.dictionary_encode(outputs.column("port"))
            names = [REST_INPUT + p if p in cut else FINAL_OUTPUT + p for p in ports.dictionary.to_pylist()]
            targets = pa.array(names, pa.string()).take(ports.indices)
            return targets, outputs.column("source"), outputs.column("value"), outputs.column("meta")
        targets = [REST_INPUT + p if p in cut else FINAL_OUTPUT + p for p in traced.ports]
        return (
            pa.array(targets, pa.string()),
            pa.array(traced.sources, pa.int64()),
            pa.array(traced.values, pa.binary()),
            pa.array(traced.metas, pa.binary()),
        )

    def _run_prefix(self, rows: pa.RecordBatch, ingest: pa.Array) -> Traced:
        """The prefix over the batch: columnar when it vectorizes (`contraflow.pipeline.columnar`,
        rows it cannot answer going through the executor), else event by event."""
        assert self.prefix is not None
        executor = self.prefix.executor()
        metas = input_metas(rows.column("headers"))
        columnar = self.prefix.columnar(self.port, self.partials.reads if self.partials is not None else ())
        try:
            if columnar is not None:  # it reads the times of the rows that fall back, only
                return columnar.run(executor, rows.column("value"), metas, IngestTimes(ingest))
            values = rows.column("value").to_pylist()
            return executor.process_values_traced(self.port, values, metas, ingest.to_pylist())
        except Exception:  # the executor keeps bad events off this path; never fail the query on one
            return _one_by_one(self.prefix, executor, self.port, rows, ingest.to_pylist())

    def _split_by_key(
        self, rows: pa.RecordBatch, events: pa.RecordBatch, traced: Traced | None
    ) -> list[tuple[str, pa.RecordBatch]]:
        """The events grouped by partition key, order kept within each group."""
        by = self.partition_by
        if by is None and self.groups is not None:
            return _by_key(events, self._group_streams(events, traced))
        if by is None:
            return [("", events)]
        if by == "partition":
            # Not the topic's name: state keyed by (port, partition) moves to an instance whose
            # channels are other topics.
            return [(f"{self.port}/{rows.column('partition')[0]}", events)]
        keys = event_keys(rows.column("value").to_pylist(), by)
        if traced is not None:  # each output is keyed like the input it came from
            keys = [keys[i] for i in traced.sources]
        return _by_key(events, keys)

    def _group_streams(self, events: pa.RecordBatch, traced: Traced | None) -> list[str] | pa.Array:
        """The stream of each event for the stateful part; events already final go with the first.

        After a columnar prefix the group key comes from its columns where they answer it (for the
        whole batch: one stream lookup per distinct group text, no per-row Python); otherwise the
        events are read as the prefix left them (no second parse), or parsed again."""
        assert self.groups is not None
        if isinstance(traced, ColumnarTraced):
            streams = self._streams_from_columns(events, traced)
            if streams is not None:
                return streams
        targets = events.column("target").to_pylist()
        texts = (
            traced.texts_of(self.groups.group_expr)
            if isinstance(traced, ColumnarTraced)
            else [None] * len(targets)
        )
        items = traced.items if traced is not None and len(traced.items) == len(targets) else None
        values = metas = None
        if items is None:
            values, metas = events.column("value").to_pylist(), events.column("meta").to_pylist()
        stream_of_item, stream_of_group, final = (
            self.groups.stream_of_item,
            self.groups.stream_of_group,
            self.groups.first,
        )
        by_text: dict[str, str] = {}
        streams = []
        for row, (target, text) in enumerate(zip(targets, texts, strict=True)):
            if not target.startswith(REST_INPUT):
                streams.append(final)
            elif text is not None:
                stream = by_text.get(text)
                if stream is None:
                    stream = by_text[text] = stream_of_group(orjson.loads(text))
                streams.append(stream)
            elif items is not None:
                streams.append(stream_of_item(items[row]))
            else:
                assert values is not None and metas is not None
                meta = orjson.loads(metas[row]) if metas[row] else None
                streams.append(stream_of_item([UNDECODED, meta, values[row]]))
        return streams

    def _streams_from_columns(self, events: pa.RecordBatch, traced: ColumnarTraced) -> pa.Array | None:
        """Each event's stream from the group texts of the prefix's columns; None when they do not
        answer every event for the stateful part."""
        assert self.groups is not None
        texts = traced.text_column(self.groups.group_expr)
        rest = pc.starts_with(events.column("target"), REST_INPUT)
        if texts is None or pc.any(pc.and_(rest, texts.is_null())).as_py():
            return None
        encoded = pc.dictionary_encode(pc.if_else(rest, texts, ""))  # "": final, never a JSON text
        streams = [
            self.groups.stream_of_group(orjson.loads(text)) if text else self.groups.first
            for text in encoded.dictionary.to_pylist()
        ]
        return pa.array(streams, pa.string()).take(encoded.indices)


def _by_key(events: pa.RecordBatch, keys: list[str] | pa.Array) -> list[tuple[str, pa.RecordBatch]]:
    """The events grouped by key (in order of first appearance), order kept within each group."""
    key_column = keys if isinstance(keys, pa.Array) else pa.array(keys, pa.string())
    return [(key, events.filter(pc.equal(key_column, key))) for key in pc.unique(key_column).to_pylist()]


def _one_by_one(
    plan: PipelinePlan, executor: Any, port: str, rows: pa.RecordBatch, times: list[int]
) -> Traced:
    """The prefix one event at a time, an exception becoming that event's `err` output."""
    traced = Traced([], [], [], [])
    topic = rows.column("topic")[0].as_py()
    partition = rows.column("partition")[0].as_py()
    headers = rows.column("headers").to_pylist()
    for index, (value, offset) in enumerate(
        zip(rows.column("value").to_pylist(), rows.column("offset").to_pylist(), strict=True)
    ):
        hdrs = [(h["key"], h["value"]) for h in headers[index] or ()]
        event = make_event(value, hdrs, (topic, partition, offset))
        try:
            outputs = executor.process(port, event, times[index])
        except Exception as error:
            outputs = [("err", failure_event(error, event))]
        for out_port, out in outputs:
            traced.ports.append(out_port)
            traced.values.append(out.channel_bytes())
            traced.metas.append(encode_value(out.meta) if out.meta else None)
            traced.sources.append(index)
    return traced


def event_keys(values: Sequence[bytes | None], path: str) -> list[str]:
    """The partition key of each event: the text of field `path` (`event.a.b`), "" where absent."""
    fields = path.split(".")[1:]
    keys = []
    for value in values:
        try:
            found: Any = orjson.loads(value) if value is not None else None
        except orjson.JSONDecodeError:
            found = None
        for name in fields:
            found = found.get(name) if isinstance(found, dict) else None
        keys.append(
            "" if found is None else found if isinstance(found, str) else orjson.dumps(found).decode()
        )
    return keys


def meta_bytes(rows: pa.RecordBatch) -> pa.Array:
    """Each row's `meta` header value (JSON bytes), null where it has none."""
    found, values = meta_rows(rows.column("headers"))
    if not found:
        return pa.nulls(rows.num_rows, pa.binary())
    metas: list[bytes | None] = [None] * rows.num_rows
    for row, value in zip(found, values, strict=True):
        metas[row] = value
    return pa.array(metas, pa.binary())


class UnpackOutputs:
    """The `mapInArrow` after the stateful operator: output envelopes back into the sink's rows."""

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for data in batch.column(0).to_pylist():
                if data:
                    for rows in from_ipc(data).to_batches():
                        yield rows.cast(OUTPUT_SCHEMA) if rows.schema != OUTPUT_SCHEMA else rows
