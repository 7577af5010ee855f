"""Every operator, window kind, `partition_by`, multi-input and nested pipelines as real Spark queries.

Each test compiles a small pipeline, runs it with `start_pipeline` on the
shared local Spark session between real SPU topics, and checks the exact
events in the output topics. Untimed pipelines are drained with
`processAllAvailable()`; timed ones (interval windows, batch timeouts) run on a
short processing-time trigger and the output topic is polled until a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contraflow import control
from contraflow.errors import UserError
from contraflow.lang.graph import PipelineGraph
from contraflow.lang.troy.compiler import compile_source
from contraflow.pipeline.local import compile_query
from contraflow.pipeline.spark.state import FORMAT, export_state, import_state
from contraflow.spu.client import SpuClient
from tests.pipeline.spark.harness import RFC_COUNTER, SparkPipeline, poll

TICK = "200 milliseconds"
SECOND_NS = 1_000_000_000


@pytest.fixture()
def pipeline(spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path) -> Iterator[Any]:
    """Builds a `SparkPipeline` from Trickle text (or a compiled graph); stops every query it started."""
    made: list[SparkPipeline] = []

    def make(source: str | PipelineGraph, partitions: dict[str, int] | None = None) -> SparkPipeline:
        graph = compile_query(source) if isinstance(source, str) else source
        made.append(SparkPipeline(spark, spu, spu_addr, graph, tmp_path, partitions))
        return made[-1]

    yield make
    for p in made:
        p.stop()


def troy_pipeline(text: str, alias: str) -> PipelineGraph:
    """The graph of pipeline `alias` in the one flow `main` of a Troy deployment."""
    return compile_source(text).flows["main"].pipelines[alias]


# --- operators ----------------------------------------------------------------------------------


def test_passthrough_then_counter_counts_across_micro_batches_keeping_metadata(pipeline) -> None:
    p = pipeline(
        """
        define operator pass from passthrough;
        define operator counter from generic::counter;
        create operator pass;
        create operator counter;
        select event from in into pass;
        select event from pass into counter;
        select event from counter into out;
        """
    ).start()
    p.feed({"a": 1}, "b", meta={"source": "test"})
    p.drain()
    p.feed([3])
    p.drain()
    assert p.values() == [
        {"count": 1, "event": {"a": 1}},
        {"count": 2, "event": "b"},
        {"count": 3, "event": [3]},
    ]
    assert p.metas() == [{"source": "test"}, {"source": "test"}, None]  # metadata kept


def test_batch_timeout_flushes_on_the_timer_without_more_input(pipeline) -> None:
    p = pipeline(
        f"""
        define operator b from generic::batch with count = 3, timeout = {SECOND_NS} end;
        create operator b;
        select event from in into b;
        select event from b into out;
        """
    ).start(trigger=TICK)
    p.feed(1, 2, 3, 4, 5, 6, 7)
    assert p.wait_for(3) == [[1, 2, 3], [4, 5, 6], [7]]


BUCKET = """
define script classify
script
  let $class = event.c;
  let $rate = event.rate;
  let $time_range = 60000;
  let $dimensions = event.u;
  let $cardinality = event.card;
  event
