"""Sliding windows keep their panes across a state move: split the input anywhere, ship the
snapshot as JSON into a fresh executor, and the outputs equal one uninterrupted run."""

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
    define window last4 from sliding with size = 4, slide = 2 end;
    define window recent from sliding with interval = {30 * MS}, slide = {10 * MS} end;
    define window pairs from tumbling with size = 2 end;
    define window moving from sliding with size = 3 end;
    select {{"k": group[0], "s": aggr::stats::sum(event.v)}} from in[last4] group by event.k into out;
    select {{"k": group[0], "vs": aggr::win::collect_flattened(event.v)}}
    from in[recent] group by event.k into out;
    select {{"w": window, "m": aggr::stats::max(event.v)}} from in[pairs, moving] into out;
    """,
    name="sliding.trickle",
)

# (key, value, milliseconds since the previous event, tick before it?)
STEPS = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 9), st.integers(0, 15), st.booleans()),
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


@settings(max_examples=30, deadline=None)
@given(STEPS, st.integers(0, 40))
def test_a_state_move_keeps_the_panes(steps: list[tuple[str, int, int, bool]], split: int) -> None:
    whole, _ = run(PipelineExecutor(GRAPH), steps, 0)
    first = PipelineExecutor(GRAPH)
    head, now = run(first, steps[:split], 0)
    moved = PipelineExecutor(GRAPH)
    moved.restore(orjson.loads(orjson.dumps(first.snapshot())))
    tail, _ = run(moved, steps[split:], now)
    assert head + tail == whole


def test_each_event_counts_once_per_window_however_windows_overlap() -> None:
    executor = PipelineExecutor(
        compile_query(
            "define window w from sliding with size = 6, slide = 2 end;\n"
            "select aggr::stats::count() from in[w] into out;",
            name="count.trickle",
        )
    )
    counts = [e.decoded for i in range(20) for _, e in executor.process("in", Event.from_raw(b"1"), i)]
    assert counts == [6] * 8  # windows end after events 6, 8, ..., 20
