"""Which routing-only pipelines run as aliases of their inputs, and the channels that then run.

Compiled flows only, no SPU or Spark: the runs themselves are in
tests/runtime/test_lineage.py (acks wait for the sink reading the alias),
test_contraflow.py (pause), test_alias_flow.py (the query's records, a
restart) and tests/e2e/test_crash_restart.py (SIGKILL, exactly once).
"""

from __future__ import annotations

from pathlib import Path

from contraflow.lang.troy.compiler import compile_source
from contraflow.runtime.aliases import AliasPlan, plan_aliases
from contraflow.runtime.topology import Topology

HEAD = """
define flow f
flow
  define connector reader from file with config = {"path": "in", "mode": "read"} end;
  define connector writer from file with config = {"path": "out", "mode": "append"} end;
  define pipeline pass pipeline select event from in into out; end;
  define pipeline upper pipeline select {"n": event} from in into out; end;
  define pipeline two from a, b into x, y pipeline select event from a into x; select event from b into y; end;
  define pipeline merge from a, b pipeline select event from a into out; select event from b into out; end;
  create connector src from reader;
  create connector other from reader;
  create connector sink from writer;
  create connector sink2 from writer;
"""


def plan(body: str, kept: frozenset[str] = frozenset()) -> tuple[Topology, AliasPlan]:
    graph = compile_source(f"{HEAD}{body}\nend;\ndeploy flow one from f;\n", "<test>", Path.cwd()).flows[
        "one"
    ]
    layout = Topology.of("one", graph)
    return layout, plan_aliases(layout, graph.pipelines, lambda alias: alias in kept)


def readers(topology: Topology, topic: str) -> list[str]:
    return [r.consumer for r in topology.channels[topic].readers]


def test_a_pass_pipelines_sink_reads_the_sources_channel() -> None:
    layout, aliases = plan("""
  create pipeline pass;
  connect /connector/src to /pipeline/pass;
  connect /pipeline/pass to /connector/sink;
  connect /pipeline/pass to /connector/sink2;
""")
    assert sorted(layout.channels) == ["one.pass.out", "one.src.out"]  # as written, for status
    assert sorted(aliases.topology.channels) == ["one.src.out"]  # nothing is written twice
    assert readers(aliases.topology, "one.src.out") == ["one.sink.in", "one.sink2.in"]
    assert (
        aliases.topic_of("one.pass.out") == "one.src.out" and aliases.topic_of("one.src.out") == "one.src.out"
    )
    assert aliases.inputs == {"pass": ["one.src.out"]}
    assert [(t, r.consumer) for t, r in aliases.pipelines["pass"]] == [
        ("one.src.out", "one.sink.in"),
        ("one.src.out", "one.sink2.in"),
    ]
    # The sinks' breakers now hold the source directly.
    assert aliases.topology.upstream_connectors("sink") == {"src"}


def test_a_chain_of_pass_pipelines_reads_its_first_input_and_ports_keep_their_inputs() -> None:
    _, aliases = plan("""
  create pipeline first from pass;
  create pipeline second from pass;
  create pipeline two;
  connect /connector/src to /pipeline/first;
  connect /pipeline/first to /pipeline/second;
  connect /pipeline/second to /pipeline/two/a;
  connect /connector/other to /pipeline/two/b;
  connect /pipeline/two/x to /connector/sink;
  connect /pipeline/two/y to /connector/sink2;
""")
    assert sorted(aliases.topology.channels) == ["one.other.out", "one.src.out"]
    assert readers(aliases.topology, "one.src.out") == ["one.sink.in"]
    assert readers(aliases.topology, "one.other.out") == ["one.sink2.in"]
    assert [(t, r.consumer) for t, r in aliases.pipelines["first"]] == [("one.src.out", "one.sink.in")]
    assert aliases.topic_of("one.two.x") == "one.src.out"


def test_merges_changed_events_and_kept_queries_stay_queries() -> None:
    _, aliases = plan(
        """
  create pipeline merge;
  create pipeline upper;
  create pipeline fanin from pass;
  create pipeline kept from pass;
  connect /connector/src to /pipeline/merge/a;
  connect /connector/other to /pipeline/merge/b;
  connect /pipeline/merge to /connector/sink;
  connect /connector/src to /pipeline/upper;
  connect /pipeline/upper to /connector/sink;
  connect /connector/src to /pipeline/fanin;
  connect /connector/other to /pipeline/fanin;
  connect /pipeline/fanin to /connector/sink2;
  connect /connector/other to /pipeline/kept;
  connect /pipeline/kept to /connector/sink2;
""",
        kept=frozenset({"kept"}),
    )
    # Two inputs into one output, an event changed, two channels into one port, `route_in_log = 0`.
    assert aliases.pipelines == {}
    assert sorted(aliases.topology.channels) == [
        "one.fanin.out",
        "one.kept.out",
        "one.merge.out",
        "one.other.out",
        "one.src.out",
        "one.upper.out",
    ]


def test_two_pass_pipelines_into_one_sink_port_keep_one_query() -> None:
    # Both aliased, the sink would read one topic once under one consumer name, not each event twice.
    _, aliases = plan("""
  create pipeline pass;
  create pipeline again from pass;
  connect /connector/src to /pipeline/pass;
  connect /connector/src to /pipeline/again;
  connect /pipeline/pass to /connector/sink;
  connect /pipeline/again to /connector/sink;
""")
    assert list(aliases.pipelines) == ["pass"] and "one.again.out" in aliases.topology.channels
    assert readers(aliases.topology, "one.src.out") == ["one.again.in", "one.sink.in"]


def test_a_pipeline_feeding_itself_stays_a_query() -> None:
    _, aliases = plan("""
  create pipeline two;
  connect /connector/src to /pipeline/two/a;
  connect /pipeline/two/x to /pipeline/two/b;
  connect /pipeline/two/y to /connector/sink;
""")
    assert aliases.pipelines == {} and "one.two.y" in aliases.topology.channels