end;
define operator bucket from grouper::bucket;
create script classify;
create operator bucket;
select event from in into classify;
select event from classify into bucket;
select {"pass": event.i} from bucket into out;
select {"overflow": event.i} from bucket/overflow into out;
"""


def test_bucket_limits_each_class_and_dimension_with_cardinality(pipeline) -> None:
    p = pipeline(BUCKET).start()

    def event(i: int, cls: str, rate: int, u: str | None = None, card: int = 1000) -> dict[str, Any]:
        return {"i": i, "c": cls, "rate": rate, "u": u, "card": card}

    p.feed(
        *[event(i, "a", 2) for i in (1, 2, 3)],  # 2 per minute: the third overflows
        event(4, "b", 1, "x"),  # one per minute per dimension value
        event(5, "b", 1, "y"),
        event(6, "b", 1, "x"),
        event(7, "d", 1, "x", card=1),  # remembers one dimension value only
        event(8, "d", 1, "y", card=1),  # evicts x's window
        event(9, "d", 1, "x", card=1),  # so x starts afresh
        event(10, "d", 1, "x", card=1),
    )
    p.drain()
    p.feed(event(11, "a", 2), event(12, "e", 1))  # class a's window lives in the state store
    p.drain()
    assert p.values() == [
        {"pass": 1},
        {"pass": 2},
        {"overflow": 3},
        {"pass": 4},
        {"pass": 5},
        {"overflow": 6},
        {"pass": 7},
        {"pass": 8},
        {"pass": 9},
        {"overflow": 10},
        {"overflow": 11},
        {"pass": 12},
    ]


QOS = """
define operator rr from qos::roundrobin with outputs = ["a", "b"] end;
define operator bp from qos::backpressure with timeout = 100 end;
define operator perc from qos::percentile with timeout = 100 end;
create operator rr;
create operator bp;
create operator perc;
select event from in into bp;
select event from bp into perc;
select event from perc into rr;
select {"a": event} from rr/a into out;
select {"b": event} from rr/b into out;
select {"bp_overflow": event} from bp/overflow into out;
select {"perc_overflow": event} from perc/overflow into out;
"""


def test_qos_operators_without_runtime_signals_pass_everything_and_rotate(pipeline) -> None:
    """No signal published: nothing backs off, the whole percentile passes, round robin alternates
    (its position lives in the state store, so the rotation continues in the next micro-batch)."""
    p = pipeline(QOS).start()
    p.feed(1, 2, 3)
    p.drain()
    p.feed(4, 5)
    p.drain()
    assert p.values() == [{"a": 1}, {"b": 2}, {"a": 3}, {"b": 4}, {"a": 5}]


# The runtime publishes QoS signals as one SPU control value per pipeline query
# (`contraflow.pipeline.signals`); Spark's workers read it before each batch.
def test_qos_operators_route_by_signals_the_runtime_publishes(pipeline) -> None:
    p = pipeline(QOS)
    signals = {"rr": {"unavailable": ["a"]}, "perc": {"perc": 0.5}, "bp": {"backoff_until_ns": 0}}
    control.signals(p.prefix).set(p.spu, signals)
    p.start()
    p.feed(1, 2, 3, 4)
    p.drain()
    assert p.values() == [{"perc_overflow": 1}, {"b": 2}, {"perc_overflow": 3}, {"b": 4}]


# --- windows ------------------------------------------------------------------------------------


def test_count_tilt_frames_and_max_groups_across_micro_batches(pipeline) -> None:
    p = pipeline(
        """
        define window two from tumbling with size = 2 end;
        define window four from tumbling with size = 2 end;
        define window pairs from tumbling with size = 2, max_groups = 2 end;
        select {"w": window, "n": aggr::stats::count(), "s": aggr::stats::sum(event.v)}
        from in[two, four] into out;
        select {"k": group[0], "n": aggr::stats::count()} from in[pairs] group by event.k into out;
        """
    ).start()
    events = [("a", 1), ("b", 2), ("c", 3), ("a", 4), ("b", 5), ("c", 6), ("c", 7)]
    p.feed(*[{"k": k, "v": v} for k, v in events[:3]])  # c finds two open groups: dropped
    p.drain()
    p.feed(*[{"k": k, "v": v} for k, v in events[3:]])
    p.drain()
    out = p.values()
    assert [v for v in out if "w" in v] == [
        {"w": "two", "n": 2, "s": 3},
        {"w": "two", "n": 2, "s": 7},
        {"w": "four", "n": 4, "s": 10},
        {"w": "two", "n": 2, "s": 11},
    ]
    assert [v for v in out if "k" in v] == [{"k": "a", "n": 2}, {"k": "b", "n": 2}, {"k": "c", "n": 2}]


def test_interval_tilt_frames_by_input_offset(pipeline) -> None:
    """`ingest="offset"`: each event's time is its offset, so interval windows are deterministic."""
    p = pipeline(
        """
        define window short from tumbling with interval = 2 end;
        define window long from tumbling with interval = 4 end;
        select {"w": window, "n": aggr::stats::count()} from in[short, long] into out;
        """
    ).start(ingest="offset")
    p.feed(*range(6))
    p.drain()
    p.feed(*range(6, 11))
    p.drain()
    short, long = {"w": "short", "n": 2}, {"w": "long", "n": 4}
    assert p.values() == [short, short, short, long, short, short, long]


