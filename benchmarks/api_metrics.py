"""Metrics hot-path benchmark: what `RuntimeMetrics` costs per counted event.

Sources count every event (`connector_events(flow, connector, port, 1, nbytes)`:
events and bytes counters). The baseline is the least prometheus_client can
do for the same: `inc()` on two label children looked up once beforehand.
Prints one JSON object: calls/s of each (medians over REPEATS runs) and
`ratio` = contraflow / baseline (1.0 means the label handling is free).
Also reports the cost of one `GET /metrics`-sized exposition for a
flow-sized set of series.

Run: PYTHONPATH=src .venv/bin/python benchmarks/api_metrics.py [--calls N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from prometheus_client import generate_latest

from contraflow.runtime.metrics import RuntimeMetrics

REPEATS = 5


def rate(fn: Callable[[], None], calls: int) -> float:
    """Median calls/s of `fn` over REPEATS runs of `calls` calls."""
    rates = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rates.append(calls / (time.perf_counter() - start))
    return statistics.median(rates)


def exposition_ms(metrics: RuntimeMetrics) -> float:
    """Median milliseconds to render the registry."""
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        generate_latest(metrics.registry)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def populate(metrics: RuntimeMetrics, flows: int = 4, connectors: int = 4, pipelines: int = 2) -> int:
    """Series of a few flows of typical size; returns how many samples an exposition holds."""
    for f in range(flows):
        flow = f"flow{f}"
        for c in range(connectors):
            for port in ("in", "out", "err"):
                metrics.connector_events(flow, f"c{c}", port, 1, 100)
                metrics.connector_errors(flow, f"c{c}", port)
            metrics.set_channel_depth(flow, f"{flow}.c{c}.out", 10)
            metrics.set_breaker(flow, f"{flow}.c{c}.out", False)
            metrics.backpressure_transition(flow, f"{flow}.c{c}.out", "pause")
        for p in range(pipelines):
            metrics.pipeline_batch(flow, f"p{p}", 0.1, 100, 100)
    return sum(len(family.samples) for family in metrics.registry.collect())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()

    metrics = RuntimeMetrics()
    ours = rate(lambda: metrics.connector_events("main", "events", "out", 1, 200), args.calls)

    bare = RuntimeMetrics()
    events = bare.connector_events_total.labels("main", "events", "out")
    nbytes = bare.connector_bytes_total.labels("main", "events", "out")

    def baseline() -> None:
        events.inc(1)
        nbytes.inc(200)

    base = rate(baseline, args.calls)

    sized = RuntimeMetrics()
    series = populate(sized)
    print(
        json.dumps(
            {
                "benchmark": "api_metrics",
                "figure": "connector_events calls/s",
                "value": round(ours),
                "baseline": round(base),
                "baseline_is": "two pre-resolved prometheus_client children inc()",
                "ratio": round(ours / base, 3),
                "us_per_event": round(1e6 / ours, 3),
                "exposition_samples": series,
                "exposition_ms": round(exposition_ms(sized), 3),
                "repeats": REPEATS,
                "calls": args.calls,
            }
        )
    )


if __name__ == "__main__":
    main()
