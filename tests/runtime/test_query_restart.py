"""A pipeline query that dies of a transient Spark failure (a Python worker that missed Spark's
fixed 10 s to connect back, seen on loaded machines) is started again from its checkpoint, a
few times, and nothing is lost or duplicated; any other failure fails the flow."""

from __future__ import annotations

import asyncio
from pathlib import Path

from contraflow.pipeline.spark.run import transient_failure
from contraflow.runtime.flow import QUERY_RESTARTS
from contraflow.runtime.settings import DEFAULT_TRIGGER_MS
from contraflow.spu.protocol import ErrorCode, SpuError
from tests.runtime.harness import files_through_pass, flow_id, read_events, running, wait_for, write_events

CONNECT_BACK = (
    "org.apache.spark.SparkException: Python worker failed to connect back.\n"
    "\tat org.apache.spark.api.python.PythonWorkerFactory.createSimpleWorker(PythonWorkerFactory.scala:250)"
)
CRASHED = "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)"


def worker_traceback_line(err: Exception) -> str:
    """How a Python worker's exception ends the error Spark reports for the query."""
    return f"PythonException: ...\n{type(err).__module__}.{type(err).__qualname__}: {err}\n SQLSTATE: 38000"


def test_only_a_worker_that_did_not_connect_back_or_an_spu_out_of_reach_counts_as_transient() -> None:
    assert transient_failure(CONNECT_BACK)
    # a partition between a Spark task and an SPU outlasting the client's failover window
    assert transient_failure(
        worker_traceback_line(SpuError(ErrorCode.TIMEOUT, "no answer from the SPU within 30.0s"))
    )
    unreachable = SpuError(ErrorCode.CONNECTION_ERROR, "cannot connect to SPU at 10.77.0.3:37897: ")
    assert transient_failure(worker_traceback_line(unreachable))
    assert not transient_failure(
        worker_traceback_line(SpuError(ErrorCode.UNKNOWN_TOPIC, "topic 'x' does not exist"))
    )
    assert transient_failure("Timed out while waiting for the Python worker to connect back after 10000 ms")
    assert not transient_failure(CRASHED)
    assert not transient_failure("UNKNOWN_TRANSACTION: 8 record batches staged, 9 expected")


def test_a_restarted_query_delivers_every_event_once_and_a_fourth_failure_fails_the_flow(
    spark, spu_addr, tmp_path: Path
) -> None:
    sent = write_events(tmp_path / "in.jsonl", 2_000)
    out = tmp_path / "out.jsonl"
    fid = flow_id("restart")
    # `pass` only routes: kept a Spark query, the query this test restarts.
    source = files_through_pass(
        fid, tmp_path / "in.jsonl", out, args='pipelines = {"pass": {"route_in_log": 0}}'
    )

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", source) as runtime:
            flow = runtime.flows[fid]
            await wait_for(lambda: len(read_events(out)) > 0, what="the first events in the sink")
            # No `trigger_ms`, no timers: the runtime's default trigger, not Spark's 10 ms idle polling.
            trigger = flow.pipelines["pass"].query._jsq.streamingQuery().trigger().toString()
            assert trigger == f"ProcessingTimeTrigger({DEFAULT_TRIGGER_MS})", trigger
            first_run = flow.pipelines["pass"].run_id
            await flow._pipeline_failed("pass", CONNECT_BACK)  # what the monitor does with that error
            assert flow.pipelines["pass"].run_id != first_run, "a new run of the query"
            assert flow.state == "running" and flow.query_restarts == {"pass": 1}
            await wait_for(lambda: len(read_events(out)) >= len(sent), what="every event after the restart")
            kinds = [e["kind"] for e in runtime.events.recent if e.get("flow") == fid]
            assert "pipeline_restarted" in kinds and "batch_failed" not in kinds

            flow.query_restarts["pass"] = QUERY_RESTARTS  # restarts used up: the next one fails the flow
            await flow._pipeline_failed("pass", CONNECT_BACK)
            assert flow.state == "failed" and "connect back" in (flow.error or "")

    asyncio.run(scenario())
    assert read_events(out) == sent, "nothing lost or duplicated across the restart"
