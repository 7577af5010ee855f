"""Run one pipeline on an embedded Spark and SPU over a finite input (what `contraflow query` does).

Everything lives in a temporary directory: an SPU with one topic per port,
a local Spark session, and the query's checkpoint. The query runs with
Spark's available-now trigger, so it stops by itself once the input topic is
consumed and every batch it produced is committed to the output topics.

Spark and its JVM write banners and warnings to the process's stdout and
stderr; `quiet_process_output` points both file descriptors at a log file
while Spark starts (children inherit them), so the caller's own output stays
clean.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from contraflow.errors import UserError
from contraflow.lang.graph import PipelineGraph
from contraflow.pipeline.spark.plan import IngestMode
from contraflow.process_output import quiet_process_output

PRODUCE_CHUNK = 1000
TAIL_INTERVAL_S = 0.05  # how often the output topics are read while the query runs (two SPU requests)
__all__ = ["fire_pending", "quiet_process_output", "run_on_spark", "start_local_session"]


Emit = Callable[[str, list[bytes]], None]  # (port, record values): called as results are known


def run_on_spark(
    graph: PipelineGraph,
    lines: Iterable[bytes],
    *,
    ingest: IngestMode,
    emit: Emit,
    work_dir: Path | None = None,
    spark: Future[Any] | None = None,
) -> None:
    """Feed `lines` to the pipeline's `in` port on local Spark; `emit` what every output port emitted,
    in order: first what the query writes (each micro-batch's output once it committed), then what
    the timers still pending at the end of the input fire.

    `spark`: a session already starting (`start_local_session`), else one starts here.
    """
    if "in" not in graph.inputs:
        raise UserError(f"pipeline '{graph.name}' has no 'in' port to read standard input from")
    with contextlib.ExitStack() as stack:
        root = work_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="contraflow-query-")))
        _run(graph, list(lines), ingest, root, spark or start_local_session(root), emit)


def start_local_session(root: Path) -> Future[Any]:
    """The local session a query runs on (`CONTRAFLOW_SPARK_MASTER` or two cores), starting in a thread."""
    from contraflow.spark.session import start_session

    return start_session(os.environ.get("CONTRAFLOW_SPARK_MASTER", "local[2]"), root / "spark")


def _run(
    graph: PipelineGraph,
    lines: list[bytes],
    ingest: IngestMode,
    root: Path,
    starting: Future[Any],
    emit: Emit,
) -> None:
    from contraflow.pipeline.python.state_use import settle_batch_state
    from contraflow.pipeline.spark.query import AVAILABLE_NOW, start_pipeline
    from contraflow.pipeline.spark.state import export_state
    from contraflow.spark.session import activate
    from contraflow.spu.client import SpuClient
    from contraflow.spu.embedded import EmbeddedSpu

    graph = settle_batch_state(graph)  # stateless python::batch nodes leave no state to fire
    with EmbeddedSpu(root / "spu", mode="thread") as spu, SpuClient(spu.addr) as client:
        outputs = {port: f"{graph.name}.{port}" for port in graph.outputs}
        for topic in ["input", *outputs.values()]:
            client.create_topic(topic)
        for start in range(0, len(lines), PRODUCE_CHUNK):
            client.produce("input", 0, lines[start : start + PRODUCE_CHUNK])
        spark = starting.result()
        activate(spark)
        try:
            query = start_pipeline(
                spark,
                graph,
                spu=spu.addr,
                inputs={"in": "input"},
                outputs=outputs,
                checkpoint=str(root / "checkpoint"),
                name=f"query-{graph.name}",
                consumer="query",
                trigger=AVAILABLE_NOW,
                ingest=ingest,
            )
            ports = CommittedTail(client, outputs)
            while not query.awaitTermination(TAIL_INTERVAL_S):  # type: ignore[arg-type]  # float seconds work
                ports.emit_new(emit)  # each micro-batch's output once it committed
            failure = query.exception()
            if failure is not None:
                raise UserError(f"the pipeline's Spark query failed: {failure}")
            ports.emit_new(emit)
            if graph.stateful:
                for port, values in fire_pending(graph, export_state(spark, root / "checkpoint")).items():
                    emit(port, values)
        finally:
            spark.stop()


def fire_pending(graph: PipelineGraph, snapshot: dict[str, Any]) -> dict[str, list[bytes]]:
    """Fire the timers still pending when the input ended, as `run_local` does: port -> values.

    The query stopped with windows or batches open (an available-now run
    has no timers: `PipelinePlan.ticks`); restoring each key's state
    (`snapshot`, from `export_state`) into an executor here and advancing its
    clock to the last deadline emits them exactly as a query that kept
    running would have.
    """
    from contraflow.pipeline.executor import PipelineExecutor
    from contraflow.pipeline.local import finish

    fired: dict[str, list[bytes]] = {}
    for states in snapshot["keys"].values():
        executor = PipelineExecutor(graph)
        executor.restore({**executor.snapshot(), **states})
        for port, event in finish(executor):
            fired.setdefault(port, []).append(event.channel_bytes())
    return fired


class CommittedTail:
    """The output ports' topics (one partition each), read on from where the last read ended:
    a committed batch shows whole or not at all (the sink's SPU transactions)."""

    def __init__(self, client: Any, outputs: dict[str, str]) -> None:
        self.client = client
        self.outputs = outputs
        self.next_offset = dict.fromkeys(outputs, 0)

    def emit_new(self, emit: Emit) -> None:
        for port, topic in self.outputs.items():
            values = self._read_on(port, topic)
            if values:
                emit(port, values)

    def _read_on(self, port: str, topic: str) -> list[bytes]:
        end = self.client.describe_topic(topic).partitions[0].high_watermark
        values: list[bytes] = []
        offset = self.next_offset[port]
        while offset < end:
            fetched = self.client.fetch(topic, 0, offset)
            for batch in fetched.batches:
                values += [bytes(r.value) for r in batch.records(start_offset=offset)]
            offset = fetched.next_offset
        self.next_offset[port] = offset
        return values
