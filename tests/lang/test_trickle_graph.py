"""Invariants of compiled pipeline graphs that the runtime and the Spark executor depend on."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from contraflow.lang.errors import SourceText
from contraflow.lang.graph import Edge, Node, PipelineGraph, ScriptSpec, SelectSpec
from contraflow.lang.script.compiler import compile_expr, compile_script, compile_select
from contraflow.lang.troy.compiler import TroyCompiler, compile_file, compile_trickle_file

CASES = Path(__file__).parent / "cases"
VALID = sorted(
    p for p in CASES.iterdir() if p.name.startswith(("troy-", "trickle-")) and not (p / "error.txt").exists()
)


def pipelines_of(case: Path) -> list[PipelineGraph]:
    if case.name.startswith("trickle-"):
        return [compile_trickle_file(case / "query.trickle", search_path=[])]
    search = case / "search"
    deployment = compile_file(case / "flow.troy", search_path=[search] if search.is_dir() else [])
    return [p for flow in deployment.flows.values() for p in flow.pipelines.values()]


def all_graphs(graph: PipelineGraph) -> list[PipelineGraph]:
    nested = [n.spec for n in graph.nodes.values() if isinstance(n.spec, PipelineGraph)]
    return [graph, *[g for sub in nested for g in all_graphs(sub)]]


def query(text: str) -> PipelineGraph:
    return TroyCompiler(search_path=[]).compile_query(SourceText("q.trickle", text), Path.cwd())


@pytest.mark.parametrize("case", VALID, ids=[p.name for p in VALID])
def test_edges_connect_existing_ports(case: Path) -> None:
    for top in pipelines_of(case):
        for graph in all_graphs(top):
            for edge in graph.edges:
                assert edge.from_port in graph.nodes[edge.from_node].outputs, edge
                assert edge.to_port in graph.nodes[edge.to_node].inputs, edge
            assert graph.stateful == any(n.stateful for n in graph.nodes.values())
            orjson.dumps(graph.to_dict())


def test_stateful_comes_from_windows_state_and_stateful_operators() -> None:
    assert not query("select event from in into out;").stateful
    assert query(
        "define window w from tumbling with size = 2 end;\nselect event from in[w] into out;\n"
    ).stateful
    assert query("define script s script let state = 1; event end;\ncreate script s;\n").stateful
    assert not query("define script s script event end;\ncreate script s;\n").stateful
    assert query("define operator c from generic::counter;\ncreate operator c;\n").stateful
    assert not query("define operator p from passthrough;\ncreate operator p;\n").stateful
    nested = query(
        "define pipeline inner pipeline define operator b from generic::batch with count = 2 end;\n"
        "create operator b; select event from in into b; select event from b into out; end;\n"
        "create pipeline inner;\n"
    )
    assert nested.nodes["inner"].stateful and nested.stateful


def test_select_spec_carries_expressions_group_and_windows() -> None:
    graph = query(
        "define window a from tumbling with size = 10 end;\n"
        "define window b from tumbling with size = 100 end;\n"
        'select {"n": aggr::stats::count()} from in[a, b] where event.ok\n'
        "group by set(event.host, each(event.tags)) into out having event.n > 1;\n"
    )
    spec = graph.nodes["select_1"].spec
    assert isinstance(spec, SelectSpec)
    assert [w.name for w in spec.windows] == ["a", "b"]
    assert spec.where is not None and spec.where.source == "event.ok"
    assert spec.having is not None and spec.having.source == "event.n > 1"
    assert spec.group_by is not None and spec.group_by.mode == "set"
    assert [(g.mode, g.expr.source if g.expr else None) for g in spec.group_by.items] == [
        ("expr", "event.host"),
        ("each", "event.tags"),
    ]
    assert spec.target.ast is not None  # the AST the executor compiles


def test_script_node_ports_include_emitted_ports_and_args_are_bound() -> None:
    graph = query(
        'define script s args limit = 1 script match event.v > args.limit of case true => emit event => "big" '
        "default => event end end;\ncreate script s with limit = 5 end;\n"
    )
    node = graph.nodes["s"]
    assert node.outputs == ["out", "err", "big"]
    assert isinstance(node.spec, ScriptSpec) and node.spec.args == {"limit": 5}


def test_specs_carry_what_the_executor_needs_to_compile_them() -> None:
    graph = query(
        "const LIMIT = 3;\n"
        'fn label(x) with "#{x}!" end;\n'
        'define script tag args suffix = "?" script let event.tag = label(event.v) + args.suffix; event end;\n'
        "create script tag;\n"
        "select event from in where event.v < LIMIT and event.ts > nanos::from_seconds(1) into tag;\n"
        "select event from tag into out;\n"
    )
    script = graph.nodes["tag"].spec
    assert isinstance(script, ScriptSpec)
    compiled = compile_script(script.body.ast, name="tag", consts=script.constants, fns=script.functions)
    assert compiled.run({"v": 1}, {}, None, script.args).event == {"v": 1, "tag": "1!?"}
    select = graph.nodes["select_1"].spec
    assert isinstance(select, SelectSpec) and select.where is not None
    where = compile_expr(select.where.ast, consts=graph.constants, fns=graph.functions)
    assert where.call({"v": 2, "ts": 2_000_000_000}) is True
    assert where.call({"v": 3, "ts": 2_000_000_000}) is False
    assert graph.to_dict()["constants"] == {"LIMIT": 3}


@pytest.mark.parametrize("case", VALID, ids=[p.name for p in VALID])
def test_topological_order_puts_every_edge_forward(case: Path) -> None:
    for top in pipelines_of(case):
        for graph in all_graphs(top):
            assert graph.find_cycle() is None
            order = graph.topological_order()
            assert sorted(order) == sorted(graph.nodes)
            rank = {name: i for i, name in enumerate(order)}
            assert all(rank[e.from_node] < rank[e.to_node] for e in graph.edges)


def test_topological_order_refuses_a_cycle() -> None:
    graph = PipelineGraph("p", nodes={n: Node(n, "stream") for n in ("a", "b")})
    graph.edges = [Edge("a", "out", "b", "in"), Edge("b", "out", "a", "in")]
    assert graph.find_cycle() == ["a", "b", "a"]
    with pytest.raises(ValueError, match="cycle"):
        graph.topological_order()


def test_windowed_select_target_compiles_with_compile_select() -> None:
    graph = query(
        "define window w from tumbling with size = 3 end;\n"
        'select {"class": group[0], "n": aggr::stats::count(), "max": aggr::stats::max(event.v)}\n'
        "from in[w] group by set(event.class) into out;\n"
    )
    spec = graph.nodes["select_1"].spec
    assert isinstance(spec, SelectSpec) and spec.windows[0].size == 3
    target = compile_select(spec.target.ast, consts=graph.constants, fns=graph.functions)
    aggregates = target.new_aggregates()
    for v in (4, 9, 2):
        target.accumulate(aggregates, {"class": "a", "v": v})
    assert target.emit(aggregates, group=["a"]) == {"class": "a", "n": 3, "max": 9}
