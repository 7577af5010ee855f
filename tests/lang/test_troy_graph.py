"""The flow graph Troy compiles to: what the runtime and the Spark executor rely on."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from contraflow.lang.errors import LangError, LangErrors
from contraflow.lang.graph import Connection, Edge, PipelineGraph
from contraflow.lang.troy.compiler import compile_file, compile_source

FLOW = """
use tremor::connectors;
define flow main
args dir = "/tmp"
flow
  define connector src from file
  args name
  with codec = "json", preprocessors = ["separate"], config = {"path": "#{args.name}", "mode": "read"} end;
  define pipeline p
  into out, err
  pipeline
    define window w from tumbling with size = 2 end;
    select {"n": aggr::stats::count()} from in[w] into out;
  end;
  define pipeline q pipeline select event from in into out; end;
  create connector src with name = "#{args.dir}/in.json" end;
  create connector out from connectors::console;
  create pipeline p;
  create pipeline q;
  connect /connector/src to /pipeline/q;
  connect /pipeline/q to /pipeline/p;
  connect /pipeline/p/out to /connector/out/stdout;
end;
deploy flow a from main;
deploy flow b from main with dir = "/var" end;
"""


def test_graph_is_json_and_keeps_the_structure() -> None:
    deployment = compile_source(FLOW, "flow.troy")
    data = orjson.loads(orjson.dumps(deployment.to_dict()))
    a = data["flows"]["a"]
    assert a["connectors"]["src"]["kind"] == "file"
    assert a["connectors"]["src"]["config"] == {"path": "/tmp/in.json", "mode": "read"}
    assert a["connectors"]["src"]["preprocessors"] == [{"name": "separate", "config": {}}]
    assert a["pipelines"]["p"]["stateful"] is True
    assert a["pipelines"]["q"]["stateful"] is False
    select = a["pipelines"]["p"]["nodes"]["select_1"]
    assert select["spec"]["windows"][0] == {
        "name": "w",
        "kind": "tumbling",
        "size": 2,
        "interval_ns": None,
        "max_groups": None,
        "emit_empty_windows": False,
        "slide": None,
        "lateness_ns": None,
        "gap_ns": None,
        "max_duration_ns": None,
        "script": None,
        "has_state": False,
        "state": None,
    }
    assert select["spec"]["target"]["source"] == '{"n": aggr::stats::count()}'
    assert select["spec"]["aggregates"] == ["aggr::stats::count"]
    assert data["flows"]["b"]["connectors"]["src"]["config"]["path"] == "/var/in.json"


def test_connections_default_ports_and_explicit_ones() -> None:
    flow = compile_source(FLOW, "flow.troy").flows["a"]
    assert flow.connections == [
        Connection("connector", "src", "out", "pipeline", "q", "in"),
        Connection("pipeline", "q", "out", "pipeline", "p", "in"),
        Connection("pipeline", "p", "out", "connector", "out", "stdout"),
    ]
    assert flow.sources() == ["src"]
    assert flow.sinks() == ["out"]


def test_deployments_are_independent_instances() -> None:
    deployment = compile_source(FLOW, "flow.troy")
    a, b = deployment.flows["a"], deployment.flows["b"]
    assert a.pipelines["p"] is not b.pipelines["p"]
    assert a.args == {"dir": "/tmp"} and b.args == {"dir": "/var"}


def test_pipeline_nodes_edges_and_ports() -> None:
    graph: PipelineGraph = compile_source(FLOW, "flow.troy").flows["a"].pipelines["p"]
    kinds = {name: node.kind for name, node in graph.nodes.items()}
    assert kinds == {"in": "input", "out": "output", "err": "output", "select_1": "select"}
    assert graph.edges == [Edge("in", "out", "select_1", "in"), Edge("select_1", "out", "out", "in")]
    assert graph.successors("in") == [Edge("in", "out", "select_1", "in")]
    assert graph.predecessors("out") == [Edge("select_1", "out", "out", "in")]
    position = graph.nodes["select_1"].position
    assert position is not None and (position.file, position.line) == ("flow.troy", 13)


def test_all_errors_of_a_file_are_reported_together() -> None:
    text = FLOW.replace("from file", "from fiel").replace('codec = "json"', 'codec = "jsn"')
    text = text.replace("/pipeline/q to /pipeline/p;", "/pipeline/q to /pipeline/pp;")
    with pytest.raises(LangErrors) as info:
        compile_source(text, "flow.troy")
    messages = [e.message for e in info.value.errors]
    assert messages == ["unknown connector kind 'fiel'", "unknown codec 'jsn'", "unknown pipeline 'pp'"]
    rendered = str(info.value)
    assert "hint: did you mean 'file'?" in rendered
    assert "hint: did you mean 'json'?" in rendered


def test_a_single_error_is_a_lang_error_with_caret() -> None:
    with pytest.raises(LangError) as info:
        compile_source("define flow main flow end;\ndeploy flow mian;\n", "x.troy")
    err = info.value
    assert (err.position.line, err.position.column, err.position.length) == (2, 13, 4)
    assert err.render().splitlines() == [
        "x.troy:2:13: unknown flow 'mian'",
        "   2 | deploy flow mian;",
        "                   ^^^^",
        "hint: did you mean 'main'?",
    ]


def test_modules_come_from_the_file_directory_then_contraflow_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local, shared = tmp_path / "app", tmp_path / "shared"
    (local / "lib").mkdir(parents=True)
    (shared / "lib").mkdir(parents=True)
    (shared / "lib" / "defs.troy").write_text(
        'define connector c from metronome with config = {"interval": 1} end;\n'
    )
    (shared / "lib" / "only_shared.troy").write_text("define connector s from null;\n")
    (local / "lib" / "defs.troy").write_text(
        'define connector c from metronome with config = {"interval": 2} end;\n'
    )
    flow = local / "flow.troy"
    flow.write_text(
        "use lib::defs;\nuse lib::only_shared as sh;\n"
        "define flow main flow create connector c from defs::c; create connector s from sh::s; end;\n"
        "deploy flow main;\n"
    )
    monkeypatch.setenv("CONTRAFLOW_PATH", str(shared))
    graph = compile_file(flow).flows["main"]
    assert graph.connectors["c"].config == {"interval": 2}  # the file's directory wins
    assert graph.connectors["s"].kind == "null"
    monkeypatch.delenv("CONTRAFLOW_PATH")
    with pytest.raises(LangError) as info:
        compile_file(flow)
    assert info.value.message == "unknown module 'lib::only_shared'"  # and nothing cascades from it


def test_a_tremor_kind_this_build_lacks_is_named_with_the_kinds_there_are() -> None:
    text = FLOW.replace("from file", "from elastic")
    with pytest.raises(LangError) as info:
        compile_source(text, "flow.troy")
    error = info.value
    assert (
        error.message
        == "connector kind 'elastic' is not available in this build (it needs an Elasticsearch cluster)"
    )
    assert (
        error.hint.startswith("the kinds available are: ") and "file, " in error.hint and "kv, " in error.hint
    )


TREMOR_013_FLOW = """
define flow main
flow
  use troy::connectors;
  use troy::pipelines;
  define connector lines_in from file
  with
    codec = "json",
    preprocessors = ["lines", "remove-empty", "textual-length-prefixed"],
    config = {"path": "in.json", "mode": "read"}
  end;
  define connector sorted_out from file
  with
    codec = "json-sorted",
    postprocessors = ["textual-length-prefixed", "lines"],
    config = {"path": "out.json", "mode": "truncate"}
  end;
  define pipeline main
  into out, exit
  pipeline
    select event from in where event != "exit" into out/out;
    select event from in where event == "exit" into out/exit;
  end;
  create connector lines_in;
  create connector sorted_out;
  create connector exit from connectors::exit;
  create connector metrics from connectors::metrics;
  create connector stdio from connectors::tty;
  create pipeline main;
  create pipeline pass from pipelines::passthrough;
  connect /connector/lines_in to /pipeline/main;
  connect /pipeline/main to /connector/sorted_out;
  connect /pipeline/main/exit to /connector/exit;
  connect /connector/metrics to /pipeline/pass;
  connect /pipeline/pass to /connector/sorted_out;
  connect /pipeline/pass to /connector/stdio;
