"""The runtime half of the QoS operators: routes around open breakers, governors fed by deliveries,
signals published to the SPU, and a round robin steering events away from a sink whose server is down."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from contraflow import control
from contraflow.lang.graph import FlowGraph
from contraflow.lang.troy.compiler import compile_source
from contraflow.runtime.channels import channel_topic
from contraflow.runtime.qos_feed import QosFeed
from contraflow.runtime.routes import Routes, Scope
from contraflow.runtime.topology import Topology
from contraflow.spu.client import AsyncSpuClient, SpuClient
from tests.runtime.harness import flow_id, read_events, running, troy, wait_for
from tests.runtime.http_target import Target
from tests.runtime.test_contraflow import emitted, free_port

SPREAD = """
  define pipeline spread
  into a, b, err
  pipeline
    define operator rr from qos::roundrobin with outputs = ["a", "b"] end;
    create operator rr;
    select event from in into rr;
    select event from rr/a into a;
    select event from rr/b into b;
  end;
  create pipeline spread;
"""

GOVERNED = """
  define pipeline guard
  into out, overflow, err
  pipeline
    define operator slow from qos::backpressure with timeout = 100, steps = [50, 200] end;
    define operator share from qos::percentile with timeout = 100, step_down = 0.25 end;
    create operator slow;
    create operator share;
    select event from in into slow;
    select event from slow into share;
    select event from slow/overflow into overflow;
    select event from share into out;
    select event from share/overflow into overflow;
  end;
  create pipeline guard;
"""


def compiled(fid: str, body: str) -> FlowGraph:
    return compile_source(troy(fid, body), "<test>").flows[fid]


def fanout_flow(fid: str) -> FlowGraph:
    """ticks -> spread (round robin a/b) -> sink_a, sink_b; a copy of every event also to `audit`."""
    return compiled(
        fid,
        SPREAD
        + """
  define connector ticks from metronome with config = {"interval": 1000000000} end;
  create connector ticks;
  create connector sink_a from lines with path = "a.jsonl", mode = "truncate" end;
  create connector sink_b from lines with path = "b.jsonl", mode = "truncate" end;
  create connector audit from lines with path = "audit.jsonl", mode = "truncate" end;
  create pipeline pass;
  connect /connector/ticks to /pipeline/spread;
  connect /connector/ticks to /pipeline/pass;
  connect /pipeline/pass to /connector/audit;
  connect /pipeline/spread/a to /connector/sink_a;
  connect /pipeline/spread/b to /connector/sink_b;
""",
    )


def test_a_round_robin_absorbs_one_open_breaker_but_not_both() -> None:
    graph = fanout_flow("routes")
    routes = Routes(Topology.of("routes", graph), graph.pipelines)
    rr = Scope("spread", "", graph.pipelines["spread"])
    assert routes.with_open(frozenset()).of_source("ticks") == frozenset()
    routes.with_open(frozenset({"sink_b"}))
    assert routes.of_source("ticks") == frozenset()
    assert routes.of_port(rr, "rr", "b") == {"sink_b"} and routes.of_port(rr, "rr", "a") == frozenset()
    assert routes.with_open(frozenset({"sink_a", "sink_b"})).of_source("ticks") == {"sink_a", "sink_b"}
    # The fan-out to `audit` has no alternative: its breaker stops the source on its own.
    assert routes.with_open(frozenset({"audit", "sink_b"})).of_source("ticks") == {"audit"}
    assert routes.sinks_of_port(rr, "rr", ["a"]) == {("sink_a", channel_topic("routes", "spread", "a"))}


def test_without_a_round_robin_every_reachable_sink_holds_the_source() -> None:
    graph = compiled(
        "plain",
        """
  define connector ticks from metronome with config = {"interval": 1000000000} end;
  create connector ticks;
  create connector out from lines with path = "out.jsonl", mode = "truncate" end;
  create pipeline pass;
  connect /connector/ticks to /pipeline/pass;
  connect /pipeline/pass to /connector/out;
""",
    )
    routes = Routes(Topology.of("plain", graph), graph.pipelines)
    assert routes.with_open(frozenset({"out"})).of_source("ticks") == {"out"}


def test_failed_deliveries_lower_the_published_signals(spu_addr: str, spu: SpuClient) -> None:
    fid = flow_id("governed")
    graph = compiled(
        fid,
        GOVERNED
        + """
  define connector ticks from metronome with config = {"interval": 1000000000} end;
  create connector ticks;
  create connector out from lines with path = "out.jsonl", mode = "truncate" end;
  create connector spill from lines with path = "spill.jsonl", mode = "truncate" end;
  connect /connector/ticks to /pipeline/guard;
  connect /pipeline/guard/out to /connector/out;
  connect /pipeline/guard/overflow to /connector/spill;
