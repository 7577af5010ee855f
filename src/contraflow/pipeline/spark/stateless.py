"""Stateless pipelines: the node graph as one function over Arrow batches (run in the source's read task).

No state crosses a batch, so Spark may run it on every input partition in
parallel and in any order; only the order within a partition is kept, which is
all a stateless pipeline can observe.

A pipeline that vectorizes from the port runs columnar over the whole batch
(`contraflow.pipeline.columnar`: Arrow in, Arrow out, rows the columns cannot
answer exactly through the executor). Otherwise batches go through the
executor's batch entry point (`process_values`: a list of channel values in,
per-port value and metadata columns out), so there is no Python object per
event beyond its bytes. An output column that *is* the input list (a
pipeline that only routes) reuses the input Arrow column as is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from contraflow.pipeline.spark.columns import (
    OUTPUT_SCHEMA,
    OutputColumns,
    input_events,
    input_metas,
    meta_headers,
    with_port_and_ingest,
)
from contraflow.pipeline.spark.plan import PipelinePlan, failure_event
from contraflow.spark.arrow_log import repeated_text


class StatelessBatches:
    """The rows transform of a stateless pipeline over one input port's source rows
    (picklable: it only holds the plan and the port)."""

    def __init__(self, plan: PipelinePlan, port: str) -> None:
        self.plan = plan
        self.port = port

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        executor = self.plan.executor()
        self.plan.apply_signals(executor)
        for batch in batches:
            if batch.num_rows:
                yield from self._run(
                    executor, self.port, with_port_and_ingest(batch, self.port, self.plan.ingest)
                )

    def _run(self, executor: Any, port: str, rows: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        value_column = rows.column(rows.schema.get_field_index("value"))
        metas = input_metas(rows.column(rows.schema.get_field_index("headers")))
        ingest = rows.column(rows.schema.get_field_index("ingest_ns")).to_pylist()
        try:
            results = self._process(executor, port, value_column, metas, ingest)
        except Exception:  # the executor keeps bad events off this path; never fail the query on one
            yield from event_by_event(self.plan, executor, rows)
            return
        for out_port, (column, out_metas) in results.items():
            topic = self.plan.outputs.get(out_port)
            if topic is None or not len(column):
                continue
            columns = [repeated_text(topic, len(column)), column, meta_headers(out_metas)]
            yield pa.RecordBatch.from_arrays(columns, schema=OUTPUT_SCHEMA)

    def _process(
        self,
        executor: Any,
        port: str,
        column: pa.Array,
        metas: list[dict[str, Any] | None] | None,
        ingest: list[int],
    ) -> dict[str, tuple[pa.Array, list[bytes | None]]]:
        """Output port -> (values, packed metas): columnar when the pipeline vectorizes from `port`.

        An output column that *is* the input list (a pipeline that only routes) reuses the input
        Arrow column as is."""
        columnar = self.plan.columnar(port)
        if columnar is not None:
            return columnar.run(executor, column, metas, ingest).by_port()
        values = column.to_pylist()
        results = executor.process_values(port, values, metas, ingest)
        return {
            out_port: (column if out_values is values else pa.array(out_values, pa.binary()), out_metas)
            for out_port, (out_values, out_metas) in results.items()
        }


def event_by_event(plan: PipelinePlan, executor: Any, rows: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """Run rows one event at a time, turning any exception into that event's `err` record."""
    out = OutputColumns(plan.outputs)
    for port, event, ingest_ns in input_events(rows):
        origin = event.origin
        try:
            outputs = executor.process(port, event, ingest_ns)
        except Exception as error:
            outputs = [("err", failure_event(error, event))]
        out.extend(outputs, origin)
    if len(out):
        yield out.to_arrow()
