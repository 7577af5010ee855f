"""PipelineExecutor: state across snapshot/restore, raw bytes, errors, timers, the batch entry point."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from contraflow.events import Event
from contraflow.lang.graph import PipelineGraph
from contraflow.pipeline.executor import PipelineExecutor

from .conftest import values

RFC_COUNTER = """
define script counter
script
  match type::is_null(state) of
    case true => let state = 1
    case false => let state = state + 1
  end;
  {"count": state, "event": event}
end;
create script counter;
select event from in into counter;
select event from counter into out;
"""


def feed(executor: PipelineExecutor, items: list[Any], start: int = 0) -> list[tuple[str, Event]]:
    out: list[tuple[str, Event]] = []
    for i, value in enumerate(items):
        out += executor.process("in", Event.from_raw(orjson.dumps(value)), start + i)
    return out


def moved(executor: PipelineExecutor, graph: PipelineGraph) -> PipelineExecutor:
    """A fresh executor continuing from `executor`'s state, shipped as JSON like a state store would."""
    fresh = PipelineExecutor(graph)
    fresh.restore(orjson.loads(orjson.dumps(executor.snapshot())))
    return fresh


def test_rfc_counter_counts_across_events_and_a_move_to_a_fresh_executor(query: Any) -> None:
    graph = query(RFC_COUNTER)
    first = PipelineExecutor(graph)
    assert first.stateful and first.snapshot() == {"counter": None}
    assert values(feed(first, ["a", "b", "c"])) == [
        {"count": n, "event": e} for n, e in [(1, "a"), (2, "b"), (3, "c")]
    ]
    assert first.snapshot() == {"counter": 3}
    second = moved(first, graph)
    assert values(feed(second, ["d", "e"])) == [{"count": 4, "event": "d"}, {"count": 5, "event": "e"}]
    # the original keeps its own state: the snapshot was a copy
    assert values(feed(first, ["x"])) == [{"count": 4, "event": "x"}]


def test_an_unchanged_event_leaves_with_its_original_bytes(query: Any) -> None:
    raw = b'{ "z": 1,   "a" : [1,2] }'
    executor = PipelineExecutor(query("select event from in where event.z == 1 into out;"))
    [(port, event)] = executor.process("in", Event.from_raw(raw, {"m": 1}), 0)
    assert port == "out" and event.raw is raw and event.meta == {"m": 1}
    [(_, event)] = executor.process("in", Event.from_raw(raw), 1)
    assert event.raw is raw


def test_a_script_that_only_reads_keeps_raw_and_one_that_writes_does_not(query: Any) -> None:
    raw = b'{"v": 1}'
    reader = PipelineExecutor(
        query(
            """
            define script tag script let $seen = event.v; event end;
            create script tag;
            select event from in into tag;
            select event from tag into out;
            """
        )
    )
    [(_, event)] = reader.process("in", Event.from_raw(raw), 0)
    assert event.raw is raw and event.meta == {"seen": 1}
    writer = PipelineExecutor(
        query(
            """
            define script tag script let event.w = 2; event end;
            create script tag;
            select event from in into tag;
            select event from tag into out;
            """
        )
    )
    [(_, event)] = writer.process("in", Event.from_raw(raw), 0)
    assert event.raw is None and event.decoded == {"v": 1, "w": 2}


def test_process_values_hands_back_the_input_bytes_of_routed_events(query: Any) -> None:
    batch = [b'{"a":1}', b'{"a": 2}', b'{"a":3}']
    executor = PipelineExecutor(query("select event from in where event.a != 2 into out;"))
    out = executor.process_values("in", batch, [None, {"k": "v"}, {"k": "w"}], [0, 1, 2])
    got, metas = out["out"]
    assert got[0] is batch[0] and got[1] is batch[2]
    assert metas == [None, b'{"k":"w"}']


def test_a_pure_routing_pipeline_returns_the_batch_as_is(query: Any) -> None:
    batch = [b"1", b"not json", b'{"x": 1}']
    executor = PipelineExecutor(
        query(
            """
            define operator p from passthrough;
            create operator p;
            create stream s;
            select event from in into p;
            select event from p into s;
            select event from s into out;
            """
        )
    )
    got, metas = executor.process_values("in", batch, [None, {"a": 1}, None], 0)["out"]
    assert got is batch and metas == [None, b'{"a":1}', None]


