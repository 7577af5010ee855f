"""A split stateful pipeline's two stages in one process, without Spark, for the partial-aggregation tests.

The read task's `PackEvents` envelopes each source batch (folding segments
or not), `arrival_order` puts one micro-batch's envelopes in order, and a
`PipelineProcessor` runs them with its executor, as `transformWithState`
would for the one key. Only Spark's shuffle and state store are left out:
`restart` stands in for the store (the state goes through JSON into a fresh
executor, as after a restart or `contraflow state import`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import Row

from contraflow.lang.graph import PipelineGraph
from contraflow.pipeline.spark.columns import OutputColumns
from contraflow.pipeline.spark.envelopes import PackEvents
from contraflow.pipeline.spark.keying import GroupStreams, independent_groups
from contraflow.pipeline.spark.partial import PartialAggregation, partial_select
from contraflow.pipeline.spark.plan import PipelinePlan
from contraflow.pipeline.spark.split import split_prefix
from contraflow.pipeline.spark.stateful import PipelineProcessor, arrival_order
from contraflow.spark.arrow_log import SOURCE_SCHEMA


@dataclass
class SourceBatch:
    """What one read task reads of one partition: values (JSON-able, or bytes as they are) and the
    log timestamp (ms) of each."""

    partition: int
    first_offset: int
    values: list[Any]
    timestamps_ms: list[int]

    def rows(self, topic: str) -> pa.RecordBatch:
        count = len(self.values)
        return pa.RecordBatch.from_pydict(
            {
                "topic": [topic] * count,
                "partition": [self.partition] * count,
                "offset": list(range(self.first_offset, self.first_offset + count)),
                "timestamp": [ms * 1000 for ms in self.timestamps_ms],
                "key": [None] * count,
                "value": [v if isinstance(v, bytes) else orjson.dumps(v) for v in self.values],
                "headers": [[] for _ in range(count)],
            },
            schema=SOURCE_SCHEMA,
        )


@dataclass
class TwoStages:
    """`graph` split at its stateless prefix; `fold` turns partial aggregation on; `streams` keys
    the stateful stage by group stream where the query would (each key its own executor)."""

    graph: PipelineGraph
    fold: bool
    streams: bool = False
    outputs: list[tuple[str, Any]] = field(default_factory=list)  # (topic, decoded value) in order
    crossed: int = 0  # rows that crossed to the stateful stage

    def __post_init__(self) -> None:
        split = split_prefix(self.graph)
        assert split is not None, "the pipeline has a stateless prefix"
        plan = PipelinePlan(self.graph, "f", "p", {"in": "t"}, {"out": "o", "err": "e"})
        self.rest = replace(plan, graph=split.rest)
        select = partial_select(split.rest)
        self.partials = (
            PartialAggregation(split.rest, select, split.cut_ports[0]) if self.fold and select else None
        )
        independent = independent_groups(split.rest) if self.streams else None
        groups = GroupStreams(split.rest, independent) if independent is not None else None
        self.pack = PackEvents(
            "in", "timestamp", replace(plan, graph=split.prefix), split.cut_ports, None, groups, self.partials
        )
        self.processor = PipelineProcessor(self.rest, sorted(self.rest.new_executor().snapshot()))
        self.executors: dict[str, Any] = {}

    @property
    def folds(self) -> bool:
        return self.partials is not None

    def micro_batch(self, batches: list[SourceBatch]) -> None:
        """One micro-batch: each source batch through its read task, then the stateful call."""
        keyed: dict[str, list[Row]] = {}
        for batch in batches:
            for row in self.pack._envelopes(batch.rows("t")).to_pylist():
                keyed.setdefault(row["key"], []).append(Row(**row))
        for key, rows in keyed.items():
            self.run_key(key, rows)

    def run_key(self, key: str, rows: list[Row]) -> None:
        """The stateful call for one key's envelopes."""
        events = arrival_order(rows)
        self.crossed += events.num_rows
        out = OutputColumns(self.rest.outputs)
        self.processor.executor = self.executors.get(key) or self.executors.setdefault(
            key, self.rest.new_executor()
        )
        self.processor._run(events, out, self.processor._run_events)
        self.outputs += [(t, orjson.loads(v)) for t, v, _ in out.rows()]

    def by_topic(self) -> dict[str, list[Any]]:
        """The outputs of each topic, in order."""
        topics: dict[str, list[Any]] = {}
        for topic, value in self.outputs:
            topics.setdefault(topic, []).append(value)
        return topics

    def snapshot(self) -> bytes:
        """Every key's state (as a state store keeps it: JSON)."""
        states = {key: executor.snapshot() for key, executor in self.executors.items()}
        return orjson.dumps(states, option=orjson.OPT_SORT_KEYS)

    def restart(self) -> None:
        """Continue in fresh executors from the state as a state store keeps it."""
        for key, state in orjson.loads(self.snapshot()).items():
            self.executors[key] = self.rest.new_executor()
            self.executors[key].restore(state)