end;
deploy flow main
"""


def test_a_flow_written_for_tremor_0_13_compiles_as_it_is() -> None:
    """troy:: module names and their `tty`, the `lines` and `json-sorted` names, Tremor's processors,
    `into out/<port>` and a last `deploy` without `;`."""
    flow = compile_source(TREMOR_013_FLOW, "flow.troy").flows["main"]
    assert flow.connectors["metrics"].kind == "metrics"
    tty = flow.connectors["stdio"]  # the line console of Tremor's library
    assert (tty.kind, tty.codec and tty.codec.name) == ("stdio", "string")
    assert [p.name for p in tty.preprocessors] == [p.name for p in tty.postprocessors] == ["lines"]
    main = flow.pipelines["main"]
    routed = {(e.to_node, e.to_port) for e in main.edges if e.from_node.startswith("select_")}
    assert routed == {("out", "in"), ("exit", "in")}
    assert [p.name for p in flow.connectors["lines_in"].preprocessors] == [
        "lines",
        "remove-empty",
        "textual-length-prefixed",
    ]


def test_a_quoted_name_is_the_text_between_its_backticks() -> None:
    text = TREMOR_013_FLOW.replace("lines_in", "`lines-in`")
    flow = compile_source(text, "flow.troy").flows["main"]
    assert "lines-in" in flow.connectors
    assert any(c.from_alias == "lines-in" for c in flow.connections)
