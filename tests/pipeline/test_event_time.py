"""Windows closed by the watermark, on out-of-order input: every event is emitted once or reported
late, and moving the state anywhere in the stream (as a checkpoint or `state export` does) changes
nothing."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from contraflow.events import Event
from contraflow.pipeline.analysis import has_timers
from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.local import compile_query
from contraflow.pipeline.watermark import IDLE_AFTER_NS

GRAPH = compile_query(
    """
    define window tumbling_late from tumbling with interval = 10, lateness = 6 script event.t end;
    define window sliding_late from sliding with interval = 20, slide = 5, lateness = 4 script event.t end;
    define window sessions from session with gap = 7, max_duration = 30, lateness = 5 script event.t end;
    select {"w": "tumbling", "k": group[0], "ids": aggr::win::collect_flattened(event.id)}
    from in[tumbling_late] group by event.k into out;
    select {"w": "sliding", "ids": aggr::win::collect_flattened(event.id)} from in[sliding_late] into out;
    select {"w": "session", "k": group[0], "ids": aggr::win::collect_flattened(event.id)}
    from in[sessions] group by event.k into out;
    """,
    name="event_time.trickle",
)

# (group key, event time): times wander back and forth, so some events arrive late.
STEPS = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 120)), min_size=1, max_size=40)


def run(
    executor: PipelineExecutor, events: list[dict[str, Any]], first_id: int, ingest_step: int = 1
) -> list[tuple[str, Any]]:
    """Feed `events` (numbered from `first_id` as `id`, ingested at that number times
    `ingest_step`, read from input partition `p` if they name one); returns the outputs."""
    out = []
    for number, event in enumerate(events, first_id):
        raw = orjson.dumps({"id": number, **event})
        source = f"p{event['p']}" if "p" in event else None
        emitted = executor.process("in", Event.from_raw(raw), number * ingest_step, source)
        out += [(p, e.decoded) for p, e in emitted]
    return out


def assert_a_move_changes_nothing(
    graph: Any, events: list[dict[str, Any]], split: int, ingest_step: int = 1
) -> None:
    """Stopping after `split` events, shipping the state as JSON and going on elsewhere = one run."""
    split = min(split, len(events))
    whole = run(PipelineExecutor(graph), events, 0, ingest_step)
    first = PipelineExecutor(graph)
    head = run(first, events[:split], 0, ingest_step)
    second = PipelineExecutor(graph)
    second.restore(orjson.loads(orjson.dumps(first.snapshot())))
    assert head + run(second, events[split:], split, ingest_step) == whole


def keyed(steps: list[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"k": key, "t": time} for key, time in steps]


@settings(max_examples=40, deadline=None)
@given(STEPS, st.integers(0, 40))
def test_a_move_at_any_point_changes_nothing(steps: list[tuple[str, int]], split: int) -> None:
    assert_a_move_changes_nothing(GRAPH, keyed(steps), split)


@settings(max_examples=40, deadline=None)
@given(STEPS)
def test_each_event_is_in_a_window_or_late_never_both(steps: list[tuple[str, int]]) -> None:
    """Tumbling windows and sessions hold each event at most once; a late event is in none (a
    sliding window's event is late only when every window holding it was emitted before it)."""
    out = run(PipelineExecutor(GRAPH), keyed(steps), 0)
    for kind in ("tumbling", "session", "sliding"):
        emitted = [i for port, v in out if port == "out" and v["w"] == kind for i in v["ids"]]
        late = {v["event"]["id"] for port, v in out if port == "err" and v["node"] == _node(kind)}
        assert kind == "sliding" or len(emitted) == len(set(emitted))
        assert not late & set(emitted)
    for port, value in out:
        if port == "err":
            assert value["late"] is True and value["event_time"] < value["watermark"]


def test_the_watermark_is_one_for_all_groups_and_emits_in_order_of_window_end() -> None:
    """Group b's window closes when group a's events move the watermark, ends in ascending order."""
    steps = [("b", 3), ("a", 14), ("b", 12), ("a", 25), ("a", 41)]
    out = [
        v
        for port, v in run(PipelineExecutor(GRAPH), keyed(steps), 0)
        if port == "out" and v["w"] == "tumbling"
    ]
    assert out == [
        {"w": "tumbling", "k": "b", "ids": [0]},
        {"w": "tumbling", "k": "a", "ids": [1]},
        {"w": "tumbling", "k": "b", "ids": [2]},
        {"w": "tumbling", "k": "a", "ids": [3]},
    ]


def test_the_late_count_is_part_of_the_state() -> None:
    executor = PipelineExecutor(GRAPH)
    run(executor, keyed([("a", 50), ("a", 1), ("b", 2)]), 0)
    counts = {node: state["late"] for node, state in executor.snapshot().items() if state}
    assert counts == {_node("tumbling"): 2, _node("sliding"): 2, _node("session"): 2}


def _node(kind: str) -> str:
    """The select node of each window kind, in the order of the query."""
    return {"tumbling": "select_1", "sliding": "select_2", "session": "select_3"}[kind]


JOIN = compile_query(
    """
    create stream orders;
    create stream payments;
    select event from in where event.side == "o" into orders;
    select event from in where event.side == "p" into payments;
    select [left.id, right.id] from orders with time = event.t join payments with time = event.t
    on left.k == right.k within 5 into out;
    select {"unmatched": left.id, "right": right} from orders with time = event.t
    left join payments with time = event.t on left.k == right.k within 5 into out having event.right == null;
    """,
    name="join.trickle",
)

# (side, key, event time)
JOIN_STEPS = st.lists(
    st.tuples(st.sampled_from(["o", "p"]), st.sampled_from(["a", "b"]), st.integers(0, 60)), max_size=40
)


def joined(steps: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
    return [{"side": side, "k": key, "t": time} for side, key, time in steps]


@settings(max_examples=40, deadline=None)
@given(JOIN_STEPS, st.integers(0, 40))
def test_a_join_moved_at_any_point_changes_nothing(steps: list[tuple[str, str, int]], split: int) -> None:
    assert_a_move_changes_nothing(JOIN, joined(steps), split)


@settings(max_examples=40, deadline=None)
@given(JOIN_STEPS)
def test_every_pair_of_events_on_time_is_joined_once(steps: list[tuple[str, str, int]]) -> None:
    """Out of order: the pairs are exactly those of the events not reported late; a left join's
    left event comes out unmatched only if it is in no pair, and only once the watermark (the
    sides' smaller highest time minus `within`) is more than `within` past it."""
    out = run(PipelineExecutor(JOIN), joined(steps), 0)
    late = {(v["node"], v["event"]["id"]) for port, v in out if port == "err"}
    assert all(port == "err" or isinstance(v, list) or v["right"] is None for port, v in out)
    on_time = [(i, s) for i, s in enumerate(steps) if ("select_3", i) not in late]
    want = sorted(
        [j, i] if side == "o" else [i, j]
        for j, (side, key, time) in on_time
        for i, (other, other_key, other_time) in on_time
        if i < j and other != side and other_key == key and abs(time - other_time) <= 5
    )
    assert sorted(v for port, v in out if isinstance(v, list)) == want
    paired = {i for pair in want for i in pair}
    unmatched = [v["unmatched"] for port, v in out if port == "out" and isinstance(v, dict)]
    assert len(unmatched) == len(set(unmatched)) and not set(unmatched) & paired
    assert not {i for i in unmatched if ("select_4", i) in late}
    highest = {side: max((t for s, _, t in steps if s == side), default=None) for side in "op"}
    if None not in highest.values():
        watermark = min(highest.values()) - 5  # type: ignore[type-var,operator]
        orders_on_time = {
            i for i, (side, _, t) in enumerate(steps) if side == "o" and ("select_4", i) not in late
        }
        gone = {i for i in orders_on_time if steps[i][2] < watermark - 5}
        assert set(unmatched) == gone - paired


@settings(max_examples=40, deadline=None)
@given(JOIN_STEPS)
def test_in_order_input_gives_every_matching_pair_once(steps: list[tuple[str, str, int]]) -> None:
    """Times that never go back: nothing is late, and the outputs are exactly the matching pairs."""
    ordered = [
        (side, key, time) for (side, key, _), time in zip(steps, sorted(t for *_, t in steps), strict=True)
    ]
    out = [v for _, v in run(PipelineExecutor(JOIN), joined(ordered), 0) if isinstance(v, list)]
    want = [
        [j, i] if side == "o" else [i, j]
        for j, (side, key, time) in enumerate(ordered)
        for i, (other, other_key, other_time) in enumerate(ordered[:j])
        if other != side and other_key == key and time - other_time <= 5
    ]
    assert sorted(out) == sorted(want)


# (input partition, side, key, how far the partition's event time moves on): each partition's
# times only go forward, at its own pace.
PARTITIONED_STEPS = st.lists(
    st.tuples(
        st.sampled_from([0, 1]), st.sampled_from(["o", "p"]), st.sampled_from(["a", "b"]), st.integers(0, 9)
    ),
    max_size=40,
)


def partitioned(steps: list[tuple[int, str, str, int]], ahead: int) -> list[dict[str, Any]]:
    """Events of two input partitions, partition 1 starting `ahead` in event time. Each partition
    is first heard of at its start (a partition counts from its first event on)."""
    clocks = {0: 0, 1: ahead}
    events = [{"p": 0, "side": "o", "k": "a", "t": 0}, {"p": 1, "side": "p", "k": "b", "t": ahead}]
    for partition, side, key, step in steps:
        clocks[partition] += step
        events.append({"p": partition, "side": side, "k": key, "t": clocks[partition]})
    return events


@settings(max_examples=15, deadline=None)
@given(PARTITIONED_STEPS, st.integers(0, 100))
def test_partitions_read_at_their_own_pace_make_no_event_late(
    steps: list[tuple[int, str, str, int]], ahead: int
) -> None:
    """Each partition in time order, one far ahead of the other, interleaved anyhow: the
    watermarks follow the slower partition, so no event is late, the join gives every matching
    pair and every window event is emitted at most once."""
    events = partitioned(steps, ahead)
    joins = run(PipelineExecutor(JOIN), events, 0)
    windows = run(PipelineExecutor(GRAPH), events, 0)
    assert [v for port, v in joins + windows if port == "err"] == []
    want = sorted(
        [i, j] if event["side"] == "o" else [j, i]
        for i, event in enumerate(events)
        for j, other in enumerate(events)
        if event["side"] != other["side"] and event["k"] == other["k"] and abs(event["t"] - other["t"]) <= 5
        if i < j
    )
    assert sorted(v for _, v in joins if isinstance(v, list)) == want
    for kind in ("tumbling", "session"):
        emitted = [i for port, v in windows if v["w"] == kind for i in v["ids"]]
        assert len(emitted) == len(set(emitted))


@settings(max_examples=15, deadline=None)
@given(PARTITIONED_STEPS, st.integers(0, 100), st.integers(0, 40))
def test_a_move_with_partitions_and_idle_ones_changes_nothing(
    steps: list[tuple[int, str, str, int]], ahead: int, split: int
) -> None:
    """With an ingest-time gap of a third of IDLE_AFTER_NS between events, a partition that
    delivers nothing for three events is forgotten: the move keeps that too."""
    events = partitioned(steps, ahead)
    for graph in (GRAPH, JOIN):
        assert_a_move_changes_nothing(graph, events, split, IDLE_AFTER_NS // 3)


def test_an_idle_partition_stops_holding_the_watermark() -> None:
    """Partition 1 runs ahead; its events move the watermark only once partition 0 has delivered
    nothing for IDLE_AFTER_NS of ingest time."""
    executor = PipelineExecutor(GRAPH)

    def feed(partition: str, time: int, ingest_ns: int) -> list[Any]:
        raw = orjson.dumps({"id": time, "k": "a", "t": time})
        emitted = executor.process("in", Event.from_raw(raw), ingest_ns, partition)
        return [e.decoded["ids"] for _, e in emitted if e.decoded["w"] == "tumbling"]

    assert feed("p0", 5, 0) == feed("p1", 50, 1) == feed("p1", 61, IDLE_AFTER_NS) == []
    assert feed("p1", 66, IDLE_AFTER_NS + 1) == [[5], [50]]  # the watermark is now 66 - 6


def test_windows_closed_by_the_watermark_need_no_timers() -> None:
    """Ticks never close them, so Spark runs them without processing-time timers (with timers a
    `transformWithState` always asks for another micro-batch)."""
    assert not has_timers(GRAPH)
    executor = PipelineExecutor(GRAPH)
    run(executor, keyed([("a", 5), ("a", 9)]), 0)
    assert executor.next_deadline_ns() is None and executor.tick(10**12) == []
