"""One Spark streaming query per pipeline: input channel topics in, one topic per output port out.

The query reads each input port's topic with the `contraflow` source (as a
named consumer, so the runtime's credits throttle it and its offsets are
committed on the SPU), runs the pipeline, and writes every output row to the
topic of its port through the `contraflow` sink (one SPU transaction per
micro-batch). A pipeline's first Python step runs in the sources' read tasks
(`contraflow.spark.transform`): all of a stateless pipeline; a stateful one's
stateless prefix and envelopes, which then go to a `transformWithState` keyed
by the pipeline's partition key.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from contraflow.errors import UserError
from contraflow.lang.graph import PipelineGraph
from contraflow.pipeline.analysis import late_nodes, routing_only
from contraflow.pipeline.python.modules import ship_modules
from contraflow.pipeline.python.state_use import settle_batch_state
from contraflow.pipeline.spark.columns import OUTPUT_DDL
from contraflow.pipeline.spark.envelopes import (
    ENVELOPE_DDL,
    PackEvents,
    UnpackOutputs,
    late_column,
    output_envelope_ddl,
)
from contraflow.pipeline.spark.keying import GroupStreams, independent_groups, stream_keys, stream_number
from contraflow.pipeline.spark.listener import (
    LATE_METRIC,
    OUTPUT_METRIC,
    OUTPUT_RECORDS,
    SHUFFLE_EVENTS,
    SHUFFLE_METRIC,
)
from contraflow.pipeline.spark.partial import PartialAggregation, partial_select
from contraflow.pipeline.spark.plan import DEFAULT_EXECUTOR, IngestMode, PipelinePlan
from contraflow.pipeline.spark.split import split_prefix
from contraflow.pipeline.spark.state import pending_import
from contraflow.pipeline.spark.stateful import INITIAL_STATE_DDL, KEY_COLUMN, PipelineProcessor
from contraflow.pipeline.spark.stateless import StatelessBatches
from contraflow.spark.checkpoint import has_progress, state_partitions
from contraflow.spark.log_ranges import RANGE_SCHEMA
from contraflow.spark.options import RANGE_COLUMNS
from contraflow.spark.pools import pool_name
from contraflow.spark.transform import RowsTransform, transform_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

POOL_PROPERTY = "spark.scheduler.pool"
# Pipelines with timers run a micro-batch per trigger even without input (that is the tick):
# without an interval they would spin.
DEFAULT_TICK = "500 milliseconds"
AVAILABLE_NOW = "availableNow"
# What a source runs in its read task for an input port: a rows transform and the schema it yields.
SourceStep = Callable[[str], tuple[RowsTransform, str]]
_EVENT_PATH = re.compile(r"^event(\.[A-Za-z_][A-Za-z0-9_]*)+$")
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
# The stateful operator's tasks when the read tasks fold a windowed select's events (see
# `contraflow.pipeline.spark.partial`): it then receives about one row per group and read task per
# batch, and each of its tasks costs a fixed part of every batch whatever it holds (a RocksDB
# store loaded and committed, a Python worker's state-API session). w1's 16 group streams over 2
# tasks took 1.7-2.6x the operator time of one task (side by side, see docs/pipelines-spark.md).
FOLDED_STATE_PARTITIONS = 1
# A query takes its shuffle partitions from the session's conf as it starts; a start that needs
# another count sets it for that moment, so starts and reads of the conf wait for each other.
_SHUFFLE_CONF_LOCK = threading.Lock()


def start_pipeline(
    spark: SparkSession,
    graph: PipelineGraph,
    *,
    spu: str,
    inputs: Mapping[str, str | list[str]],
    outputs: Mapping[str, str],
    checkpoint: str,
    name: str,
    consumer: str | Mapping[str, str],
    trigger: str | None = None,
    partition_by: str | None = None,
    flow: str = "",
    ingest: IngestMode = "timestamp",
    pool: str | None = None,
    fold_partials: bool = True,
    timers: bool | None = None,
) -> StreamingQuery:
    """Start `graph` as the streaming query `name` and return it.

    `inputs`/`outputs` map the pipeline's ports to topics (output ports left
    out are discarded); an input port may read a list of topics (fan-in: each
    is its own source with its own consumer offsets; the port sees their
    union). `consumer` is the consumer name the sources commit offsets under:
    one name, or one per input port. `trigger` is a Spark
    processing-time interval ("500 milliseconds") or "availableNow".
    A pipeline with timers (interval windows, batch timeouts) defaults to a
    trigger every DEFAULT_TICK; an available-now run has no timers (see
    `PipelinePlan.ticks`): what they would fire is left in the state. `partition_by` (stateful pipelines) is `event.a.b` to run one ordered
    stream per value of that field, or `partition` for one per input
    partition; by default the whole pipeline is one ordered stream.
    `pool` puts the query's jobs in that FAIR scheduler pool. `fold_partials`
    lets the read tasks pre-aggregate a windowed select's events where that is
    exact (see `contraflow.pipeline.spark.partial`); off, every event crosses.
    """
    _check_ports(graph, inputs, outputs)
    graph = ship_modules(spark, settle_batch_state(graph))  # python::batch nodes that keep no state
    finite = trigger == AVAILABLE_NOW
    plan = PipelinePlan(
        graph, flow, name, dict(inputs), dict(outputs), ingest, spu=spu, finite=finite, timers=timers
    )
    read = _Reader(spark, plan, spu, _consumers(consumer, inputs))
    if graph.stateful:
        rows, state_partitions = _stateful_rows(spark, plan, read, checkpoint, partition_by, fold_partials)
    else:
        rows, state_partitions = _stateless_rows(plan, read), None
    writer = (
        rows.writeStream.format("contraflow")
        .option("spu", spu)
        .option("checkpointLocation", checkpoint)
        .queryName(name)
        .outputMode("append")
    )
    if len(set(outputs.values())) == 1:  # rows without a `topic` column go there
        writer = writer.option("topic", next(iter(outputs.values())))
    if finite:
        writer = writer.trigger(availableNow=True)
    elif trigger or plan.ticks:
        writer = writer.trigger(processingTime=trigger or DEFAULT_TICK)
    return _start_in_pool(spark, writer, pool, state_partitions)


def _check_ports(
    graph: PipelineGraph, inputs: Mapping[str, str | list[str]], outputs: Mapping[str, str]
) -> None:
    if not inputs:
        raise UserError(f"pipeline '{graph.name}' needs at least one input topic")
    empty = sorted(port for port, topics in inputs.items() if not _topics(topics))
    if empty:
        raise UserError(f"pipeline '{graph.name}' input port(s) {empty} have no topic")
    for kind, ports, known in (("input", inputs, graph.inputs), ("output", outputs, graph.outputs)):
        unknown = sorted(set(ports) - set(known))
        if unknown:
            raise UserError(f"pipeline '{graph.name}' has no {kind} port(s) {unknown}; it has {known}")


def _consumers(consumer: str | Mapping[str, str], inputs: Mapping[str, str | list[str]]) -> dict[str, str]:
    if isinstance(consumer, str):
        return {port: consumer for port in inputs}
    missing = sorted(set(inputs) - set(consumer))
    if missing:
        raise UserError(f"no consumer name for input port(s) {missing}")
    return dict(consumer)


# A pipeline's first batch over a backlog, doubled per batch up to the channel's capacity
# (`contraflow.spark.offsets.Ramp`): output starts within one small batch, then batches grow large.
RAMP_RECORDS = 20_000


@dataclass(frozen=True)
class _Reader:
    """Each input port's rows: one `contraflow` source per topic of the port (a fan-in port
    reads several), unioned in the order the topics are listed.

    `rows(step)` has each source run `step(port)` (a transform and its schema)
    on its batches inside its read task (see `contraflow.spark.transform`);
    `rows()` gives the source's own rows.
    """

    spark: SparkSession
    plan: PipelinePlan
    spu: str
    consumers: dict[str, str]

    def rows(
        self, step: SourceStep | None = None, *, columns: str = "all", spread: bool = False
    ) -> dict[str, DataFrame]:
        """`columns`: the source's `columns` option (`ranges`: one row per read task naming its
        offsets, what routing needs). `spread`: read each batch in at least one task per core. Tasks of one partition commit
        their output in any order, so only a consumer that puts rows back in offset order (the
        stateful operator does) may spread."""
        return {
            port: _union_all([self._source(port, topic, step, columns, spread) for topic in _topics(topics)])
            for port, topics in self.plan.inputs.items()
        }

    def _source(
        self, port: str, topic: str, step: SourceStep | None, columns: str, spread: bool
    ) -> DataFrame:
        reader = (
            self.spark.readStream.format("contraflow")
            .option("spu", self.spu)
            .option("topic", topic)
            .option("consumer", self.consumers[port])
            .option("columns", columns)
            .option("rampRecords", str(RAMP_RECORDS))
        )
        if spread:
            reader = reader.option("minPartitions", str(self.spark.sparkContext.defaultParallelism))
        if self.plan.ticks:  # timers in the checkpoint fire at once, not at the next input
            reader = reader.option("batchAtStart", "true")
        if step is not None:
            reader = reader.options(**transform_options(*step(port)))
        return reader.load()


def _topics(topics: str | list[str]) -> list[str]:
    return [topics] if isinstance(topics, str) else list(topics)


def _union_all(frames: list[DataFrame]) -> DataFrame:
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return union


def _stateless_rows(plan: PipelinePlan, read: _Reader) -> DataFrame:
    routes = routing_only(plan.graph)
    if routes is not None:
        return _routed_rows(plan, read.rows(columns=RANGE_COLUMNS), routes)
    return _union_all(list(read.rows(lambda port: (StatelessBatches(plan, port), OUTPUT_DDL)).values()))


def _routed_rows(plan: PipelinePlan, sources: dict[str, DataFrame], routes: dict[str, str]) -> DataFrame:
    """A pipeline that only routes: Spark moves each read task's offset range as one row
    (`contraflow.spark.log_ranges`) from the source to the sink, which fetches the range's log
    batches and stages them as envelopes; no Python stage, no event bytes through the JVM.

    Rows get a `topic` column only when the sink has several topics.
    """
    from pyspark.sql import functions as F

    single = len(set(plan.outputs.values())) == 1
    frames = []
    for port, raw in sources.items():
        target = plan.outputs.get(routes[port])
        if target is None:
            continue
        frames.append(raw if single else raw.select(F.lit(target).alias("topic"), *RANGE_SCHEMA.names))
    if not frames:  # nothing reaches a topic: read (and commit) the input, write nothing
        return next(iter(sources.values())).where("false")
    # The sink's rows are ranges; the events they hold are counted here for the listener.
    return _union_all(frames).observe(OUTPUT_METRIC, F.sum("records").alias(OUTPUT_RECORDS))


def _stateful_rows(
    spark: SparkSession,
    plan: PipelinePlan,
    read: _Reader,
    checkpoint: str,
    partition_by: str | None,
    fold_partials: bool = True,
) -> tuple[DataFrame, int]:
    """Envelopes of each input port (through the stateless prefix, if the graph splits) ->
    `transformWithState` keyed by the partition key -> the sink's rows, and the stateful
    operator's partition count to start the query with. The events the envelopes
    carry are observed (`SHUFFLE_METRIC`): what partial aggregation leaves to cross; so are the
    events each node called late (`LATE_METRIC`)."""
    from pyspark.sql import functions as F

    _check_partition_by(partition_by)
    split = split_prefix(plan.graph)
    prefix = replace(plan, graph=split.prefix) if split is not None else None
    rest = replace(plan, graph=split.rest) if split is not None else plan
    cut_ports = split.cut_ports if split is not None else ()
    late = late_nodes(rest.graph)
    if partition_by is not None and late:
        raise UserError(
            f"partition_by cannot split pipeline '{plan.graph.name}': its {', '.join(late)} follow one"
            " watermark over all its events (a join, or a window with lateness or sessions)"
        )
    partials = (
        _partial_aggregation(rest, cut_ports)
        if fold_partials and partition_by in (None, "partition")
        else None
    )
    state_partitions = _state_partitions(spark, checkpoint, folded=partials is not None)
    select = independent_groups(rest.graph) if partition_by is None else None
    groups = (
        GroupStreams(rest.graph, select, stream_keys(spark, state_partitions)) if select is not None else None
    )
    envelopes = _union_all(
        list(
            read.rows(
                lambda port: (
                    PackEvents(port, plan.ingest, prefix, cut_ports, partition_by, groups, partials),
                    ENVELOPE_DDL,
                ),
                spread=True,
            ).values()
        )
    )
    envelopes = envelopes.observe(SHUFFLE_METRIC, F.sum("event_count").alias(SHUFFLE_EVENTS))
    processor = PipelineProcessor(rest, sorted(rest.new_executor().snapshot()), late)
    initial = _initial_state(spark, checkpoint, groups)
    outputs = envelopes.groupBy(KEY_COLUMN).transformWithState(
        processor,
        output_envelope_ddl(len(late)),
        "Append",
        "ProcessingTime" if rest.ticks else "None",
        initialState=initial.groupBy(KEY_COLUMN) if initial is not None else None,
    )
    if late:  # each node's late events of the batch, by node name (`LATE_METRIC`)
        sums = [F.sum(late_column(i)).alias(node) for i, node in enumerate(late)]
        outputs = outputs.observe(LATE_METRIC, *sums)
    return outputs.mapInArrow(UnpackOutputs(), OUTPUT_DDL), state_partitions


def _partial_aggregation(rest: PipelinePlan, cut_ports: tuple[str, ...]) -> PartialAggregation | None:
    """What the read tasks fold before the shuffle, when the rest after a split allows it (an
    event-path key is left out: it may send a segment's events to different keys; the stateful
    merge folds into the default executor's windows, so another executor class is too)."""
    if not cut_ports or rest.executor_class != DEFAULT_EXECUTOR:
        return None
    select = partial_select(rest.graph)
    return PartialAggregation(rest.graph, select, cut_ports[0]) if select is not None else None


def _check_partition_by(partition_by: str | None) -> None:
    if partition_by is None or partition_by == "partition" or _EVENT_PATH.match(partition_by):
        return
    raise UserError(
        f"partition_by must be 'partition' or a field path like 'event.user', not {partition_by!r}"
    )


def _state_partitions(spark: SparkSession, checkpoint: str, folded: bool) -> int:
    """The partitions of the stateful operator: the checkpoint's (Spark keeps them for good), else
    FOLDED_STATE_PARTITIONS where the read tasks fold events, else the session's setting."""
    recorded = state_partitions(checkpoint)
    if recorded is not None:
        return recorded
    if folded:
        return FOLDED_STATE_PARTITIONS
    with _SHUFFLE_CONF_LOCK:
        return int(spark.conf.get(SHUFFLE_PARTITIONS) or 200)


def _initial_state(spark: SparkSession, checkpoint: str, groups: GroupStreams | None) -> DataFrame | None:
    """An imported snapshot waiting for this checkpoint's first batch, as initial-state rows.

    Group streams are keyed by their number here, which another instance may
    spell otherwise (see `contraflow.pipeline.spark.keying.stream_keys`)."""
    if has_progress(checkpoint):
        return None
    snapshot = pending_import(checkpoint)
    if snapshot is None:
        return None
    rows = [
        (groups.keys[stream_number(key)] if groups is not None else key, states)
        for key, states in snapshot.items()
    ]
    return spark.createDataFrame(rows, INITIAL_STATE_DDL)


def _start_in_pool(
    spark: SparkSession, writer: Any, pool: str | None, state_partitions: int | None
) -> StreamingQuery:
    """Start the query with the FAIR pool set for the thread that starts it (Spark copies it over;
    a priority's name stands for its pool) and, for a stateful query, its operator's partitions."""
    context = spark.sparkContext
    previous = context.getLocalProperty(POOL_PROPERTY)
    if pool is not None:
        context.setLocalProperty(POOL_PROPERTY, pool_name(pool))
    try:
        with _shuffle_partitions(spark, state_partitions):
            query: StreamingQuery = writer.start()
    finally:
        if pool is not None:
            context.setLocalProperty(POOL_PROPERTY, previous)  # type: ignore[arg-type]
    return query


@contextmanager
def _shuffle_partitions(spark: SparkSession, partitions: int | None) -> Iterator[None]:
    """The session's shuffle partitions set to `partitions` (None: left as they are) while a query
    starts: the query copies the session's conf as it starts, and a restart from a checkpoint
    takes the checkpoint's count whatever the conf says."""
    with _SHUFFLE_CONF_LOCK:
        previous = spark.conf.get(SHUFFLE_PARTITIONS)
        if partitions is None or previous == str(partitions):
            yield
            return
        spark.conf.set(SHUFFLE_PARTITIONS, str(partitions))
        try:
            yield
        finally:
            spark.conf.set(SHUFFLE_PARTITIONS, previous)  # type: ignore[arg-type]
