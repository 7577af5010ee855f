"""A flow's pipeline as one Spark streaming query, and what the runtime learns back from it.

The query reads each input channel topic under the pipeline's consumer name
(so the credit the runtime publishes for that consumer throttles it) and
writes each output port to its channel topic. An input port fed by several
connections (fan-in) reads every one of their channel topics. Its checkpoint
lives at `checkpoint_path(data_dir, flow, pipeline)`: a restart resumes the
same query with its state, and the sink's (query, batch id) transactions make
replayed batches no-ops in the log.

Progress: Spark commits a batch's source offsets on the SPU only when it plans
the next batch, so the committed consumer offset trails. The session's
`QueryListener` reports each finished batch with its sources' end offsets
instead, pushed by Spark rather than polled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contraflow.lang.graph import PipelineGraph
from contraflow.pipeline.spark.listener import BatchProgress, QueryListener, query_listener
from contraflow.pipeline.spark.time_mode import query_has_timers
from contraflow.spark.checkpoint import checkpoint_path, last_committed_ends
from contraflow.spark.session import activate

log = logging.getLogger("contraflow.pipeline.spark.run")


@dataclass(frozen=True)
class PipelineInput:
    """One channel a pipeline reads: the port it feeds, its topic and the consumer name read under."""

    port: str
    topic: str
    consumer: str


def topics_by_port(inputs: list[PipelineInput]) -> dict[str, list[str]]:
    """Port -> its topics, ports and topics in the order given: the query's source order."""
    ports: dict[str, list[str]] = {}
    for inp in inputs:
        ports.setdefault(inp.port, []).append(inp.topic)
    return ports


def by_topic(inputs: list[PipelineInput], source_ends: tuple[dict[int, int], ...]) -> dict[str, int] | None:
    """Spark's per-source end offsets as input topic -> offset, or None if they do not match."""
    topics = [t for port_topics in topics_by_port(inputs).values() for t in port_topics]
    if len(source_ends) != len(topics):
        return None
    # Spark lists a query's sources in plan order: the order the ports' topics were unioned.
    return {topic: min(ends.values()) for topic, ends in zip(topics, source_ends, strict=True) if ends}


@dataclass
class PipelineRun:
    """One running pipeline query with its channels."""

    flow_id: str
    alias: str
    inputs: list[PipelineInput]
    outputs: dict[str, str]
    query: Any
    listener: QueryListener
    run_id: str
    resumed: dict[str, int] = field(default_factory=dict)  # input topic -> end of earlier runs' batches

    @property
    def name(self) -> str:
        return f"{self.flow_id}/{self.alias}"

    def finished(self) -> list[BatchProgress]:
        """Batches finished since the last call, oldest first (non-blocking)."""
        return self.listener.take(self.run_id)

    def consumed(self, batch: BatchProgress) -> dict[str, int] | None:
        """Input topic -> next offset after what `batch` read, or None if its sources cannot be
        matched to topics (Spark left a source out of the plan, e.g. a port routed nowhere)."""
        return by_topic(self.inputs, batch.input_ends)

    def error(self) -> str | None:
        """Why the query died, if it did (as the listener heard it: no JVM call)."""
        return self.listener.failure(self.run_id)

    def stop(self) -> None:
        self.query.stop()
        self.listener.forget(self.run_id)


# Failures of a query's run that say nothing about the pipeline or its data: Spark gives a
# Python worker it starts a fixed 10 s to connect back, which a loaded machine can miss.
TRANSIENT_FAILURES = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
    # an SPU out of reach past the client's failover window (a partition): the batch replays
    "SpuError: cannot connect to SPU at",
    "SpuError: no answer from the SPU within",
)


def transient_failure(error: str) -> bool:
    """Whether a query that died of `error` may simply be started again (from its checkpoint)."""
    return any(sign in error for sign in TRANSIENT_FAILURES)


def start_pipeline_query(
    spark: Any,
    flow_id: str,
    alias: str,
    graph: PipelineGraph,
    *,
    spu: str,
    inputs: list[PipelineInput],
    outputs: dict[str, str],
    data_dir: Path,
    trigger: str | None = None,
    pool: str | None = None,
    timers: bool | None = None,
) -> PipelineRun:
    """Start `graph` as a Spark query from its input channels to its output channels, checkpointed
    under `data_dir` (`contraflow.spark.checkpoint.checkpoint_path`),
    starting a micro-batch every `trigger` (Spark's processing-time interval; None: back to back),
    its jobs in the FAIR scheduler `pool` (the flow's priority, `contraflow.spark.pools`), with
    timers or not as the checkpoint was first run (`timers`, else `time_mode.query_has_timers`)."""
    from contraflow.pipeline.spark.query import start_pipeline

    activate(spark)
    listener = query_listener(spark)  # before the start: the first batch must not go unheard
    checkpoint = checkpoint_path(data_dir, flow_id, alias)
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    resumed = by_topic(inputs, last_committed_ends(checkpoint)) or {}  # read before new batches run
    consumers = {inp.port: inp.consumer for inp in inputs}
    query = start_pipeline(
        spark,
        graph,
        spu=spu,
        inputs=dict(topics_by_port(inputs)),
        outputs=outputs,
        checkpoint=str(checkpoint),
        name=f"{flow_id}.{alias}",
        consumer=consumers,
        flow=flow_id,
        trigger=trigger,
        pool=pool,
        timers=query_has_timers(checkpoint, graph) if timers is None else timers,
    )
    return PipelineRun(flow_id, alias, inputs, outputs, query, listener, str(query.runId), resumed)
