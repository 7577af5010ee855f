"""Stateless pipelines: the node graph as one function over Arrow batches (`mapInArrow`).

No state crosses a batch, so Spark may run it on every input partition in
parallel and in any order; only the order within a partition is kept, which is
all a stateless pipeline can observe.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from contraflow.pipeline.spark_columns import OutputColumns, input_events
from contraflow.pipeline.spark_plan import PipelinePlan, failure_event


class StatelessBatches:
    """The `mapInArrow` function of a stateless pipeline (picklable: it only holds the plan)."""

    def __init__(self, plan: PipelinePlan) -> None:
        self.plan = plan

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        executor = self.plan.executor()
        out = OutputColumns(self.plan.outputs)
        for batch in batches:
            for port, event, ingest_ns in input_events(batch):
                origin = event.origin
                try:
                    outputs = executor.process(port, event, ingest_ns)
                except Exception as error:  # the executor's own err events cover scripts and codecs
                    outputs = [("err", failure_event(error, event))]
                out.extend(outputs, origin)
            if len(out):
                yield out.to_arrow()
