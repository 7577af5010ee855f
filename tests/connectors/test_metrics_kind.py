"""metrics: the runtime's own counters as events in Tremor's shape, and forwarding what it is sent."""

from __future__ import annotations

import time

from contraflow.connectors.metrics import MetricsConnector
from contraflow.runtime.metrics import RuntimeMetrics
from tests.connectors.support import make, run, sink_event


def test_a_snapshot_of_the_runtimes_metrics_in_tremors_shape_each_interval() -> None:
    metrics = RuntimeMetrics()
    metrics.connector_events("main", "in", "out", 7, 700)
    metrics.pipeline_batch("main", "pass", 0.01, events_in=5, events_out=4)
    metrics.set_channel_depth("main", "ch", 3)

    async def body() -> list:
        conn = make("metrics", {})
        assert isinstance(conn, MetricsConnector)
        conn.ctx.runtime_metrics = metrics.registry
        conn.interval_s = 0.05
        await conn.connect()
        started = time.monotonic()
        item = await conn.pull()
        assert time.monotonic() - started >= 0.04  # at the interval, not before
        assert item is not None and item.events is not None
        return [value for value, _ in item.events]

    measurements = run(body())
    stamps = {m.pop("timestamp") for m in measurements}
    assert len(stamps) == 1 and abs(stamps.pop() - time.time_ns()) < 10**10
    assert {
        "measurement": "connector_events",
        "tags": {"flow": "main", "connector": "in", "port": "out"},
        "fields": {"count": 7},
    } in measurements
    pipeline_in = {"flow": "main", "pipeline": "pass", "node": "in", "direction": "input", "port": "in"}
    pipeline_out = {"flow": "main", "pipeline": "pass", "node": "out", "direction": "output", "port": "out"}
    assert {"measurement": "events", "tags": pipeline_in, "fields": {"count": 5}} in measurements
    assert {"measurement": "events", "tags": pipeline_out, "fields": {"count": 4}} in measurements
    assert {
        "measurement": "channel_depth",
        "tags": {"flow": "main", "channel": "ch"},
        "fields": {"value": 3.0},
    } in measurements
    assert not any(m["measurement"].endswith(("_created", "_bucket")) for m in measurements)


def test_events_sent_to_it_are_forwarded_on_out() -> None:
    async def body() -> list:
        conn = make("metrics", {})
        await conn.connect()
        own = {"measurement": "mine", "tags": {}, "fields": {"count": 1}, "timestamp": 1}
        await conn.send([sink_event(own, {"m": 1})])
        item = await conn.pull()  # long before the first snapshot is due
        assert item is not None and item.events is not None
        return item.events

    assert run(body()) == [
        ({"measurement": "mine", "tags": {}, "fields": {"count": 1}, "timestamp": 1}, {"m": 1})
    ]