def test_interval_window_groups_close_on_the_timer_without_more_input(pipeline) -> None:
    p = pipeline(
        f"""
        define window second from tumbling with interval = {SECOND_NS} end;
        select {{"k": group[0], "n": aggr::stats::count()}} from in[second] group by event.k into out;
        """
    ).start(trigger=TICK)
    p.feed({"k": "a"}, {"k": "b"}, {"k": "a"})
    # Independent groups run as separate streams: their windows' outputs may come in either order.
    closed = sorted(p.wait_for(2), key=lambda v: v["k"])
    assert closed == [{"k": "a", "n": 2}, {"k": "b", "n": 1}]


# --- partition_by -------------------------------------------------------------------------------


def by_event_field(values: list[dict[str, Any]], field: str) -> dict[Any, list[tuple[int, int]]]:
    """(count, event i) per value of the event's `field`, in output order."""
    seen: dict[Any, list[tuple[int, int]]] = {}
    for v in values:
        seen.setdefault(v["event"].get(field), []).append((v["count"], v["event"]["i"]))
    return seen


def test_partition_by_partition_keeps_one_state_per_input_partition(pipeline) -> None:
    p = pipeline(RFC_COUNTER, partitions={"in": 2}).start(partition_by="partition")
    p.feed(*[{"p": 0, "i": i} for i in range(3)], partition=0)
    p.feed(*[{"p": 1, "i": i} for i in range(2)], partition=1)
    p.drain()
    p.feed({"p": 1, "i": 2}, partition=1)
    p.drain()
    assert by_event_field(p.values(), "p") == {0: [(1, 0), (2, 1), (3, 2)], 1: [(1, 0), (2, 1), (3, 2)]}


# `partition_by="partition"` keys state by "{port}/{partition}", not by the channel topic's name,
# so a snapshot moves to an instance whose channels are other topics.
def test_partition_by_partition_state_moves_to_a_pipeline_reading_other_topics(
    pipeline, tmp_path: Path
) -> None:
    first = pipeline(RFC_COUNTER, partitions={"in": 2}).start(partition_by="partition")
    first.feed({"p": 0, "i": 0}, {"p": 0, "i": 1}, partition=0)
    first.feed({"p": 1, "i": 0}, partition=1)
    first.drain()
    snapshot = export_state(first.spark, first.checkpoint)
    first.stop()
    second = pipeline(RFC_COUNTER, partitions={"in": 2})
    import_state(second.checkpoint, snapshot)
    second.start(partition_by="partition")
    second.feed({"p": 0, "i": 2}, partition=0)
    second.feed({"p": 1, "i": 1}, partition=1)
    second.drain()
    assert by_event_field(second.values(), "p") == {0: [(3, 2)], 1: [(2, 1)]}


