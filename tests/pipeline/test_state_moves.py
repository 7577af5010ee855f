"""Moving state anywhere in a stream changes nothing: split the input at any point, ship the
snapshot as JSON into a fresh executor, continue there, and the outputs equal one uninterrupted run."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from contraflow.events import Event
from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.local import compile_query

MS = 1_000_000
GRAPH = compile_query(
    f"""
    define window three from tumbling with size = 3 end;
    define window six from tumbling with size = 2 end;
    define window tens from tumbling with interval = {10 * MS} end;
    define operator counter from generic::counter;
    define operator batch from generic::batch with count = 4, timeout = {7 * MS} end;
    define operator bucket from grouper::bucket;
    define script classify
    state 0
    script
      let state = state + event.v;
      let $class = event.k;
      let $rate = 2;
      let $time_range = 10;
      let $windows = 5;
      {{"k": event.k, "v": event.v, "total": state}}
    end;
    create operator counter; create operator batch; create operator bucket; create script classify;
    select event from in into classify;
    select event from classify into bucket;
    select {{"pass": event}} from bucket into out;
    select {{"overflow": event.v}} from bucket/overflow into out;
    select event.v from in into counter;
    select event from counter into out;
    select event.v from in into batch;
    select event from batch into out;
    select {{"k": group[0], "s": aggr::stats::sum(event.v), "w": window}}
    from in[three, six] group by event.k into out;
    select {{"k": group[0], "vs": aggr::win::collect_flattened(event.v)}}
    from in[tens] group by event.k into out;
    """,
    name="moves.trickle",
)

# (key, value, milliseconds since the previous event, tick before it?)
STEPS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 9), st.integers(0, 4), st.booleans()),
    min_size=1,
    max_size=40,
)


def run(
    executor: PipelineExecutor, steps: list[tuple[str, int, int, bool]], start_ns: int
) -> tuple[list[Any], int]:
    out: list[Any] = []
    now = start_ns
    for key, value, gap, tick in steps:
        now += gap * MS
        if tick:
            out += [(p, e.decoded) for p, e in executor.tick(now)]
        raw = orjson.dumps({"k": key, "v": value})
        out += [(p, e.decoded) for p, e in executor.process("in", Event.from_raw(raw), now)]
    return out, now


@settings(max_examples=40, deadline=None)
@given(STEPS, st.integers(0, 40))
def test_a_move_at_any_point_changes_nothing(steps: list[tuple[str, int, int, bool]], split: int) -> None:
    split = min(split, len(steps))
    whole, _ = run(PipelineExecutor(GRAPH), steps, 0)
    first = PipelineExecutor(GRAPH)
    head, now = run(first, steps[:split], 0)
    second = PipelineExecutor(GRAPH)
    second.restore(orjson.loads(orjson.dumps(first.snapshot())))
    tail, _ = run(second, steps[split:], now)
    assert head + tail == whole
    assert second.next_deadline_ns() == deadline_after(steps)


def deadline_after(steps: list[tuple[str, int, int, bool]]) -> int | None:
    """The next timer after an uninterrupted run of `steps`."""
    executor = PipelineExecutor(GRAPH)
    run(executor, steps, 0)
    return executor.next_deadline_ns()