def test_process_values_agrees_with_process(query: Any) -> None:
    graph = query(
        """
        define script classify
        script
          let $class = match event.level of case "error" => "high" default => "low" end;
          event
        end;
        create script classify;
        select event from in into classify;
        select {"level": event.level, "class": $class, "n": event.n * 2} from classify where event.n > 1 into out;
        """
    )
    events = [{"level": ["error", "info"][i % 2], "n": i} for i in range(20)] + [{"level": "x"}]
    raws = [orjson.dumps(e) for e in events]
    one = PipelineExecutor(graph)
    by_event: dict[str, tuple[list[bytes], list[bytes | None]]] = {}
    for i, raw in enumerate(raws):
        for port, event in one.process("in", Event.from_raw(raw), i):
            cols = by_event.setdefault(port, ([], []))
            cols[0].append(event.raw if event.raw is not None else orjson.dumps(event.value))
            cols[1].append(orjson.dumps(event.meta) if event.meta else None)
    batch = PipelineExecutor(graph).process_values("in", raws, None, list(range(len(raws))))
    assert batch == by_event
    assert len(batch["out"][0]) == 18 and len(batch["err"][0]) == 1


def test_errors_become_events_on_err_and_never_raise(query: Any) -> None:
    executor = PipelineExecutor(
        query(
            """
            define script s
            script
              event.a + 1
            end;
            create script s;
            select event from in into s;
            select event from s into out;
            """
        )
    )
    out = executor.process("in", Event.from_raw(b'{"a": "x"}', {"m": 1}), 0)
    out += executor.process("in", Event.from_raw(b"{oops"), 1)
    out += executor.process("in", Event.from_raw(b'{"a": 1}'), 2)
    assert [port for port, _ in out] == ["err", "err", "out"]
    first, second = values(out, "err")
    assert first["node"] == "s" and first["event"] == {"a": "x"} and first["position"] == "query.trickle:4:15"
    assert "+" in first["error"] or "add" in first["error"].lower()
    assert out[0][1].meta == {"m": 1}
    assert second["error"].startswith("invalid JSON") and second["event"] == "{oops"
    assert values(out, "out") == [2]


def test_errors_of_a_nested_pipeline_reach_the_outer_err_port(query: Any) -> None:
    executor = PipelineExecutor(
        query(
            """
            define pipeline inner
            pipeline
              select event.missing from in into out;
            end;
            create pipeline p from inner;
            select event from in into p;
            select event from p into out;
            """
        )
    )
    [(port, event)] = executor.process("in", Event.from_raw(b"{}"), 0)
    assert port == "err" and event.decoded["node"] == "select_1" and event.decoded["event"] == {}


def test_origin_travels_with_derived_events(query: Any) -> None:
    executor = PipelineExecutor(query('select {"x": event} from in into out;'))
    [(_, event)] = executor.process("in", Event(None, {}, b"1", ("t", 0, 7)), 0)
    assert event.origin == ("t", 0, 7)


def test_interval_windows_close_by_event_time_and_by_tick(query: Any) -> None:
    executor = PipelineExecutor(
        query(
            """
            define window w from tumbling with interval = 10 end;
            select {"k": group[0], "n": aggr::stats::count()} from in[w] group by event into out;
            """
        )
    )
    assert executor.next_deadline_ns() is None
    assert feed(executor, ["a", "b"], start=0) == []
    assert executor.next_deadline_ns() == 10 and executor.last_deadline_ns() == 11
    assert executor.tick(9) == []
    assert values(executor.tick(10)) == [{"k": "a", "n": 1}]
    assert executor.next_deadline_ns() == 11
    assert values(executor.tick(30)) == [{"k": "b", "n": 1}]
    assert executor.next_deadline_ns() is None and executor.snapshot() == {"select_1": None}


