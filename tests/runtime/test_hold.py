"""The hold policy: which reasons hold which connector's gate, each lifted only by its own cause."""

from __future__ import annotations

from pathlib import Path

from contraflow.lang.troy.compiler import compile_source
from contraflow.runtime.gate import Gate
from contraflow.runtime.hold import Breaker, BreakerCause, HoldPolicy
from contraflow.runtime.routes import Routes
from contraflow.runtime.topology import Topology

FLOW = """
define flow f
flow
  define connector reader from file with config = {"path": "in", "mode": "read"} end;
  define connector writer from file with config = {"path": "out", "mode": "append"} end;
  define pipeline p pipeline select event from in into out; end;
  define pipeline q pipeline select event from in into out; end;
  create connector events from reader;
  create connector quiet from reader;
  create connector a from writer;
  create connector b from writer;
  create pipeline p;
  create pipeline q;
  connect /connector/events to /pipeline/p;
  connect /pipeline/p to /connector/a;
  connect /connector/quiet to /pipeline/q;
  connect /pipeline/q to /connector/b;
end;
deploy flow one from f;
"""


def policy() -> tuple[HoldPolicy, dict[str, Gate], Topology]:
    graph = compile_source(FLOW, "<test>", Path.cwd()).flows["one"]
    topology = Topology.of("one", graph)
    gates = {alias: Gate() for alias in graph.connectors}
    return HoldPolicy(Routes(topology, graph.pipelines), gates, {"events", "quiet"}), gates, topology


def test_a_breaker_holds_only_the_sources_that_reach_its_sink() -> None:
    holds, gates, _ = policy()
    open_sinks = holds.set_breaker(Breaker("a", BreakerCause.CONNECTION), True, "connection lost")
    assert open_sinks == {"a"}
    assert gates["events"].reasons == ["breaker open: a connection lost"]
    assert gates["quiet"].is_open, "quiet feeds b only"
    assert holds.breakers() == {"a": "connection lost"}


def test_causes_are_independent() -> None:
    holds, gates, _ = policy()
    holds.set_breaker(Breaker("a", BreakerCause.CONNECTION), True, "connection lost")
    holds.set_breaker(Breaker("a", BreakerCause.CAPACITY), True, "all slots busy")
    assert holds.breakers() == {"a": "connection lost; all slots busy"}
    holds.set_breaker(Breaker("a", BreakerCause.CAPACITY), False, "recovered")
    assert holds.is_open("a") and not gates["events"].is_open, "a freed slot cannot close a lost connection"
    assert holds.set_breaker(Breaker("a", BreakerCause.CONNECTION), False, "connected") == frozenset()
    assert gates["events"].is_open and holds.breakers() == {}


def test_a_pause_and_back_pressure_are_their_own_reasons() -> None:
    holds, gates, _ = policy()
    holds.pause("events", True)
    holds.backpressure("events", "events/out", True, "back-pressure: channel events/out at 10 events")
    holds.pause("events", False)
    assert gates["events"].reasons == ["back-pressure: channel events/out at 10 events"]
    holds.backpressure("events", "events/out", False, "")
    assert gates["events"].is_open


def test_qos_pauses_hold_the_sources_feeding_the_pipeline_until_they_end() -> None:
    holds, gates, topology = policy()
    now = 1_000_000_000
    holds.apply_qos_pauses({"qos:p/slow": ("p", now + 250_000_000)}, topology.feeding_pipeline, now)
    assert gates["events"].reasons == ["qos back-off in p/slow for 250 ms"]
    assert gates["quiet"].is_open and gates["a"].is_open, "only sources feeding p are held"
    holds.apply_qos_pauses({}, topology.feeding_pipeline, now)
    assert gates["events"].is_open
