"""The `contraflow` format: SPU topics as a Structured Streaming source and sink.

Spark runs the driver-side methods (offsets, planning, commit) and the
executor-side ones (read, write) in separate Python processes, so every
method talks to the SPU over the network and keeps no shared state.

Source: replayable by offset, admission-controlled by Spark's read limit and by
the credit the runtime publishes, committing consumer offsets on the SPU.
Sink: each task stages its rows on the SPU under (query id, batch id); the
driver commits the batch as one SPU transaction (in a cluster: each partition
once, at its leader), so a batch Spark replays after a crash is a no-op rather
than a duplicate. With `columns = batches` the source yields one row per log
batch and the sink stages such rows as they are (`contraflow.spark.log_envelopes`).
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from contraflow import control
from contraflow.errors import UserError
from contraflow.spark.arrow_log import (
    PAYLOAD_DDL,
    SOURCE_DDL,
    batch_payload,
    coalesce,
    coalesced_rows,
    encode_rows,
    route_rows,
)
from contraflow.spark.commit_retry import commit_offsets_retrying, commit_retrying
from contraflow.spark.log_envelopes import (
    ENVELOPE_COLUMN,
    ENVELOPE_DDL,
    envelope_rows,
    envelope_views,
    envelopes,
    recompressed,
)
from contraflow.spark.log_ranges import (
    RANGE_COLUMN,
    RANGE_DDL,
    RangeFetcher,
    fetch_range,
    range_row,
    ranges_of,
)
from contraflow.spark.offsets import (
    PartitionOffsets,
    Ramp,
    plan_end,
    run_count,
    smallest_budget,
    task_records,
    to_partition_offsets,
    to_spark_offset,
)
from contraflow.spark.options import (
    ALL_COLUMNS,
    BATCH_COLUMNS,
    PAYLOAD_COLUMNS,
    RANGE_COLUMNS,
    SinkOptions,
    SourceOptions,
    source_schema,
)
from contraflow.spark.staging import ConnectionStager, StageRequest
from contraflow.spu.protocol.batch import DecodedBatch
from contraflow.spu.protocol.range_stage import record_count, restamped

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
ARROW_ROWS_PER_BATCH = 65_536
# Log batches at least this big go to Spark as they are; smaller ones are merged first.
ARROW_MIN_ROWS = 2_048
# ...unless a rows transform runs on them: a columnar prefix pays a few ms per call (its expressions,
# the fold, the envelope), 0.8 µs/event more at 5,000 rows than at 65,536 on w1, so it gets them merged.
TRANSFORM_MIN_ROWS = ARROW_ROWS_PER_BATCH
# Stage requests a write task keeps in flight: the next batch is encoded while the SPU stores the last.
STAGES_IN_FLIGHT = 4


def _client(spu: str) -> Any:
    from contraflow.spu.client import SpuClient

    return SpuClient(spu)


class ContraflowDataSource(DataSource):
    """`spark.readStream.format("contraflow")` and `writeStream.format("contraflow")`."""

    @classmethod
    def name(cls) -> str:
        return "contraflow"

    def schema(self) -> str:
        return source_schema(
            self.options,
            {
                ALL_COLUMNS: SOURCE_DDL,
                PAYLOAD_COLUMNS: PAYLOAD_DDL,
                BATCH_COLUMNS: ENVELOPE_DDL,
                RANGE_COLUMNS: RANGE_DDL,
            },
        )

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TopicStreamReader(SourceOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        if not {"value", ENVELOPE_COLUMN, RANGE_COLUMN} & set(schema.fieldNames()):
            raise UserError(
                f"the contraflow sink needs a 'value' column (binary or string), '{ENVELOPE_COLUMN}' "
                f"(log batches) or '{RANGE_COLUMN}' (log ranges)"
            )
        return TopicStreamWriter(SinkOptions.parse(self.options))


# -- source ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Records [start, end) of one partition: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:  # InputPartition keeps a `value`; ours is the range itself
        object.__setattr__(self, "value", (self.partition, self.start, self.end))


def split_ranges(
    topic: str, start: PartitionOffsets, end: PartitionOffsets, max_records: int
) -> list[OffsetRange]:
    """One task per `max_records` of each partition's range, so a single partition still uses every core."""
    ranges = []
    for partition in sorted(end):
        lo, hi = start.get(partition, 0), end[partition]
        for first in range(lo, hi, max_records):
            ranges.append(OffsetRange(topic, partition, first, min(hi, first + max_records)))
    return ranges


class TopicStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads one SPU topic; offsets are {partition: next offset} as Spark JSON.

    Available-now is supported natively: without it Spark learns the run's
    target from one `latestOffset` call, which the ramp (or the runtime's
    credit) caps at a first small batch, and the run ended there."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._spu: Any = None
        # Driver side: this reader lives as long as the query, so the ramp spans its batches.
        self._ramp = Ramp(options.ramp_records) if options.ramp_records else None
        self._batch_due_at_start = options.batch_at_start
        # Available-now: the latest offsets when the run started; no batch reads past them.
        self._target: PartitionOffsets | None = None

    @property
    def spu(self) -> Any:
        if self._spu is None:
            self._spu = _client(self.options.spu)
        return self._spu

    def _partitions(self) -> list[int]:
        described = self.spu.describe_topic(self.options.topic)
        existing = [p.partition for p in described.partitions]
        wanted = self.options.partitions
        if wanted is None:
            return existing
        missing = sorted(set(wanted) - set(existing))
        if missing:
            raise UserError(f"topic {self.options.topic!r} has no partition(s) {missing}")
        return list(wanted)

    def _offsets_at(self, at: Any) -> PartitionOffsets:
        topic = self.options.topic
        result = {}
        for p in self._partitions():
            offset = self.spu.list_offsets(topic, p, at)
            result[p] = offset if offset is not None else self.spu.list_offsets(topic, p, "latest")
        return result

    def initialOffset(self) -> dict[str, int]:
        """Where a new query starts: startingTimestamp, startingOffsets, the consumer's
        committed offsets, or the beginning, in that order of precedence."""
        opts = self.options
        if opts.starting_timestamp is not None:
            return to_spark_offset(self._offsets_at(opts.starting_timestamp))
        if opts.starting.kind == "latest":
            return to_spark_offset(self._offsets_at("latest"))
        earliest = self._offsets_at("earliest")
        if opts.starting.kind == "explicit" and opts.starting.explicit is not None:
            return to_spark_offset(earliest | opts.starting.explicit)
        if opts.consumer:
            for p in earliest:
                committed = self.spu.fetch_offset(opts.consumer, opts.topic, p)
                if committed is not None:
                    earliest[p] = max(earliest[p], committed)
        return to_spark_offset(earliest)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._offsets_at("latest")

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        begin = to_partition_offsets(start)
        latest = self._offsets_at("latest") if self._target is None else self._target
        ramp = self._ramp.budget() if self._ramp is not None else None
        budget = smallest_budget(self._limit_budget(limit, begin, latest), self._credit(), ramp)
        if self._ramp is not None:
            self._ramp.observe(sum(max(0, end - begin.get(p, 0)) for p, end in latest.items()))
        run = run_count(start)
        if self._batch_due_at_start:  # a new run count is a new offset: Spark plans a batch now
            self._batch_due_at_start = False
            run += 1
        return to_spark_offset(plan_end(begin, latest, budget), run)

    def reportLatestOffset(self) -> dict[str, int]:
        return to_spark_offset(self._offsets_at("latest"))

    def _credit(self) -> int | None:
        consumer = self.options.consumer
        return control.credit(consumer, self.options.topic).get(self.spu) if consumer else None

    def _limit_budget(
        self, limit: ReadLimit, begin: PartitionOffsets, latest: PartitionOffsets
    ) -> int | None:
        if isinstance(limit, ReadMaxRows):
            return int(limit.max_rows)
        if isinstance(limit, ReadMaxBytes):
            return int(limit.max_bytes) // max(1, self._average_record_bytes())
        return None

    def _average_record_bytes(self) -> int:
        """Bytes per record over the whole topic: turns a byte limit into a record budget."""
        described = self.spu.describe_topic(self.options.topic)
        size = sum(p.size_bytes for p in described.partitions)
        records = sum(p.log_end_offset - p.log_start_offset for p in described.partitions)
        return size // records if records else 1

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One task per `maxRecordsPerTask` records or `maxBytesPerTask` bytes of each partition,
        and at least `minPartitions` tasks in all, as a multiple of it of equal size
        (`offsets.task_records`): a one-partition channel uses every core to the stage's end."""
        begin, finish = to_partition_offsets(start), to_partition_offsets(end)
        per_task = self.options.max_records_per_task
        if any(finish[p] > begin.get(p, 0) for p in finish):
            per_task = min(per_task, max(1, self.options.max_bytes_per_task // self._average_record_bytes()))
        total = sum(max(0, end_ - begin.get(p, 0)) for p, end_ in finish.items())
        per_task = task_records(total, per_task, self.options.min_partitions)
        return split_ranges(self.options.topic, begin, finish, per_task)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        if self.options.columns == RANGE_COLUMNS:  # by reference: the sink fetches the range
            if partition.end > partition.start:
                yield range_row(
                    self.options.spu, partition.topic, partition.partition, partition.start, partition.end
                )
            return
        client = _client(self.options.spu)
        try:
            if self.options.columns == BATCH_COLUMNS:
                yield from self._envelopes(client, partition)
                return
            transform = self.options.transform
            floor = ARROW_MIN_ROWS if transform is None else TRANSFORM_MIN_ROWS
            rows = self._rows(client, partition, floor)
            yield from transform(rows) if transform is not None else rows
        finally:
            client.close()

    def _rows(self, client: Any, rng: OffsetRange, floor: int) -> Iterator[pa.RecordBatch]:
        """The range's records as Arrow rows of the source's columns, log batches smaller than
        `floor` records merged (up to ARROW_ROWS_PER_BATCH rows)."""
        pieces = (
            (batch, fetched_from, rng.end)
            for fetched_from, batches in self._fetch_range(client, rng)
            for batch in batches
        )
        if self.options.columns != PAYLOAD_COLUMNS:
            return coalesced_rows(rng.topic, rng.partition, pieces, ARROW_ROWS_PER_BATCH, floor)
        payloads = (batch_payload(*piece) for piece in pieces)
        return coalesce((rows for rows in payloads if rows is not None), ARROW_ROWS_PER_BATCH, floor)

    def _envelopes(self, client: Any, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
        """The range's records as log-batch envelopes (`contraflow.spark.log_envelopes`), one Arrow
        batch of them per fetch."""
        for fetched_from, batches in self._fetch_range(client, rng):
            rows = envelope_rows(envelopes(batches, fetched_from, rng.end))
            if rows is not None:
                yield rows

    def _fetch_range(self, client: Any, rng: OffsetRange) -> Iterator[tuple[int, list[DecodedBatch]]]:
        return fetch_range(client, rng.topic, rng.partition, rng.start, rng.end, self.options.fetch_bytes)

    def commit(self, end: dict[str, Any]) -> None:
        consumer = self.options.consumer
        if consumer:
            offsets = to_partition_offsets(end)
            commit_offsets_retrying(
                self.spu, consumer, self.options.topic, offsets, self.options.commit_retry_s
            )

    def stop(self) -> None:
        if self._spu is not None:
            self._spu.close()
            self._spu = None


# -- sink --------------------------------------------------------------------------------------------


@dataclass
class StagedBatches(WriterCommitMessage):
    """What one write task staged on the SPU for a micro-batch."""

    query_id: str
    batches: int
    records: int
    routes: list[tuple[str, int]] = field(default_factory=list)


class TopicStreamWriter(DataSourceStreamArrowWriter):
    """Stages rows per (topic, partition) on the SPU; the driver commits them atomically."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedBatches:
        from pyspark import TaskContext

        task = TaskContext.get()
        if task is None:
            raise RuntimeError("the contraflow sink must run inside a Spark task")
        query_id = task.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = int(task.getLocalProperty(BATCH_ID_PROPERTY) or -1)
        if not query_id or batch_id < 0:
            raise RuntimeError("the contraflow sink only runs in streaming queries (no query or batch id)")
        stager = ConnectionStager(
            lambda: _client(self.options.spu),
            bytes_per_connection=self.options.stage_bytes_per_connection,
            in_flight=STAGES_IN_FLIGHT,
        )
        try:
            return self._stage_all(
                stager, iterator, query_id, batch_id, task.partitionId(), task.attemptNumber()
            )
        finally:
            stager.close()

    def _stage_all(
        self,
        stager: ConnectionStager,
        iterator: Iterator[pa.RecordBatch],
        query_id: str,
        batch_id: int,
        task: int,
        attempt: int,
    ) -> StagedBatches:
        partition_counts: dict[str, int] = {}
        staged = StagedBatches(query_id, 0, 0)
        for rows in iterator:
            if rows.num_rows == 0:
                continue
            for topic in _topics_named(rows, self.options.topic):
                if topic not in partition_counts:
                    partition_counts[topic] = len(stager.client.describe_topic(topic).partitions)
            if ENVELOPE_COLUMN in rows.schema.names:
                self._stage_log_batches(
                    stager, rows, partition_counts, staged, batch_id, task, attempt, _envelopes_in
                )
                continue
            if RANGE_COLUMN in rows.schema.names:
                with RangeFetcher(self.options.fetch_bytes, _client) as fetcher:
                    ranges = functools.partial(self._ranges, stager, fetcher, staged)
                    self._stage_log_batches(
                        stager, rows, partition_counts, staged, batch_id, task, attempt, ranges
                    )
                continue
            for route, routed in route_rows(rows, self.options.topic, partition_counts, task):
                batch = encode_rows(routed, self.options.compression)
                request = StageRequest(query_id, batch_id, route.topic, route.partition, str(task), attempt)
                stager.stage(batch, request, sequence=staged.batches)
                staged.batches += 1
                staged.records += routed.num_rows
                staged.routes.append((route.topic, route.partition))
        stager.finish()
        return staged

    def _stage_log_batches(
        self,
        stager: ConnectionStager,
        rows: pa.RecordBatch,
        partition_counts: dict[str, int],
        staged: StagedBatches,
        batch_id: int,
        task: int,
        attempt: int,
        log_batches: Callable[[pa.Table, StageRequest], Iterator[memoryview]],
    ) -> None:
        """Stage the log batches `log_batches` finds in each route's rows (envelope rows: their
        bytes; range rows: the ranges the SPU did not stage itself, fetched), each as it is but
        for its header (`protocol.range_stage.restamped`)."""
        now_ms = time.time_ns() // 1_000_000
        columns = tuple(n for n in rows.schema.names if n == ENVELOPE_COLUMN or n.startswith("range_"))
        for route, routed in route_rows(rows, self.options.topic, partition_counts, task, columns=columns):
            request = StageRequest(
                staged.query_id, batch_id, route.topic, route.partition, str(task), attempt
            )
            for view in log_batches(routed, request):
                self._stage_envelope(stager, view, request, staged, now_ms)

    def _ranges(
        self,
        stager: ConnectionStager,
        fetcher: RangeFetcher,
        staged: StagedBatches,
        routed: pa.Table,
        request: StageRequest,
    ) -> Iterator[memoryview]:
        """The log batches of the range rows the SPU does not stage itself: by reference where
        the range is on the sink's own SPU and the sink does not compress
        (`ConnectionStager.stage_range`: the events' bytes stay on the SPU), else fetched."""
        for row in range(routed.num_rows):
            one = routed.slice(row, 1)
            if not self._staged_on_spu(stager, one, request, staged):
                yield from fetcher.envelopes(one)

    def _staged_on_spu(
        self, stager: ConnectionStager, row: pa.Table, request: StageRequest, staged: StagedBatches
    ) -> bool:
        """Whether the SPU staged the one range of `row` itself."""
        ((spu, topic, partition, start, end),) = ranges_of(row)
        if self.options.compression or spu != self.options.spu:
            return False
        reply = stager.stage_range(request, (topic, partition), start, end, sequence=staged.batches)
        if reply is None:
            return False
        staged.batches += reply["batches"]
        staged.records += reply["records"]
        staged.routes.extend([(request.topic, request.partition)] * reply["batches"])
        return True

    def _stage_envelope(
        self,
        stager: ConnectionStager,
        view: memoryview,
        request: StageRequest,
        staged: StagedBatches,
        now_ms: int,
    ) -> None:
        """One log batch staged as it is but for its header, or re-encoded for a compressing sink."""
        compression = self.options.compression
        parts = recompressed(view, compression) if compression else restamped(view, now_ms)
        stager.stage(parts, request, sequence=staged.batches)
        staged.batches += 1
        staged.records += record_count(view)
        staged.routes.append((request.topic, request.partition))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = [m for m in messages if isinstance(m, StagedBatches) and m.batches]
        if not staged:
            return
        client = _client(self.options.spu)
        try:
            commit_retrying(
                lambda: client.commit(
                    staged[0].query_id,
                    batchId,
                    expected_batches=sum(m.batches for m in staged),
                    partitions=Counter(route for m in staged for route in m.routes),
                ),
                f"batch {batchId} of query {staged[0].query_id}",
                self.options.commit_retry_s,
            )
        finally:
            client.close()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = [m for m in messages if isinstance(m, StagedBatches)]
        if not staged:
            return
        client = _client(self.options.spu)
        try:
            client.abort(staged[0].query_id, batchId)
        finally:
            client.close()


def _envelopes_in(rows: pa.Table, request: StageRequest) -> Iterator[memoryview]:
    """The log batches of envelope rows, each a view of the column's memory."""
    return iter(envelope_views(rows.column(ENVELOPE_COLUMN).combine_chunks()))


def _topics_named(rows: pa.RecordBatch, default: str | None) -> set[str]:
    names: set[str] = set()
    if "topic" in rows.schema.names:
        names.update(
            t for t in rows.column(rows.schema.names.index("topic")).unique().to_pylist() if t is not None
        )
    if default is not None:
        names.add(default)
    return names