def test_a_one_expression_window_script_windows_and_fails_like_a_full_script(query: Any) -> None:
    """`script event.t end` runs as a compiled expression; its results and its errors (with the
    script's position) must be those of the same value computed by a script with a statement."""

    def run(script: str) -> list[tuple[str, Any]]:
        executor = PipelineExecutor(
            query(
                f"""
                define window w from tumbling
                with interval = 10
                script {script} end;
                select {{"k": group[0], "n": aggr::stats::count()}} from in[w] group by event.k into out;
                """
            )
        )
        out = []
        for i, raw in enumerate([b'{"k":"a","t":1}', b'{"k":"a","t":4}', b'{"k":"a"}', b'{"k":"a","t":12}']):
            out += [(port, event.decoded) for port, event in executor.process("in", Event.from_raw(raw), i)]
        return out

    fast = run("event.t")
    assert [port for port, _ in fast] == ["err", "out"]
    assert fast[1][1] == {"k": "a", "n": 2}
    assert fast[0][1]["node"] == "select_1" and fast[0][1]["position"].startswith("query.trickle:4:")
    slow = run("let x = 0; event.t")
    assert [port for port, _ in slow] == ["err", "out"] and slow[1] == fast[1]

    def message(error: dict[str, str]) -> str:  # the rendered error without its position and caret
        return error["error"].splitlines()[0].removeprefix(error["position"] + ": ")

    assert message(fast[0][1]) == message(slow[0][1]) == "trying to access a non-existing key `t`"


def test_an_open_window_survives_a_move_with_all_its_events(query: Any) -> None:
    graph = query(
        """
        define window three from tumbling with size = 3 end;
        define window minute from tumbling with interval = 60 end;
        select aggr::win::collect_flattened(event) from in[three] into out;
        select {"k": group[0], "all": aggr::win::collect_flattened(event)} from in[minute] group by event into out;
        """
    )
    first = PipelineExecutor(graph)
    assert feed(first, ["a", "b"]) == []
    second = moved(first, graph)
    assert values(feed(second, ["a"], start=2)) == [["a", "b", "a"]]
    assert values(second.tick(70)) == [{"k": "a", "all": ["a", "a"]}, {"k": "b", "all": ["b"]}]


def test_every_kind_of_state_is_json_and_moves(query: Any) -> None:
    graph = query(
        """
        define operator counter from generic::counter;
        define operator batch from generic::batch with count = 3, timeout = 100 end;
        define operator bucket from grouper::bucket;
        define operator rr from qos::roundrobin with outputs = ["a", "b"] end;
        define operator perc from qos::percentile with timeout = 10 end;
        define window two from tumbling with size = 2 end;
        define window four from tumbling with size = 2 end;
        define script meta script let $class = "c"; let $rate = 1; event end;
        define pipeline inner
        pipeline
          define operator c from generic::counter;
          create operator c;
          select event from in into c;
          select event from c into out;
        end;
        create operator counter; create operator batch; create operator bucket;
        create operator rr; create operator perc; create script meta; create pipeline nested from inner;
        select event from in into counter;
        select event from in into batch;
        select event from in into meta;
        select event from meta into bucket;
        select event from in into rr;
        select event from in into perc;
        select event from in into nested;
        select aggr::stats::hdr(event, ["0.5"]) from in[two, four] into out;
        select event from counter into out;
        select event from batch into out;
        select event from bucket into out;
        select event from rr/a into out;
        select event from perc into out;
        select event from nested into out;
        """
    )
    first = PipelineExecutor(graph)
    first.signal("perc", {"perc": 0.5})
    feed(first, [1, 2, 3, 4, 5])
    snapshot = first.snapshot()
    assert set(snapshot) == set(first.stateful_nodes)
    assert [n for n in snapshot if n.startswith("select_")] == ["select_8"]
    assert all(
        snapshot[node] is not None
        for node in ("counter", "batch", "bucket", "rr", "perc", "nested", "select_8")
    )
    second = moved(first, graph)
    assert second.snapshot() == orjson.loads(orjson.dumps(snapshot))
    second.signal("perc", {"perc": 0.5})
    assert values(feed(second, [6, 7, 8], start=5)) == values(feed(first, [6, 7, 8], start=5))


def test_restore_resets_nodes_missing_from_the_snapshot(query: Any) -> None:
    graph = query(RFC_COUNTER)
    executor = PipelineExecutor(graph)
    feed(executor, [1, 2])
    executor.restore({})
    assert values(feed(executor, [3])) == [{"count": 1, "event": 3}]