""",
    )
    out_topic = channel_topic(fid, "guard", "out")
    spill_topic = channel_topic(fid, "guard", "overflow")
    signals = control.signals(f"{fid}.guard")

    async def scenario() -> None:
        client = AsyncSpuClient(spu_addr)
        try:
            feed = QosFeed(fid, graph.pipelines, Routes(Topology.of(fid, graph), graph.pipelines), client)
            assert {n.path: n.topics for n in feed.governed} == {
                "slow": {out_topic, spill_topic},  # `slow/out` reaches both through `share`
                "share": {out_topic},
            }
            await feed.publish()  # neutral signals first: a restart does not inherit the last run's
            assert signals.get(spu) == {"slow": {"backoff_until_ns": 0}, "share": {"perc": 1.0}}

            before_ns = time.time_ns()
            feed.delivery(spill_topic, [0], failed=True)  # behind `slow` only
            feed.delivery(out_topic, [0, 0], failed=True)  # behind both: two events failed
            await asyncio.sleep(0.3)
            await feed.publish()
            published = signals.get(spu)
            assert published["share"] == {"perc": 0.5}
            # Three failures in a row: the back-off stays at its last, 200 ms step.
            assert (
                before_ns + 200_000_000
                <= published["slow"]["backoff_until_ns"]
                <= time.time_ns() + 200_000_000
            )

            now_ms = time.time_ns() // 1_000_000
            feed.delivery(out_topic, [now_ms], failed=False)  # timely: the back-off ends, perc creeps up
            await feed.publish()  # within the publish interval: not written yet
            assert signals.get(spu)["share"] == {"perc": 0.5}
            await asyncio.sleep(0.3)
            await feed.publish()
            assert signals.get(spu)["share"]["perc"] > 0.5
        finally:
            await client.close()

    asyncio.run(scenario())


def test_round_robin_steers_events_away_from_a_sink_whose_server_is_down(
    spark, spu, spu_addr, tmp_path: Path
) -> None:
    down = Target()
    down.port = free_port()  # nothing listens: the sink's breaker stays open
    out_a = tmp_path / "a.jsonl"
    fid = flow_id("steer")
    source = troy(
        fid,
        SPREAD
        + f"""
  define connector ticks from metronome with config = {{"interval": 20000000}} end;
  create connector ticks;
  create connector sink_a from lines with path = "{out_a}", mode = "truncate" end;
  define connector poster from http_client
  with codec = "json", config = {{"url": "{down.url}"}},
       reconnect = {{"retry": {{"interval_ms": 100, "growth_rate": 1, "max_retries": 1000}}}}
  end;
  create connector sink_b from poster;
  connect /connector/ticks to /pipeline/spread;
  connect /pipeline/spread/a to /connector/sink_a;
  connect /pipeline/spread/b to /connector/sink_b;
""",
    )
    topic_b = channel_topic(fid, "spread", "b")

    def appended_to_b() -> int:
        return spu.describe_topic(topic_b).partitions[0].high_watermark

    def delivered() -> list[int]:
        return [e["id"] for e in read_events(out_a)] + [e["id"] for e in down.received()]  # type: ignore[index]

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", source) as runtime:
            flow = runtime.flows[fid]
            await wait_for(
                lambda: control.signals(f"{fid}.spread").get(spu) == {"rr": {"unavailable": ["b"]}},
                what="output b published as unavailable",
            )
            assert "sink_b" in flow.breakers
            await wait_for(lambda: len(read_events(out_a)) >= 20, what="events at sink_a")
            await asyncio.sleep(1.0)  # batches planned before the signal was published are done
            in_b = appended_to_b()
            at_a = len(read_events(out_a))
            await wait_for(lambda: len(read_events(out_a)) >= at_a + 30, what="more events at sink_a")
            assert appended_to_b() == in_b, "the round robin kept routing to the unavailable output"

            down.start()  # sink_b's server comes up: b is available again and gets its share
            await wait_for(lambda: "sink_b" not in flow.breakers, what="sink_b's breaker to close")
            await wait_for(
                lambda: control.signals(f"{fid}.spread").get(spu) == {"rr": {"unavailable": []}},
                what="b published as available",
            )
            routed = appended_to_b()
            await wait_for(lambda: appended_to_b() >= routed + 10, what="new events routed to b")
            await wait_for(lambda: len(down.received()) >= routed + 10, what="events at sink_b")
            # Every event emitted is delivered before the flow stops: the stop's drain is bounded by
            # the undeploy ceiling (10 s), which a loaded box's last micro-batch can outlast, leaving
            # the last events in the channel (kept, not lost), which is not what this test is about.
            await flow.set_connector_paused("ticks", True)
            await wait_for(lambda: len(delivered()) >= emitted(flow), what="every emitted event delivered")
        total = emitted(flow)
        assert sorted(delivered()) == list(range(total)), "events lost or duplicated"

    try:
        asyncio.run(scenario())
    finally:
        down.stop()


def test_a_pausing_back_off_names_the_sources_to_hold_until_it_ends(spu_addr: str) -> None:
    fid = flow_id("pausing")
    graph = compiled(
        fid,
        """
  define pipeline gentle
  pipeline
    define operator slow from qos::backpressure with timeout = 100, steps = [300], method = "pause" end;
    create operator slow;
    select event from in into slow;
    select event from slow into out;
  end;
  create pipeline gentle;
  define connector ticks from metronome with config = {"interval": 1000000000} end;
  create connector ticks;
  create connector out from lines with path = "out.jsonl", mode = "truncate" end;
  connect /connector/ticks to /pipeline/gentle;
  connect /pipeline/gentle to /connector/out;
""",
    )
    topology = Topology.of(fid, graph)
    assert topology.feeding_pipeline("gentle") == {"ticks"}

    async def scenario() -> None:
        client = AsyncSpuClient(spu_addr)
        try:
            feed = QosFeed(fid, graph.pipelines, Routes(topology, graph.pipelines), client)
            assert feed.pauses(time.time_ns()) == {}
            now_ms = time.time_ns() // 1_000_000
            feed.delivery(channel_topic(fid, "gentle", "out"), [now_ms - 500], failed=False)  # too slow
            paused = feed.pauses(time.time_ns())
            assert list(paused) == ["qos:gentle/slow"] and paused["qos:gentle/slow"][0] == "gentle"
            until_ns = paused["qos:gentle/slow"][1]
            assert feed.pauses(until_ns + 1) == {}  # the back-off is over: the sources pull again
        finally:
            await client.close()

    asyncio.run(scenario())
