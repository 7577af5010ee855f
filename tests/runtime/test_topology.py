"""The flow graph as channels, and the reversed graph contraflow travels along."""

from __future__ import annotations

from pathlib import Path

import pytest

from contraflow.lang.troy.compiler import compile_source
from contraflow.runtime.settings import DEFAULT_TRIGGER_MS, FlowSettings, SettingsError
from contraflow.runtime.topology import Topology

FLOW = """
define flow f
args
  channels = {"default": {"capacity": 100}, "events/out": {"capacity": 10, "low_watermark": 0.2}},
  pipelines = {"default": {"trigger_ms": 250}, "q": {"trigger_ms": 0}}
flow
  define connector reader from file with config = {"path": "in", "mode": "read"} end;
  define connector writer from file with config = {"path": "out", "mode": "append"} end;
  define pipeline p pipeline select event from in into out; end;
  define pipeline q pipeline select event from in into out; end;
  create connector events from reader;
  create connector other from reader;
  create connector a from writer;
  create connector b from writer;
  create pipeline p;
  create pipeline q;
  connect /connector/events to /pipeline/p;
  connect /connector/events to /pipeline/q;
  connect /pipeline/p to /connector/a;
  connect /pipeline/q to /connector/b;
  connect /connector/other to /pipeline/q;
end;
deploy flow one from f;
deploy flow two from f;
"""


@pytest.fixture(scope="module")
def flows() -> dict[str, Topology]:
    deployment = compile_source(FLOW, "<test>", Path.cwd())
    return {fid: Topology.of(fid, graph) for fid, graph in deployment.flows.items()}


def test_one_topic_per_producing_port_and_a_consumer_per_reader(flows: dict[str, Topology]) -> None:
    one = flows["one"]
    assert sorted(one.channels) == ["one.events.out", "one.other.out", "one.p.out", "one.q.out"]
    fan_out = one.channels["one.events.out"]
    assert [r.consumer for r in fan_out.readers] == ["one.p.in", "one.q.in"]
    # Two producers into one pipeline port: two topics, read under the same consumer name.
    assert [(c.topic, r.consumer) for c, r in one.inputs_of("pipeline", "q")] == [
        ("one.events.out", "one.q.in"),
        ("one.other.out", "one.q.in"),
    ]


def test_each_deployment_has_its_own_channels(flows: dict[str, Topology]) -> None:
    assert not set(flows["one"].channels) & set(flows["two"].channels)


def test_the_reversed_graph_finds_the_sources_a_sink_must_stop(flows: dict[str, Topology]) -> None:
    one = flows["one"]
    assert one.upstream_connectors("a") == {"events"}
    assert one.upstream_connectors("b") == {"events", "other"}
    assert one.downstream_connectors("events") == {"a", "b"}
    assert one.downstream_connectors("other") == {"b"}
    assert one.upstream_connectors("events") == set()


def test_channel_settings_from_flow_args(flows: dict[str, Topology]) -> None:
    deployment = compile_source(FLOW, "<test>", Path.cwd())
    graph = deployment.flows["one"]
    names = {c.name for c in flows["one"].channels.values()}
    settings = FlowSettings.from_args("one", graph.args, names, set(graph.pipelines))
    assert settings.channel("p/out").capacity == 100
    events = settings.channel("events/out")
    assert (events.capacity, events.high, events.low) == (10, 10, 2)


def test_pipeline_triggers_from_flow_args(flows: dict[str, Topology]) -> None:
    graph = compile_source(FLOW, "<test>", Path.cwd()).flows["one"]
    names = {c.name for c in flows["one"].channels.values()}
    settings = FlowSettings.from_args("one", graph.args, names, set(graph.pipelines))
    p, q = settings.pipeline("p"), settings.pipeline("q")
    assert p.trigger(timers=False) == p.trigger(timers=True) == "250 milliseconds"  # the flow's default
    assert q.trigger(timers=False) is None  # 0: batches back to back (Spark's own default)
    assert q.trigger(timers=True) is None  # ... and a timer pipeline keeps its tick
    unset = FlowSettings.from_args("f", {}, set(), {"p"}).pipeline("p")
    assert unset.trigger(timers=False) == f"{DEFAULT_TRIGGER_MS} milliseconds"
    assert unset.trigger(timers=True) is None


@pytest.mark.parametrize(
    ("channels", "message"),
    [
        ({"nope/out": {"capacity": 1}}, "no channel 'nope/out'"),
        ({"default": {"size": 1}}, "unknown key 'size'"),
        ({"default": {"low_watermark": 0.9, "high_watermark": 0.5}}, "low_watermark < high_watermark"),
        ({"default": {"capacity": "big"}}, "must be a number"),
    ],
)
def test_bad_channel_settings_are_user_errors(channels: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        FlowSettings.from_args("f", {"channels": channels}, {"events/out"})


@pytest.mark.parametrize(
    ("pipelines", "message"),
    [
        ({"nope": {"trigger_ms": 1}}, r"no pipeline 'nope' \(pipelines: p\)"),
        ({"default": {"interval": 1}}, "unknown key 'interval'"),
        ({"p": {"trigger_ms": -5}}, "trigger_ms must be >= 0"),
        ({"p": {"trigger_ms": "fast"}}, "must be a number"),
        ([1], "must be a record of pipeline settings"),
    ],
)
def test_bad_pipeline_settings_are_user_errors(pipelines: object, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        FlowSettings.from_args("f", {"pipelines": pipelines}, set(), {"p"})


def test_append_linger_from_flow_args() -> None:
    assert FlowSettings.from_args("f", {}, set()).appends.linger_ms == 20.0
    settings = FlowSettings.from_args("f", {"appends": {"linger_ms": 2}}, set())
    assert settings.appends.linger_ms == 2.0 and isinstance(settings.appends.linger_ms, float)
    with pytest.raises(SettingsError, match="linger_ms must be >= 0"):
        FlowSettings.from_args("f", {"appends": {"linger_ms": -1}}, set())
    with pytest.raises(SettingsError, match="unknown key 'batch'"):
        FlowSettings.from_args("f", {"appends": {"batch": 1}}, set())


def test_priority_from_flow_args() -> None:
    assert FlowSettings.from_args("f", {}, set()).priority == "normal"
    assert FlowSettings.from_args("f", {"priority": "critical"}, set()).priority == "critical"
    with pytest.raises(SettingsError, match="`priority` must be one of 'critical', 'high'.*not 'urgent'"):
        FlowSettings.from_args("f", {"priority": "urgent"}, set())


def test_cancel_ceilings_from_flow_args() -> None:
    def ceilings(cancel: dict[str, float]) -> tuple[float, float]:
        settings = FlowSettings.from_args("f", {"cancel": cancel}, set()).cancel
        return settings.ceiling(shutdown=False), settings.ceiling(shutdown=True)

    assert ceilings({}) == (10.0, 120.0)  # undeploy, Ctrl-C
    assert ceilings({"ceiling_s": 4}) == (4.0, 4.0)  # one ceiling set bounds both
    assert ceilings({"shutdown_ceiling_s": 300}) == (10.0, 300.0)
    assert ceilings({"ceiling_s": 4, "shutdown_ceiling_s": 60}) == (4.0, 60.0)
    with pytest.raises(SettingsError, match="cancel shutdown_ceiling_s must be > 0, got 0"):
        ceilings({"shutdown_ceiling_s": 0})