def test_batch_timeout_sets_a_deadline(query: Any) -> None:
    executor = PipelineExecutor(
        query(
            """
            define operator b from generic::batch with count = 5, timeout = 50 end;
            create operator b;
            select event from in into b;
            select event from b into out;
            """
        )
    )
    executor.process("in", Event.from_raw(b"1"), 100)
    executor.process("in", Event.from_raw(b"2"), 120)
    assert executor.next_deadline_ns() == 150
    assert values(executor.tick(150)) == [[1, 2]]
    assert executor.next_deadline_ns() is None


def test_a_stateless_pipeline_has_no_state(query: Any) -> None:
    executor = PipelineExecutor(query('select {"a": event} from in into out;'))
    assert not executor.stateful and executor.snapshot() == {} and executor.next_deadline_ns() is None


def test_unknown_input_port_is_a_programming_error(query: Any) -> None:
    executor = PipelineExecutor(query("select event from in into out;"))
    with pytest.raises(KeyError, match="no input port 'nope'"):
        executor.process("nope", Event.from_raw(b"1"), 0)


def test_ports_of_a_nested_pipeline_with_several_inputs(query: Any) -> None:
    executor = PipelineExecutor(
        query(
            """
            define pipeline join
            from left, right
            into out
            pipeline
              select {"left": event} from left into out;
              select {"right": event} from right into out;
            end;
            create pipeline j from join;
            define script split script
              match event of case "r" => emit event => "r" default => event end
            end;
            create script split;
            select event from in into split;
            select event from split into j/left;
            select event from split/r into j/right;
            select event from j into out;
            """
        )
    )
    assert values(feed(executor, ["l", "r"])) == [{"left": "l"}, {"right": "r"}]


def test_replacing_metadata_in_one_branch_leaves_the_other_alone(query: Any) -> None:
    executor = PipelineExecutor(
        query(
            """
            define script reset script let $ = {"b": 2}; event end;
            create script reset;
            select event from in into reset;
            select {"m": $} from reset into out;
            select {"m": $} from in into out;
            """
        )
    )
    out = executor.process("in", Event.from_raw(b"1", {"a": 1}), 0)
    assert values(out) == [{"m": {"b": 2}}, {"m": {"a": 1}}]


def test_binary_values_keep_the_channel_bytes_form(query: Any) -> None:
    executor = PipelineExecutor(query('select {"b": event, "n": type::is_binary(event)} from in into out;'))
    out = executor.process_values("in", [b'{"$bytes": "AAE="}'], None, 0)
    assert [orjson.loads(v) for v in out["out"][0]] == [{"b": {"$bytes": "AAE="}, "n": True}]


def test_unchanged_output_events_write_their_original_bytes(query: Any) -> None:
    raw = b'{"b":1,  "a":2}'
    executor = PipelineExecutor(query("select event from in where event.a == 2 into out;"))
    [(_, event)] = executor.process("in", Event.from_raw(raw), 0)
    assert event.channel_bytes() is raw and event.decoded == {"b": 1, "a": 2}


def test_a_change_further_down_one_branch_is_not_seen_by_the_other(query: Any) -> None:
    executor = PipelineExecutor(
        query(
            """
            define script mark script let event.marked = true; event end;
            define window one from tumbling with size = 1 end;
            create script mark;
            select event from in where event.v > 0 into mark;
            select event from mark into out;
            select aggr::win::collect_flattened(event) from in[one] into out;
            """
        )
    )
    out = executor.process("in", Event.from_raw(b'{"v": 1}'), 0)
    assert values(out) == [{"v": 1, "marked": True}, [{"v": 1}]]


def test_a_change_after_a_nested_pipeline_is_not_seen_by_a_branch_inside_it(query: Any) -> None:
    executor = PipelineExecutor(
        query(
            """
            define pipeline inner
            pipeline
              select event from in where true into out;
              select {"inside": event} from in into out;
            end;
            define script mark script let event.marked = true; event end;
            create pipeline p from inner;
            create script mark;
            select event from in into p;
            select event from p into mark;
            select event from mark into out;
            """
        )
    )
    out = executor.process("in", Event.from_raw(b'{"v": 1}'), 0)
    assert values(out) == [{"v": 1, "marked": True}, {"inside": {"v": 1}, "marked": True}]
