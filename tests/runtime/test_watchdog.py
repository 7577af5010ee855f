"""Watchdogs: a blocked event loop, and per flow a micro-batch, a send and a pull past their deadlines."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from contraflow.runtime.event_stream import EventStream
from contraflow.runtime.metrics import RuntimeMetrics
from contraflow.runtime.settings import WatchdogSettings
from contraflow.runtime.watchdog import FlowWatchdog, watch_loop
from tests.runtime.harness import flow_id, running, troy, wait_for
from tests.runtime.silent_server import SilentServer, stalled_flow


def test_a_blocking_call_on_the_loop_is_reported() -> None:
    events = EventStream(None)
    metrics = RuntimeMetrics()

    async def scenario() -> None:
        dog = asyncio.ensure_future(watch_loop(events, metrics, interval_s=0.05, threshold_s=0.2))
        await asyncio.sleep(0.2)
        assert not events.recent  # healthy so far
        time.sleep(0.5)  # a connector forgetting to_thread
        await asyncio.sleep(0.15)
        dog.cancel()

    asyncio.run(scenario())
    reports = [e for e in events.recent if e["kind"] == "watchdog"]
    assert len(reports) == 1 and reports[0]["what"] == "loop" and reports[0]["elapsed_s"] >= 0.4
    assert (
        metrics.registry.get_sample_value(
            "contraflow_watchdog_warnings_total", {"flow": "", "node": "", "what": "loop"}
        )
        == 1
    )


def test_deadlines_are_reported_once_per_stall() -> None:
    events = EventStream(None)
    dog = FlowWatchdog(
        "f", WatchdogSettings(batch_deadline_ms=1000, send_deadline_ms=500), events, RuntimeMetrics()
    )
    now = 100.0
    batches = {
        "slow": (now - 1.0, 2.5),
        "stuck": (now - 1.5, 0.1),
        "idle": (now - 9.0, 0.1),
        "ok": (now, 0.2),
    }
    busy = [("send", "sink", now - 0.7), ("send", "other", now - 0.1), ("pull", "src", now - 99.0)]
    for _ in range(3):
        dog.check(batches, lambda alias: alias != "idle", busy, now)
    reports = {(e["what"], e["node"]): e for e in events.recent}
    assert set(reports) == {("batch", "slow"), ("batch", "stuck"), ("send", "sink")}  # pulls are off
    assert (
        reports[("batch", "slow")]["state"] == "finished" and reports[("batch", "slow")]["elapsed_s"] == 2.5
    )
    assert (
        reports[("batch", "stuck")]["state"] == "running" and reports[("batch", "stuck")]["elapsed_s"] == 1.5
    )
    assert len(events.recent) == 3  # three ticks, each stall reported once


def test_a_flow_reports_its_slow_batches_sends_and_pulls(spark: Any, spu_addr: str, tmp_path: Path) -> None:
    server = SilentServer()
    fid = flow_id("watched")
    source = troy(
        fid,
        stalled_flow(server, interval_ns=50_000_000),
        args='watchdog = {"batch_deadline_ms": 1, "send_deadline_ms": 300, "pull_deadline_ms": 300}, '
        'pipelines = {"pass": {"route_in_log": 0}}, '
        'cancel = {"ceiling_s": 4}',
    )

    def reported(what: str, node: str) -> list[dict[str, Any]]:
        return [
            e
            for e in runtime.events.recent
            if e["kind"] == "watchdog" and e.get("flow") == fid and e["what"] == what and e["node"] == node
        ]

    async def scenario() -> None:
        nonlocal runtime
        async with running(spu_addr, spark, tmp_path / "data", source) as runtime:
            await wait_for(lambda: bool(reported("send", "sink")), what="the send past its deadline")
            await wait_for(lambda: bool(reported("pull", "input")), what="the pull past its deadline")
            await wait_for(lambda: bool(reported("batch", "pass")), what="a batch past its 1 ms deadline")
            send = reported("send", "sink")[0]
            assert send["elapsed_s"] >= 0.3 and send["deadline_s"] == 0.3
            assert reported("batch", "pass")[0]["elapsed_s"] > 0.001
            sample = runtime.metrics.registry.get_sample_value(
                "contraflow_watchdog_warnings_total", {"flow": fid, "node": "sink", "what": "send"}
            )
            assert sample is not None and sample >= 1

    runtime: Any = None
    try:
        asyncio.run(scenario())
    finally:
        server.close()