# Group streams are keyed by spellings of their numbers chosen for the operator's partition count
# (see keying.stream_keys); a snapshot moves to an instance with another count by stream number.
def test_group_stream_state_moves_to_an_instance_with_another_partition_count(pipeline, spark) -> None:
    text = """
    define window pairs from tumbling with size = 2 end;
    select {"k": group[0], "n": aggr::stats::count()} from in[pairs] group by event.k into out;
    """
    first = pipeline(text).start()
    first.feed(*[{"k": k} for k in "abc"])
    first.drain()
    snapshot = export_state(first.spark, first.checkpoint)
    first.stop()
    assert first.values() == []  # every window holds one event
    second = pipeline(text)
    import_state(second.checkpoint, snapshot)
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        second.start()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    second.feed(*[{"k": k} for k in "abc"])
    second.drain()
    assert sorted(second.values(), key=lambda v: v["k"]) == [{"k": k, "n": 2} for k in "abc"]


def test_partition_by_event_field_keeps_one_state_per_value(pipeline) -> None:
    p = pipeline(RFC_COUNTER).start(partition_by="event.user")
    p.feed({"user": "u1", "i": 0}, {"user": "u2", "i": 1}, {"user": "u1", "i": 2}, {"i": 3})
    p.drain()
    p.feed({"user": "u2", "i": 4}, {"i": 5})
    p.drain()
    assert by_event_field(p.values(), "user") == {
        "u1": [(1, 0), (2, 2)],
        "u2": [(1, 1), (2, 4)],
        None: [(1, 3), (2, 5)],  # no such field: one shared key
    }


def test_partition_by_rejects_anything_but_partition_or_an_event_path(pipeline) -> None:
    p = pipeline(RFC_COUNTER)
    with pytest.raises(UserError, match="partition_by must be"):
        p.start(partition_by="$meta.user")


# --- multi-input and nested pipelines -----------------------------------------------------------

TWO_INPUTS = """
define flow main
flow
  define pipeline join
  from in, control
  into out, alerts
  pipeline
    {body}
  end;
  create pipeline join;
end;
deploy flow main;
"""


def test_two_input_ports_from_two_topics_share_one_stateful_graph(pipeline) -> None:
    body = """
    define operator seen from generic::counter;
    create operator seen;
    select {"in": event} from in into seen;
    select {"control": event} from control into seen;
    select event from seen into out;
    select event from control where event == "stop" into alerts;
    """
    p = pipeline(troy_pipeline(TWO_INPUTS.format(body=body), "join")).start()
    p.feed(1, 2)
    p.feed("go", "stop", port="control")
    p.drain()
    p.feed(3)
    p.drain()
    out = p.values()
    assert sorted(v["count"] for v in out) == [1, 2, 3, 4, 5]  # one counter over both inputs
    assert [v["event"] for v in out if "in" in v["event"]] == [{"in": 1}, {"in": 2}, {"in": 3}]
    assert [v["event"] for v in out if "control" in v["event"]] == [{"control": "go"}, {"control": "stop"}]
    assert out[-1] == {"count": 5, "event": {"in": 3}}
    assert p.values("alerts") == ["stop"]


# Tremor feeds a pipeline in arrival order; Spark hands a micro-batch over without order, so each
# call merges its input partitions and ports by ingest time (`spark_stateful.arrival_order`). Here
# all events are in the query's first micro-batch and the reset arrived between events 2 and 3.
def test_two_input_ports_are_seen_in_arrival_order(pipeline) -> None:
    body = """
    define script counter
    script
      let state = match event of
        case "reset" => 0
        default => match type::is_null(state) of case true => 1 default => state + 1 end
      end;
      {"count": state, "event": event}
    end;
    create script counter;
    select event from in into counter;
    select event from reset into counter;
    select event from counter into out;
    """
    p = pipeline(troy_pipeline(TWO_INPUTS.format(body=body).replace("control", "reset"), "join"))
    p.feed(1, 2)
    time.sleep(0.01)  # distinct append times, so the arrival order is on the record
    p.feed("reset", port="reset")
    time.sleep(0.01)
    p.feed(3)
    p.start().drain()
    assert p.values() == [
        {"count": 1, "event": 1},
        {"count": 2, "event": 2},
        {"count": 0, "event": "reset"},
        {"count": 1, "event": 3},
    ]


