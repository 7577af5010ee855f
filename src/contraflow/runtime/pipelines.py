"""A flow's pipeline as one Spark streaming query, and what the runtime reads back from it.

The query reads each input channel topic under the pipeline's consumer name
(so the credit the runtime publishes for that consumer throttles it) and
writes each output port to its channel topic. Its checkpoint lives under
`{data_dir}/checkpoints/{flow}/{pipeline}`: a restart resumes the same query
with its state, and the sink's (query, batch id) transactions make replayed
batches no-ops in the log.

Progress: Spark commits a batch's source offsets on the SPU only when it plans
the next batch, so the committed consumer offset trails. The runtime (the Spark
driver) reads each finished batch's end offsets from `lastProgress` instead.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from contraflow.lang.graph import PipelineGraph
from contraflow.runtime.settings import PipelineSettings

log = logging.getLogger("contraflow.runtime.pipelines")


class BatchStats(NamedTuple):
    """One finished micro-batch."""

    batch_id: int
    seconds: float
    rows_in: int
    rows_out: int


@dataclass
class PipelineRun:
    """One running pipeline query with its channels: inputs by port (topic, consumer), outputs by port."""

    flow_id: str
    alias: str
    inputs: dict[str, tuple[str, str]]
    outputs: dict[str, str]
    query: Any
    _last_batch: int = field(default=-1)

    @property
    def name(self) -> str:
        return f"{self.flow_id}/{self.alias}"

    def progress(self) -> tuple[dict[str, int], BatchStats | None]:
        """What the last finished micro-batch tells (blocking: one call into the JVM per tick).

        (input topic -> offset every record below which a finished batch
        processed, stats of that batch if it is new since the last call).
        """
        progress = self.query.lastProgress
        if not progress:
            return {}, None
        return self._consumed(progress), self._batch_stats(progress)

    def _consumed(self, progress: dict[str, Any]) -> dict[str, int]:
        sources = progress.get("sources") or []
        if len(sources) != len(self.inputs):
            return {}
        consumed: dict[str, int] = {}
        # Spark lists a query's sources in plan order, which follows the order inputs were unioned.
        for (topic, _), source in zip(self.inputs.values(), sources, strict=True):
            end = source.get("endOffset")
            if isinstance(end, str):
                end = json.loads(end)
            if isinstance(end, dict) and end:
                consumed[topic] = int(min(end.values()))
        return consumed

    def _batch_stats(self, progress: dict[str, Any]) -> BatchStats | None:
        if progress.get("batchId", -1) == self._last_batch:
            return None
        self._last_batch = int(progress["batchId"])
        duration = (progress.get("durationMs") or {}).get("triggerExecution", 0) / 1000
        rows_out = int((progress.get("sink") or {}).get("numOutputRows", -1))
        return BatchStats(self._last_batch, duration, int(progress.get("numInputRows", 0)), max(rows_out, 0))

    def error(self) -> str | None:
        """Why the query died, if it did."""
        exc = self.query.exception()
        return None if exc is None else str(exc)

    def stop(self) -> None:
        self.query.stop()


def start_pipeline_query(
    spark: Any,
    flow_id: str,
    alias: str,
    graph: PipelineGraph,
    *,
    spu: str,
    inputs: dict[str, tuple[str, str]],
    outputs: dict[str, str],
    checkpoint_root: Path,
    settings: PipelineSettings | None = None,
) -> PipelineRun:
    """Start `graph` as a Spark query from its input channels to its output channels,
    with the trigger `settings` ask for (by default: every 100 ms, pipelines with timers every tick)."""
    settings = settings or PipelineSettings()
    _activate(spark)
    checkpoint = checkpoint_root / flow_id / alias
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    name = f"{flow_id}.{alias}"
    try:
        from contraflow.pipeline.spark_query import start_pipeline
    except ImportError:
        trigger = settings.trigger(timers=False)
        query = _passthrough(spark, spu, inputs, outputs, str(checkpoint), name, trigger)
    else:
        from contraflow.pipeline.spark_plan import has_timers

        trigger = settings.trigger(timers=has_timers(graph))
        query = start_pipeline(
            spark,
            graph,
            spu=spu,
            inputs={port: topic for port, (topic, _) in inputs.items()},
            outputs=outputs,
            checkpoint=str(checkpoint),
            name=name,
            consumer={port: consumer for port, (_, consumer) in inputs.items()},
            flow=flow_id,
            trigger=trigger,
        )
    return PipelineRun(flow_id, alias, inputs, outputs, query)


def _activate(spark: Any) -> None:
    """Make `spark` the JVM's active session on this thread: Spark looks Python data sources up
    through the thread's active session, and the runtime starts queries from worker threads."""
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)


def _passthrough(
    spark: Any,
    spu: str,
    inputs: dict[str, tuple[str, str]],
    outputs: dict[str, str],
    checkpoint: str,
    name: str,
    trigger: str | None,
) -> Any:
    """Until the pipeline executor is merged: every input event goes to `out` unchanged."""
    streams = []
    for topic, consumer in inputs.values():
        reader = spark.readStream.format("contraflow").option("spu", spu).option("topic", topic)
        streams.append(reader.option("consumer", consumer).load().select("value", "headers"))
    frame = streams[0]
    for other in streams[1:]:
        frame = frame.unionByName(other)
    out_topic = outputs.get("out")
    if out_topic is None:
        raise ValueError(f"pipeline {name} has no `out` channel to pass events to")
    writer = (
        frame.writeStream.format("contraflow")
        .queryName(name)
        .option("spu", spu)
        .option("topic", out_topic)
        .option("checkpointLocation", checkpoint)
    )
    return (writer.trigger(processingTime=trigger) if trigger else writer).start()
