"""python::batch with state, and stateless ones between columnar plans (`contraflow.pipeline.python.staged`):
the staged plan gives the per-event executor's outputs, in its order, traced to the same inputs,
without running clean rows through the executor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from contraflow.pipeline.columnar.parse import parsed_from_table
from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.local import compile_query
from contraflow.pipeline.python.staged import BATCH_ERR, StagedPlan, columnar_plan
from contraflow.pipeline.python.state_use import reaches_state, settle_batch_state
from tests.pipeline.python_modules import pyops_udfs

MODULES = Path(__file__).with_name("python_modules")


@pytest.fixture(autouse=True)
def user_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTRAFLOW_PATH", str(MODULES))


def batch(name: str, function: str, args: str = "") -> str:
    extra = f", args = {args}" if args else ""
    return (
        f'define operator {name} from python::batch with module = "pyops_udfs", '
        f'function = "{function}"{extra} end;\ncreate operator {name};\n'
    )


def test_only_a_function_that_can_reach_ctx_state_keeps_the_batch_stateful() -> None:
    assert reaches_state(pyops_udfs.running_total)
    assert not reaches_state(pyops_udfs.add_double)  # reads ctx.args only
    assert not reaches_state(pyops_udfs.squares_of_even)  # never touches ctx
    assert reaches_state(pyops_udfs.hands_ctx_on)  # ctx handed on: cannot tell
    assert reaches_state(lambda table, *rest: rest[0].state)
    assert reaches_state(lambda table, ctx: (lambda: ctx.state)())  # ctx in a closure


def test_a_stateful_batch_keeps_its_state_across_calls_and_moves_as_json() -> None:
    graph = settle_batch_state(
        compile_query(
            batch("total", "running_total")
            + "select event from in into total; select event from total into out;"
        )
    )
    assert graph.nodes["total"].stateful
    executor = PipelineExecutor(graph)
    first = executor.process_values("in", [b'{"n":1}', b'{"n":2}'], None, 0)
    assert [orjson.loads(v)["total"] for v in first["out"][0]] == [1, 3]
    assert executor.snapshot() == {"total": 3}
    moved = PipelineExecutor(graph)
    moved.restore(orjson.loads(orjson.dumps(executor.snapshot())))
    second = moved.process_values("in", [b'{"n":4}'], None, 0)
    assert [orjson.loads(v)["total"] for v in second["out"][0]] == [7]


STAGED = (
    batch("double", "add_double", '{"factor": 3}')
    + batch("even", "squares_of_even")
    + 'select event from in where event.kind == "a" or event.n >= 5 into double;\n'
    + 'select event from in where event.kind == "z" into out;\n'
    + "select event from double into even;\n"
    + 'select {"n": event.n, "double": event.double, "big": event.double >= 9} from double into out;\n'
    + "select event from even where event.square > 10 into out;\n"
)


def events() -> tuple[list[bytes], list[dict[str, Any] | None]]:
    values = [orjson.dumps({"kind": "azb"[n % 3], "n": n, "tag": f"t{n}"}) for n in range(12)]
    values[7] = b"[7]"  # not a record: the filters send it to err
    metas: list[dict[str, Any] | None] = [None] * len(values)
    metas[3] = {"m": 3}  # metadata on input: that row runs per event, and its outputs keep it
    return values, metas


def test_selects_before_and_after_batches_run_columnar_with_the_executors_outputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    graph = settle_batch_state(compile_query(STAGED))
    assert not graph.stateful
    # What a later stage reads of the outputs (as a windowed select's fold does): `event.n`.
    nodes = compile_query("select event.n from in into out;").nodes
    target = next(n for n in nodes.values() if n.kind == "select").spec.target.ast
    plan = columnar_plan(graph, "in", [target])
    assert isinstance(plan, StagedPlan)
    values, metas = events()
    ingest = list(range(100, 100 + len(values)))
    expected = PipelineExecutor(graph).process_values_traced("in", values, metas, ingest)

    per_event: list[int] = []
    staged_executor = PipelineExecutor(plan.graph)
    original = staged_executor.process_values_traced
    monkeypatch.setattr(
        staged_executor,
        "process_values_traced",
        lambda port, vs, ms, ts: per_event.append(len(vs)) or original(port, vs, ms, ts),
    )
    plan.executor = staged_executor
    traced = plan.run(None, pa.array(values, pa.binary()), metas, ingest)
    assert traced.ports == expected.ports
    assert traced.sources == expected.sources
    assert traced.metas == expected.metas
    assert [orjson.loads(v) for v in traced.values] == [orjson.loads(v) for v in expected.values]
    # Only the odd rows ran per event: the one with metadata and the one that is not a record in
    # the first plan, the one with metadata again after the batch.
    assert per_event == [2, 1]
    assert traced.metas.count(b'{"m":3}') == 1  # kept through the batch and the select after it
    # The later stage reads it on each output with the plan that made it.
    texts = traced.texts_of(target)
    answered = [(t, orjson.loads(v)) for t, v in zip(texts, traced.values, strict=True) if t is not None]
    assert len(answered) == 13  # all but the two err events and the row that ran per event
    assert all(orjson.loads(text) == value["n"] for text, value in answered)


def test_a_failing_batch_in_a_staged_plan_sends_each_event_to_err() -> None:
    graph = settle_batch_state(
        compile_query(
            batch("check", "fail_on_negative")
            + "select event from in where event.n != 0 into check; select event from check into out;"
        )
    )
    plan = columnar_plan(graph, "in")
    assert isinstance(plan, StagedPlan)
    values = [orjson.dumps({"n": n}) for n in (1, 0, -1)]
    expected = PipelineExecutor(graph).process_values_traced("in", values, None, [0, 0, 0])
    traced = plan.run(None, pa.array(values, pa.binary()), None, [0, 0, 0])
    assert (traced.ports, traced.sources) == (expected.ports, expected.sources) == (["err", "err"], [0, 2])
    assert [orjson.loads(v) for v in traced.values] == [orjson.loads(v) for v in expected.values]


@pytest.mark.parametrize("first", [1, -1], ids=["outputs", "failed-batch"])
def test_a_batch_with_its_err_port_connected_runs_staged_with_the_executors_outputs(first: int) -> None:
    """The err events of a batch node (its function raising for the batch, a row that is not a
    record) run through what is connected to its err port as one more stage, before its outputs
    do: the per-event executor's outputs, order, sources and metadata."""
    graph = settle_batch_state(
        compile_query(
            batch("check", "fail_on_negative")
            + batch("double", "add_double", '{"factor": 2}')
            + "select event from in into check;\n"
            + "select event from check into double;\n"
            + 'select {"failed": event.event, "why": event.error, "node": event.node} from check/err into out;\n'
            + "select event.event from check/err into double;\n"
            + "select event from double into out;\n"
        )
    )
    plan = columnar_plan(graph, "in")
    assert isinstance(plan, StagedPlan) and BATCH_ERR + "check" in plan.plans
    values = [orjson.dumps({"n": n}) for n in (first, 7, 3)] + [b"[4]", orjson.dumps({"n": 9})]
    metas: list[dict[str, Any] | None] = [None, {"m": 1}, None, None, None]
    ingest = list(range(10, 15))
    expected = PipelineExecutor(graph).process_values_traced("in", values, metas, ingest)
    traced = plan.run(None, pa.array(values, pa.binary()), metas, ingest)
    assert (traced.ports, traced.sources, traced.metas) == (expected.ports, expected.sources, expected.metas)
    assert [orjson.loads(v) for v in traced.values] == [orjson.loads(v) for v in expected.values]
    failed = [(e["failed"], e["why"], e["node"]) for e in map(orjson.loads, traced.values) if "failed" in e]
    not_a_record = ([4], "python::batch takes record events only", "check")
    if first < 0:  # also every event of the failed batch, each with its own event and the exception
        assert failed == [not_a_record] + [({"n": n}, "negative n in batch", "check") for n in (-1, 7, 3, 9)]
    else:
        assert failed == [not_a_record]
    # either way the same events reach the second batch node
    doubles = [e["double"] for e in map(orjson.loads, traced.values) if "double" in e]
    assert sorted(doubles) == sorted(2 * n for n in (first, 7, 3, 9))


def test_a_result_column_is_read_as_parsed_only_where_its_json_text_would_read_the_same() -> None:
    schema = pa.schema([("s", pa.string()), ("i", pa.int64()), ("x", pa.float64()), ("gone", pa.bool_())])
    no_rows_fall_back = pa.array([False, False])
    result = pa.table(
        {"s": pa.array(["a", None], pa.large_string()), "i": pa.array([1, 2], pa.int32()), "x": [1, 2]}
    )
    parsed = parsed_from_table(result, schema, no_rows_fall_back)
    assert parsed is not None and parsed.table.schema == schema
    assert parsed.table.to_pylist() == [
        {"s": "a", "i": 1, "x": 1.0, "gone": None},  # a field no row has is null
        {"s": None, "i": 2, "x": 2.0, "gone": None},
    ]
    # NaN is written as null, a float as a float: the values' JSON must be parsed instead.
    assert parsed_from_table(pa.table({"x": [1.0, float("nan")]}), schema, no_rows_fall_back) is None
    assert parsed_from_table(pa.table({"i": [1.5, 2.0]}), schema, no_rows_fall_back) is None