def test_two_input_ports_of_a_stateless_pipeline(pipeline) -> None:
    body = """
    select {"in": event} from in into out;
    select {"control": event} from control into out;
    select event from control where event == "stop" into alerts;
    """
    p = pipeline(troy_pipeline(TWO_INPUTS.format(body=body), "join")).start()
    p.feed(1, 2)
    p.feed("go", "stop", port="control")
    p.drain()
    out = p.values()
    assert [v for v in out if "in" in v] == [{"in": 1}, {"in": 2}]
    assert [v for v in out if "control" in v] == [{"control": "go"}, {"control": "stop"}]
    assert p.values("alerts") == ["stop"]


def test_nested_pipelines_keep_their_own_state_across_micro_batches(pipeline) -> None:
    p = pipeline(
        """
        define pipeline numbering
        pipeline
          define script n
          script
            let state = match state of case null => 1 default => state + 1 end;
            {"n": state, "v": event}
          end;
          create script n;
          select event from in into n;
          select event from n into out;
        end;
        create pipeline a from numbering;
        create pipeline b from numbering;
        select event from in into a;
        select event from a into b;
        select event from b into out;
        """
    ).start()
    p.feed("x", "y")
    p.drain()
    p.feed("z")
    p.drain()
    assert p.values() == [{"n": i, "v": {"n": i, "v": v}} for i, v in ((1, "x"), (2, "y"), (3, "z"))]


# --- timers across restarts, moves and keys -------------------------------------------------------


def test_a_pending_batch_timeout_survives_a_query_restart_between_batches(pipeline) -> None:
    """Stop between batches once the events are in the batch's state, before its timeout; the
    restarted query flushes it without new input (Spark alone would wait for input to plan a batch)."""
    p = pipeline(
        f"""
        define operator b from generic::batch with count = 10, timeout = {2 * SECOND_NS} end;
        create operator b;
        select event from in into b;
        select event from b into out;
        """
    )
    p.feed(1, 2)
    p.start(trigger="1 hour")  # one batch at start, then nothing more before the stop
    poll(lambda: [p.query.lastProgress], lambda found: bool(found[0] and found[0]["numInputRows"]), 30)
    p.stop()
    assert p.values() == []  # stopped with the batch pending
    p.start(trigger=TICK)  # the timer is in the checkpoint: it fires without new input
    assert p.wait_for(1) == [[1, 2]]
    p.feed(3)
    assert p.wait_for(2) == [[1, 2], [3]]


def test_an_imported_pending_batch_flushes_on_the_timer_without_input(pipeline) -> None:
    """A snapshot holding a batch that waits for its timeout seeds a fresh query, which sets the timer."""
    p = pipeline(
        f"""
        define operator b from generic::batch with count = 10, timeout = {SECOND_NS} end;
        create operator b;
        select event from in into b;
        select event from b into out;
        """
    )
    pending = {"b": {"events": [1, 2], "first_ns": time.time_ns()}}  # as another runtime exports it
    import_state(p.checkpoint, {"format": FORMAT, "batch": 0, "keys": {"": pending}})
    p.start(trigger=TICK)
    assert p.wait_for(1) == [[1, 2]]
    p.feed(3)
    assert p.wait_for(2) == [[1, 2], [3]]


def test_interval_windows_with_partition_by_close_each_key_on_its_timer(pipeline) -> None:
    p = pipeline(
        f"""
        define window second from tumbling with interval = {SECOND_NS} end;
        select {{"k": group[0], "n": aggr::stats::count()}} from in[second] group by event.k into out;
        """
    ).start(trigger=TICK, partition_by="event.k")
    p.feed({"k": "a"}, {"k": "b"}, {"k": "a"}, b"not json")  # no field to key by: key "", then err
    out = p.wait_for(2)
    assert sorted(out, key=str) == sorted([{"k": "a", "n": 2}, {"k": "b", "n": 1}], key=str)
    assert [e["event"] for e in p.values("err")] == ["not json"]
