"""The example flows under examples/ compile, and their scripts behave on the sample data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
    limits = [f.pipelines["stats"].nodes["flag_slow"].spec.args["limit"] for f in (strict, relaxed)]  # type: ignore[union-attr]
    assert limits == [50, 200]
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
