"""The QoS governors feed the executor's QoS operators: feedback in, routing out."""

from __future__ import annotations

from typing import Any

from contraflow.events import Event
from contraflow.lang.graph import OperatorSpec
from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.qos import NS_PER_MS, BackpressureGovernor, PercentileGovernor

QUERY = """
define operator bp from qos::backpressure with timeout = 100, steps = [10, 20] end;
define operator perc from qos::percentile with timeout = 100, step_down = 0.5, step_up = 0.25 end;
create operator bp;
create operator perc;
select event from in into bp;
select event from bp into perc;
select {"out": event} from perc into out;
select {"bp": event} from bp/overflow into out;
select {"perc": event} from perc/overflow into out;
"""


def spec(executor: PipelineExecutor, node: str) -> OperatorSpec:
    found = executor.graph.nodes[node].spec
    assert isinstance(found, OperatorSpec)
    return found


def routes(executor: PipelineExecutor, times_ms: list[int]) -> list[str]:
    out = []
    for i, t in enumerate(times_ms):
        [(_, event)] = executor.process("in", Event.from_raw(str(i).encode()), t * NS_PER_MS)
        out.append(next(iter(event.decoded)))
    return out


def test_backpressure_backs_off_longer_on_each_slow_delivery_and_resets_on_a_fast_one(query: Any) -> None:
    executor = PipelineExecutor(query(QUERY))
    governor = BackpressureGovernor.from_spec(spec(executor, "bp"))
    executor.signal("bp", governor.observe(0, latency_ms=150))  # slow: back off 10 ms
    assert routes(executor, [5, 10]) == ["bp", "out"]
    executor.signal("bp", governor.observe(10 * NS_PER_MS, failed=True))  # again: 20 ms
    assert routes(executor, [29, 30]) == ["bp", "out"]
    executor.signal("bp", governor.observe(30 * NS_PER_MS, failed=True))  # stays at the last step
    assert executor.signals["bp"] == {"backoff_until_ns": 50 * NS_PER_MS}
    executor.signal("bp", governor.observe(31 * NS_PER_MS, latency_ms=5))
    assert governor.step == -1


def test_percentile_lowers_and_raises_the_share_that_passes(query: Any) -> None:
    executor = PipelineExecutor(query(QUERY))
    governor = PercentileGovernor.from_spec(spec(executor, "perc"))
    executor.signal("perc", governor.observe(failed=True))
    assert governor.perc == 0.5
    assert routes(executor, [0, 1, 2, 3]) == ["perc", "out", "perc", "out"]
    executor.signal("perc", governor.observe(latency_ms=500))
    assert routes(executor, [4, 5]) == ["perc", "perc"]
    for _ in range(10):
        executor.signal("perc", governor.observe(latency_ms=1))
    assert governor.perc == 1.0 and routes(executor, [6, 7]) == ["out", "out"]
