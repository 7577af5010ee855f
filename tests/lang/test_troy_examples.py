"""The example flows under examples/ compile, and their scripts behave on the sample data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contraflow.lang.graph import ScriptSpec
from contraflow.lang.script.compiler import compile_script
from contraflow.lang.troy.compiler import compile_file, compile_trickle_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FLOWS = sorted(EXAMPLES.glob("*/flow.troy"))


@pytest.mark.parametrize("flow", FLOWS, ids=[p.parent.name for p in FLOWS])
def test_example_compiles(flow: Path) -> None:
    deployment = compile_file(flow, search_path=[])
    assert deployment.flows
    for graph in deployment.flows.values():
        assert graph.connections
        json.dumps(graph.to_dict())


def test_classify_example_sets_class_and_rate() -> None:
    deployment = compile_file(EXAMPLES / "classify" / "flow.troy", search_path=[])
    pipeline = deployment.flows["classify"].pipelines["classify"]
    assert pipeline.stateful  # grouper::bucket and the window
    node = pipeline.nodes["classify"]
    assert node.spec is not None and node.spec.args == {"error_rate": 1000, "default_rate": 10}
    script = compile_script(node.spec.body.ast, name="classify")
    data = EXAMPLES / "classify" / "data" / "events.jsonl"
    classes: dict[str, int] = {}
    for line in data.read_text().splitlines():
        event = json.loads(line)
        result = script.run(event, {}, None, node.spec.args)
        meta = result.meta
        assert meta["dimensions"] == [meta["class"]]
        assert meta["rate"] == (1000 if meta["class"] in ("error", "server_error") else 10)
        if event["level"] == "error":
            assert meta["class"] == "error"
        classes[meta["class"]] = classes.get(meta["class"], 0) + 1
    assert {"error", "info"} <= classes.keys()
    assert any(c.startswith("warn:") for c in classes)


def test_latency_example_deploys_one_definition_twice() -> None:
    deployment = compile_file(EXAMPLES / "latency" / "flow.troy", search_path=[])
    strict, relaxed = deployment.flows["strict"], deployment.flows["relaxed"]
    assert strict.definition == relaxed.definition == "latency"
    specs = [f.pipelines["stats"].nodes["flag_slow"].spec for f in (strict, relaxed)]
    assert [s.args["limit"] for s in specs if isinstance(s, ScriptSpec)] == [50, 200]
    assert strict.connectors["stats_out"].config["path"].endswith("strict-stats.jsonl")
    assert relaxed.connectors["alerts_out"].config["path"].endswith("relaxed-alerts.jsonl")


def test_the_examples_in_docs_compile(tmp_path: Path) -> None:
    """The Troy and Trickle snippets of docs/languages.md are real, checked code."""
    import re

    doc = (EXAMPLES.parent / "docs" / "languages.md").read_text()
    troy, trickle = re.findall(r"```tremor\n(.*?)```", doc, re.S)[:2]
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "sinks.troy").write_text("define connector jsonl from file;\n")
    (tmp_path / "flow.troy").write_text(troy)
    (tmp_path / "query.trickle").write_text(trickle)
    deployment = compile_file(tmp_path / "flow.troy", search_path=[])
    assert list(deployment.flows) == ["first", "second"]
    graph = compile_trickle_file(tmp_path / "query.trickle", search_path=[])
    assert graph.stateful


def test_fanout_example_dedups_with_bounded_state() -> None:
    deployment = compile_file(EXAMPLES / "fanout" / "flow.troy", search_path=[])
    ingest = deployment.flows["fanout"].pipelines["ingest"]
    assert ingest.outputs == ["a", "b", "err"]
    assert ingest.nodes["spread"].outputs == ["a", "b", "err"]
    dedup = ingest.nodes["dedup"].spec
    assert isinstance(dedup, ScriptSpec) and dedup.state is not None
    script = compile_script(dedup.body.ast, name="dedup")
    state: list[int] = []
    dropped = []
    for event_id in [1, 2, 1, 3, 3, 4, 1]:
        result = script.run({"id": event_id}, {}, state, {"keep": 2})
        state = result.state
        dropped.append(result.dropped)
    assert dropped == [False, False, True, False, True, False, False]
    assert state == [4, 1]
