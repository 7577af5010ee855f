"""The runtime's Spark session is awaited only where a query starts (`runtime.spark_on_demand`).

In process, against the session's SPU: the start is a future the test completes by hand, so a
deployment can be seen waiting for it. `contraflow run` itself (no Spark ever started, a start
that fails, a stop while the JVM starts) is in tests/e2e/test_run_startup.py.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from contraflow.api.facade import SparkUnavailable
from contraflow.runtime.runtime import Runtime
from contraflow.runtime.spark_on_demand import SparkOnDemand
from tests.runtime.harness import files_through_pass, flow_id, read_events, wait_for, write_events

QUERY = 'pipelines = {"pass": {"route_in_log": 0}}'  # the same flow, its pipeline a Spark query


def starting() -> tuple[SparkOnDemand, Future[Any]]:
    """A Spark whose start never ends until the test ends it."""
    start: Future[Any] = Future()
    return SparkOnDemand(lambda: start, "local[2]"), start


def test_a_query_flow_waits_for_a_starting_spark_while_a_flow_without_one_runs(
    spu_addr: str, tmp_path: Path
) -> None:
    """No query starts here (seconds): the deployment's wait is what is shown; every other runtime
    test hands its running session through the same `session()`."""
    supply, start = starting()
    sent = write_events(tmp_path / "in.jsonl", 20)
    aliased, query = flow_id("ondemand"), flow_id("ondemand")
    aliased_out, query_out = tmp_path / "aliased.jsonl", tmp_path / "query.jsonl"

    async def scenario() -> None:
        runtime = Runtime(spu_addr, supply, tmp_path / "data")
        waiting = asyncio.create_task(
            runtime.deploy(files_through_pass(query, tmp_path / "in.jsonl", query_out, QUERY), "q.troy")
        )
        await runtime.deploy(files_through_pass(aliased, tmp_path / "in.jsonl", aliased_out), "a.troy")
        assert runtime.spark_state() == "starting"  # the first deployment that needs it started it
        await wait_for(lambda: len(read_events(aliased_out)) == len(sent), what="the aliased flow's events")
        assert not waiting.done() and list(runtime.flows) == [aliased]  # nothing of it started yet
        stopping = asyncio.create_task(supply.stop())  # the runtime stops while Spark starts:
        await wait_for(lambda: supply.state == "stopped", what="the stop")
        start.set_exception(RuntimeError("Java gateway process exited"))  # as its ended JVM makes it
        await stopping
        with pytest.raises(SparkUnavailable, match="the runtime is shutting down"):
            await waiting
        assert list(runtime.flows) == [aliased] and runtime.spark_state() == "stopped"
        await runtime.quiesce_all(shutdown=False)

    asyncio.run(scenario())
    assert read_events(aliased_out) == sent and not query_out.exists()


def test_a_failed_start_refuses_each_deployment_that_needs_it_and_starts_none_of_it(
    spu_addr: str, tmp_path: Path
) -> None:
    supply, start = starting()
    start.set_exception(RuntimeError("Java gateway process exited\n\tat org.apache.spark..."))
    write_events(tmp_path / "in.jsonl", 3)
    source = files_through_pass(flow_id("failed"), tmp_path / "in.jsonl", tmp_path / "out.jsonl", QUERY)

    async def scenario() -> None:
        runtime = Runtime(spu_addr, supply, tmp_path / "data")
        for _ in range(2):  # the answer stays the same: a failed start is not tried again
            with pytest.raises(SparkUnavailable, match=r"^Spark did not start: Java gateway process exited$"):
                await runtime.deploy(source, "q.troy")
        assert runtime.flows == {} and runtime.spark_state() == "failed"
        assert supply.failure() == "Java gateway process exited"
        await runtime.quiesce_all(shutdown=False)

    asyncio.run(scenario())
    assert not (tmp_path / "out.jsonl").exists()
