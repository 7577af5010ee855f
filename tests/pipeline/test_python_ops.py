"""python::map and python::batch in the executor: calling conventions, state, errors as events,
batches traced to their inputs, and the deploy-time check of modules and functions."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from contraflow.lang.errors import LangError, LangErrors
from contraflow.lang.troy.compiler import compile_file
from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.local import compile_query
from contraflow.pipeline.python.modules import check_operators, module_zip
from contraflow.pipeline.python.state_use import settle_batch_state
from contraflow.pipeline.python.tables import records_table, table_values
from contraflow.run_command import compile_and_check

MODULES = Path(__file__).with_name("python_modules")


@pytest.fixture(autouse=True)
def user_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTRAFLOW_PATH", str(MODULES))


def operator(name: str, kind: str, function: str, args: str = "") -> str:
    extra = f", args = {args}" if args else ""
    return (
        f'define operator {name} from python::{kind} with module = "pyops_udfs", '
        f'function = "{function}"{extra} end;\ncreate operator {name};\n'
    )


def run(executor: PipelineExecutor, events: list[Any]) -> dict[str, list[Any]]:
    outputs = executor.process_values("in", [orjson.dumps(e) for e in events], None, 0)
    return {port: [orjson.loads(v) for v in values] for port, (values, _) in outputs.items()}


def test_map_counts_per_key_in_its_state_and_writes_metadata() -> None:
    graph = compile_query(
        operator("score", "map", "count_per_key", '{"weight": 10}')
        + "select event from in into score; select event from score into out;"
    )
    assert graph.stateful
    executor = PipelineExecutor(graph)
    events = [{"key": k, "n": n} for n, k in enumerate("abaab")] + [{"key": "a", "n": 9, "skip": True}]
    traced = executor.process_values_traced("in", [orjson.dumps(e) for e in events], None, [0] * 6)
    assert [orjson.loads(v)["count"] for v in traced.values] == [1, 1, 2, 3, 2]
    assert [orjson.loads(v)["score"] for v in traced.values] == [0, 10, 20, 30, 40]
    assert [orjson.loads(m or b"null") for m in traced.metas] == [{"seen": c} for c in (1, 1, 2, 3, 2)]
    assert executor.snapshot() == {"score": {"a": 3, "b": 2}}
    moved = PipelineExecutor(graph)  # the state moves as JSON, as export/import moves it
    moved.restore(orjson.loads(orjson.dumps(executor.snapshot())))
    assert run(moved, [{"key": "b", "n": 5}])["out"][0]["count"] == 3


def test_an_exception_becomes_an_err_event_and_the_rest_flows() -> None:
    graph = compile_query(
        operator("score", "map", "count_per_key", '{"weight": 1}')
        + "select event from in into score; select event from score into out;"
    )
    out = run(
        PipelineExecutor(graph),
        [{"key": "a", "n": 1}, {"key": "a", "n": 2, "fail": True}, {"key": "a", "n": 3}],
    )
    assert [e["count"] for e in out["out"]] == [1, 2]
    [error] = out["err"]
    assert error["error"] == "cannot score event 2"
    assert error["type"] == "ValueError"
    assert (error["node"], error["operator"], error["function"]) == (
        "score",
        "python::map",
        "pyops_udfs:count_per_key",
    )
    assert error["event"] == {"key": "a", "n": 2, "fail": True}
    assert error["position"].endswith("pyops_udfs.py:17")


def test_a_lone_map_runs_a_batch_in_its_own_loop_as_event_by_event() -> None:
    """In -> map -> out: `process_values` calls the function in one loop over the batch (no item
    per event); outputs, metadata, drops, errors (the function's, bad JSON) and state are those of
    the per-event path, per port in order."""
    graph = compile_query(
        operator("score", "map", "count_per_key", '{"weight": 2}')
        + "select event from in into score; select event from score into out;"
    )
    events = [{"key": k, "n": n} for n, k in enumerate("abcab")]
    events[1]["fail"], events[3]["skip"] = True, True
    values = [orjson.dumps(e) for e in events] + [b"{not json", orjson.dumps({"key": "a", "n": 7})]
    metas: list[dict[str, Any] | None] = [None, {"m": 1}, {"m": 2}, None, None, None, {"m": 3}]
    loop, per_event = PipelineExecutor(graph), PipelineExecutor(graph)
    assert "in" in loop._direct_maps  # the map's own loop, not the push chain
    columns = loop.process_values("in", values, [dict(m) if m else None for m in metas], 5)
    traced = per_event.process_values_traced("in", values, metas, [5] * len(values))
    for port in ("out", "err"):
        assert columns[port] == (
            [v for p, v in zip(traced.ports, traced.values, strict=True) if p == port],
            [m for p, m in zip(traced.ports, traced.metas, strict=True) if p == port],
        )
    assert len(columns["out"][0]) == 4 and len(columns["err"][0]) == 2
    assert loop.snapshot() == per_event.snapshot() == {"score": {"a": 2, "c": 1, "b": 1}}


def test_a_result_that_is_not_json_is_an_err_event() -> None:
    graph = compile_query(
        operator("bad", "map", "not_json") + "select event from in into bad; select event from bad into out;"
    )
    out = run(PipelineExecutor(graph), [{"n": 1}])
    assert "out" not in out
    assert [(e["type"], e["event"]) for e in out["err"]] == [("TypeError", {"n": 1})]


def test_batch_gets_a_table_and_its_rows_are_the_events_keeping_each_inputs_metadata() -> None:
    graph = compile_query(
        operator("double", "batch", "add_double", '{"factor": 3}')
        + "select event from in into double; select event from double into out;"
    )
    assert graph.stateful  # until its function is read (`settle_batch_state`)
    assert not settle_batch_state(graph).stateful
    executor = PipelineExecutor(graph)
    values = [b'{"n":1,"tag":"x"}', b'{"n":2}', b"[1,2]", b'{"n":4,"tag":null}']
    metas = [{"m": 1}, None, {"m": 3}, {"m": 4}]
    traced = executor.process_values_traced("in", values, metas, [0] * 4)
    assert traced.ports == ["err", "out", "out", "out"]
    assert [orjson.loads(v) for v in traced.values[1:]] == [
        {"n": 1, "tag": "x", "double": 3},
        {"n": 2, "double": 6},  # a field missing in an event is null, and nulls are left out
        {"n": 4, "double": 12},
    ]
    assert traced.sources == [2, 0, 1, 3]
    assert traced.metas[1:] == [b'{"m":1}', None, b'{"m":4}']
    assert orjson.loads(traced.values[0])["event"] == [1, 2]  # not a record


def test_batch_may_return_a_polars_frame_of_other_rows() -> None:
    graph = compile_query(
        operator("even", "batch", "squares_of_even")
        + "select event from in into even; select event from even into out;"
    )
    traced = PipelineExecutor(graph).process_values_traced(
        "in", [orjson.dumps({"n": n}) for n in range(5)], None, list(range(5))
    )
    assert [orjson.loads(v) for v in traced.values] == [
        {"n": 0, "square": 0},
        {"n": 2, "square": 4},
        {"n": 4, "square": 16},
    ]
    assert traced.sources == [4, 4, 4]  # other rows than it got: they come from the batch's last event


def test_a_failing_batch_makes_each_of_its_events_an_err_event() -> None:
    graph = compile_query(
        operator("check", "batch", "fail_on_negative")
        + "select event from in into check; select event from check into out;"
    )
    out = run(PipelineExecutor(graph), [{"n": 1}, {"n": -1}])
    assert "out" not in out
    assert [(e["type"], e["error"], e["event"]) for e in out["err"]] == [
        ("RuntimeError", "negative n in batch", {"n": 1}),
        ("RuntimeError", "negative n in batch", {"n": -1}),
    ]


def test_a_batch_after_a_map_gets_the_maps_outputs_in_one_call() -> None:
    graph = compile_query(
        operator("score", "map", "count_per_key", '{"weight": 2}')
        + operator("double", "batch", "add_double", '{"factor": 2}')
        + "select event from in into score; select event from score into double; select event from double into out;"
    )
    out = run(PipelineExecutor(graph), [{"key": "a", "n": 1}, {"key": "a", "n": 2}])
    assert out["out"] == [
        {"key": "a", "n": 1, "count": 1, "score": 2, "double": 2},
        {"key": "a", "n": 2, "count": 2, "score": 4, "double": 4},
    ]


def test_tables_round_trip_nested_values_and_escapes() -> None:
    values = pa.array([b'{"s":"a\\"b\\n","r":{"l":[1,2]},"f":1.5}', b'{"s":"c"}'], pa.binary())
    assert [orjson.loads(v) for v in table_values(records_table(values)).to_pylist()] == [
        {"s": 'a"b\n', "r": {"l": [1, 2]}, "f": 1.5},
        {"s": "c"},
    ]


def test_a_missing_module_or_function_is_reported_at_its_line_and_column(tmp_path: Path) -> None:
    flow = tmp_path / "flow.troy"
    flow.write_text(
        """define flow f
flow
  define pipeline p
  pipeline
    define operator a from python::map with module = "no_such_module", function = "f" end;
    define operator b from python::batch
    with module = "next_to_flow", function = "missing" end;
    create operator a; create operator b;
    select event from in into a; select event from a into b; select event from b into out;
  end;
  create pipeline p;
end;
deploy flow f;
"""
    )
    (tmp_path / "next_to_flow.py").write_text("def present(table, ctx):\n    return table\n")
    compile_file(flow)  # compiling imports nothing
    with pytest.raises(LangErrors) as raised:  # what `contraflow run` does before anything starts
        compile_and_check((flow,), tmp_path / "data", fresh_data_dir=False)
    first, second = raised.value.errors
    assert isinstance(first, LangError) and isinstance(second, LangError)
    assert (first.position.line, first.position.column) == (5, 54)
    assert "no_such_module" in first.message
    assert (second.position.line, second.position.column) == (7, 46)
    assert "has no function 'missing'" in second.message


def test_modules_next_to_the_flow_are_zipped_for_a_cluster(tmp_path: Path) -> None:
    (tmp_path / "next_to_flow2.py").write_text("def f(e, c):\n    return e\n")
    flow = tmp_path / "flow.troy"
    flow.write_text(
        'define flow f flow define pipeline p pipeline define operator a from python::map with module = "next_to_flow2", '
        'function = "f" end; create operator a; select event from in into a; select event from a into out; end; '
        "create pipeline p; end; deploy flow f;"
    )
    graph = compile_file(flow).flows["f"].pipelines["p"]
    check_operators(graph)
    target = module_zip(graph, tmp_path)
    assert target is not None
    assert zipfile.ZipFile(target).namelist() == ["next_to_flow2.py"]


def test_the_example_flags_the_two_spikes_of_its_sample_data() -> None:
    example = Path(__file__).parents[2] / "examples" / "python"
    graph = compile_file(example / "flow.troy").flows["sensors"].pipelines["score"]
    check_operators(graph)  # anomaly.py is found next to the flow file
    lines = (example / "data" / "readings.jsonl").read_bytes().splitlines()
    out = run(PipelineExecutor(graph), [orjson.loads(line) for line in lines])
    assert len(out["out"]) == 180 and "err" not in out
    assert all(e["unit"] == "C" for e in out["out"])
    assert [(e["sensor"], e["value"]) for e in out["anomalies"]] == [("boiler", 91.5), ("cellar", 26.67)]
