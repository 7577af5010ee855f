"""Benchmark: tremor-script compiled to Python vs the reference tree-walking interpreter.

The script is a typical classification: a `match` over two event fields that
sets three metadata values. Both engines run the same parsed script over the
same events in the same process; prints one JSON object with events/s,
ns/event (medians of several repeats) and the compiled/interpreted ratio.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from contraflow.lang.script.compiler import compile_script
from contraflow.lang.script.interpreter import Interpreter
from contraflow.lang.script.parser import parse_script

SCRIPT = """
match event of
  case %{ level == "error", service == "db" } =>
    let $class = "critical"; let $team = "dba"; let $page = true
  case %{ level == "error" } =>
    let $class = "high"; let $team = "ops"; let $page = false
  case %{ level == "warn", service == "db" } =>
    let $class = "elevated"; let $team = "dba"; let $page = false
  default =>
    let $class = "normal"; let $team = "none"; let $page = false
end;
event
"""

EVENTS: list[dict[str, Any]] = [
    {"level": "error", "service": "db", "msg": "connection refused", "host": "db-1"},
    {"level": "error", "service": "web", "msg": "timeout", "host": "web-3"},
    {"level": "warn", "service": "db", "msg": "slow query", "host": "db-2"},
    {"level": "info", "service": "web", "msg": "ok", "host": "web-1"},
]
REPEATS = 5


def _measure(run: Callable[[Any, Any], Any], n: int) -> float:
    """Seconds per event for `n` events (fresh metadata dict per event, as a pipeline would)."""
    events = [EVENTS[i % len(EVENTS)] for i in range(n)]
    start = time.perf_counter()
    for event in events:
        run(event, {})
    return (time.perf_counter() - start) / n


def _medians_ns(runs: dict[str, tuple[Callable[[Any, Any], Any], int]]) -> dict[str, float]:
    """Median ns/event per engine; the engines take turns in every repeat so load affects them alike."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(REPEATS):
        for name, (run, n) in runs.items():
            samples[name].append(_measure(run, n))
    return {name: statistics.median(values) * 1e9 for name, values in samples.items()}


def main() -> None:
    script = parse_script(SCRIPT, "classify.tremor")
    compiled = compile_script(script, name="classify")
    interpreter = Interpreter(script, name="classify")
    for event in EVENTS:  # both engines must agree before we time them
        a, b = compiled.run(dict(event), {}), interpreter.run(dict(event), {})
        assert (a.event, a.meta, a.port) == (b.event, b.meta, b.port)

    raw = compiled.fn

    def run_raw(event: Any, meta: Any) -> Any:
        return raw(event, meta, None, {}, None, None)

    medians = _medians_ns(
        {
            "compiled": (compiled.run, 200_000),
            "raw": (run_raw, 200_000),
            "interpreted": (interpreter.run, 20_000),
        }
    )
    compiled_ns, raw_ns, interpreted_ns = medians["compiled"], medians["raw"], medians["interpreted"]
    print(
        json.dumps(
            {
                "benchmark": "script_eval",
                "script": "match over two fields setting three metadata values",
                "repeats": REPEATS,
                "compiled_ns_per_event": round(compiled_ns, 1),
                "compiled_events_per_s": round(1e9 / compiled_ns),
                "compiled_raw_fn_ns_per_event": round(raw_ns, 1),
                "interpreted_ns_per_event": round(interpreted_ns, 1),
                "interpreted_events_per_s": round(1e9 / interpreted_ns),
                "speedup_compiled_vs_interpreted": round(interpreted_ns / compiled_ns, 1),
                "target_ns_per_event": 1000,
                "meets_target": compiled_ns < 1000,
            }
        )
    )


if __name__ == "__main__":
    main()
