"""The columnar path against the per-event executor: same outputs, order, sources and `err` events.

Every conformance case whose (prefix) graph the columnar compiler accepts,
and generated pipelines over generated events (mixed types, nulls, missing
fields, unicode, escapes, big integers, broken JSON, metadata), run through
`ColumnarPlan.run` and through `PipelineExecutor.process_values_traced`; the
traced outputs (port, channel bytes, packed metadata, input row) must be
identical, byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from contraflow.lang.graph import PipelineGraph
from contraflow.lang.troy.compiler import compile_trickle_file
from contraflow.pipeline.columnar import ColumnarPlan, parse
from contraflow.pipeline.columnar.parse import parse_values
from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.local import compile_query
from contraflow.pipeline.spark.partial import PartialAggregation, partial_select
from contraflow.pipeline.spark.split import split_prefix

TESTS = Path(__file__).parent.parent
PIPELINE_CASES = sorted(p for p in (TESTS / "pipeline" / "cases").iterdir() if p.is_dir())
RUN_CASES = sorted(p for p in (TESTS / "lang" / "cases").glob("run-*") if p.is_dir())


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch parsed in pieces of 3 rows: the rows that fall back land in several pieces."""
    monkeypatch.setattr(parse, "PIECE_ROWS", 3)


def stateless_part(graph: PipelineGraph) -> PipelineGraph | None:
    """The graph itself when stateless, else its stateless prefix (what Spark runs columnar)."""
    if not graph.stateful:
        return graph
    split = split_prefix(graph)
    return split.prefix if split is not None else None


def assert_same(
    graph: PipelineGraph, values: list[bytes], metas: list[dict[str, Any] | None] | None = None
) -> ColumnarPlan:
    plan = ColumnarPlan.compile(graph, "in")
    assert plan is not None
    ingest = list(range(len(values)))
    want = PipelineExecutor(graph).process_values_traced("in", values, metas, ingest)
    got = plan.run(PipelineExecutor(graph), pa.array(values, pa.binary()), metas, ingest)
    assert got.ports == want.ports
    assert got.sources == want.sources
    assert got.values == want.values
    assert got.metas == want.metas
    by_port = got.by_port()
    for port, (column, port_metas) in by_port.items():
        rows = [i for i, p in enumerate(want.ports) if p == port]
        assert column.to_pylist() == [want.values[i] for i in rows]
        assert port_metas == [want.metas[i] for i in rows]
    return plan


def _case_graphs() -> list[tuple[str, PipelineGraph, list[bytes]]]:
    found = []
    for case in PIPELINE_CASES + RUN_CASES:
        try:
            if case in PIPELINE_CASES:
                text = (case / "query.trickle").read_text()
                graph = compile_query(text, name="query.trickle", directory=case)
            else:
                graph = compile_trickle_file(case / "query.trickle", search_path=[])
        except Exception:  # noqa: BLE001 - cases of compile errors have nothing to run
            continue
        part = stateless_part(graph)
        if part is None or "in" not in part.inputs or ColumnarPlan.compile(part, "in") is None:
            continue
        lines = [line.strip() for line in (case / "in.jsonl").read_bytes().splitlines() if line.strip()]
        found.append((case.name, part, lines))
    return found


CASE_GRAPHS = _case_graphs()


def test_the_compiler_accepts_conformance_cases() -> None:
    """Not vacuous: filters, routing, fan-out and error cases are among the accepted ones."""
    names = {name for name, _, _ in CASE_GRAPHS}
    assert {"select_where", "fanout_order", "select_missing_key_error", "select_invalid_json"} <= names


@pytest.mark.parametrize(("name", "graph", "lines"), CASE_GRAPHS, ids=[c[0] for c in CASE_GRAPHS])
def test_conformance_case_runs_the_same(name: str, graph: PipelineGraph, lines: list[bytes]) -> None:
    assert_same(graph, lines)


W1_PREFIX = """
define script regions
script
  let $region = match event.country of
    case "DE" => "eu" case "FR" => "eu" case "US" => "na"
    default => "other"
  end;
  event
end;
create script regions;
define window ten from tumbling with size = 10 end;
select event from in where event.event == "click" or event.value >= 50 into regions;
select {"region": group[0], "count": aggr::stats::count()} from regions[ten] group by $region into out;
"""


def test_w1_prefix_runs_columnar_and_keeps_the_executor_results() -> None:
    """Most rows are answered by the columns; the odd ones (a missing field where the `or` needs it,
    a number where a string is compared, metadata, broken JSON) by the executor, in place."""
    prefix = stateless_part(compile_query(W1_PREFIX))
    assert prefix is not None
    countries = ["DE", "FR", "US", "JP", "é"]
    values = [
        orjson.dumps({"event": ["click", "view"][i % 2], "value": i % 101, "country": countries[i % 5]})
        for i in range(500)
    ]
    values[3] = b'{"event": "view", "country": "DE"}'  # `value` missing: the `or` reads it, an error
    values[4] = b'{"event": "click", "country": "DE"}'  # `value` missing, but `or` stops at `click`
    values[5] = b'{"event": "view", "value": 70, "country": 7}'  # no case matches 7: "other"
    values[6] = b"not json"
    values[7] = b'{"event": "click", "value": 1, "country": "FR", "country": "DE"}'
    metas: list[dict[str, Any] | None] = [None] * len(values)
    metas[8] = {"region": "kept?", "other": 1}
    plan = assert_same(prefix, values, metas)
    got = plan.run(PipelineExecutor(prefix), pa.array(values, pa.binary()), metas, list(range(len(values))))
    # Rows 3, 5, 6 and 8 (metadata); row 7's repeated key is read as orjson reads it (the last wins).
    assert got.columnar_rows == len(values) - 4
    assert got.ports.count("err") == 2  # rows 3 and 6


def test_fields_read_after_the_prefix_are_parsed_and_answered_per_output() -> None:
    """Partial aggregation reads `event.ts` (the window time) and `$region` (the group) on the
    prefix's outputs: compiled with `also_read`, the plan parses `ts` too and its results stay the
    executor's; `text_column` gives each output's JSON text, null where the columns cannot answer
    (a `ts` of another type than the batch's: that row ran on the executor)."""
    graph = compile_query(W1_PREFIX.replace("size = 10", "interval = 10 script event.ts"))
    split = split_prefix(graph)
    assert split is not None
    select = partial_select(split.rest)
    assert select is not None
    reads = PartialAggregation(split.rest, select, split.cut_ports[0]).reads
    assert [e.source.strip() for e in reads] == ["$region", "event.ts"]
    values = [
        orjson.dumps({"event": "click", "value": i, "country": ["DE", "US", "JP"][i % 3], "ts": 7 * i})
        for i in range(40)
    ]
    values[5] = orjson.dumps({"event": "click", "value": 5, "country": "DE", "ts": "late"})
    plan = ColumnarPlan.compile(split.prefix, "in", [e.ast for e in reads])
    assert plan is not None
    executor = PipelineExecutor(split.prefix)
    got = plan.run(executor, pa.array(values, pa.binary()), None, list(range(len(values))))
    want = executor.process_values_traced("in", values, None, list(range(len(values))))
    assert (got.ports, got.values, got.metas, got.sources) == (
        want.ports,
        want.values,
        want.metas,
        want.sources,
    )
    assert got.columnar_rows == len(values) - 1
    regions, times = (got.text_column(e.ast) for e in reads)
    assert regions is not None and times is not None
    outputs = [orjson.loads(v) for v in got.values]
    assert times.to_pylist() == [None if o["ts"] == "late" else str(o["ts"]) for o in outputs]
    expected = {"DE": '"eu"', "US": '"na"', "JP": '"other"'}
    assert regions.to_pylist() == [None if o["ts"] == "late" else expected[o["country"]] for o in outputs]


PLAIN = b'{"event": "click", "n": 1, "country": "DE"'
# Rows whose fields read are fine but which msgspec (the parser) would take where orjson (the
# executor) rejects them or reads them otherwise; and rows that look odd but read the same in both.
EXACTNESS_ROWS = [
    (b'{"event": "click", "n": 1, "country": "US", "country": "DE"}', False),  # the last wins in both
    (b'{"event": "click", "n": 1, "country": 7, "country": "DE"}', True),  # every occurrence typed
    (PLAIN + b', "x": 1e999}', True),  # beyond a double where msgspec skips: orjson rejects
    (PLAIN + b', "x": [1E+999]}', True),
    (PLAIN + b', "x": 1e5, "y": 2E-999}', False),  # checked with orjson: fine
    (PLAIN + b', "x": 1' + b"0" * 400 + b"}", True),  # beyond a double without an exponent
    (PLAIN + b', "x": "\xff"}', True),  # invalid UTF-8 where msgspec skips
    (PLAIN + b', "\xed\xa0\x80": 1}', True),  # a surrogate's UTF-8 in a key
    (PLAIN + b', "x": ' + b"[" * 300 + b"]" * 300 + b"}", True),  # deep: near the decoders' limits
    (PLAIN + b', "x": {"$bytes": "AA=="}}', True),  # binary per event
    (PLAIN + b', "x": "\\ud800"}', True),  # a lone surrogate
    (b'{"event": "click", "n": 9223372036854775808, "country": "DE"}', True),  # beyond int64
    (b'{"event": "click", "n": -9223372036854775808, "country": "DE"}', False),
    (b'{"event": "click", "n": 1.0, "country": "DE"}', True),  # a float where an int is written out
    (b'{"event": "click", "n": true, "country": "DE"}', True),
    (b'{"event": "click", "n": 1, "country": "DE"} {}', True),  # two documents
    (b' {"event": "click", "n": 1, "country": "DE"}\n', False),  # whitespace around: one document
    (b'{"event": "click", "n": null, "country": "DE"}', True),  # null: written out per event
]


@pytest.mark.usefixtures("small_pieces")
def test_rows_the_parser_reads_unlike_orjson_fall_back() -> None:
    """Each rule the parse relies on to stay exact: the rows it must not answer run on the executor
    (same outputs and `err` events), the others stay columnar."""
    graph = compile_query(
        'select {"v": event.n, "c": event.country} from in where event.event == "click" into out;'
    )
    plain = [orjson.dumps({"event": "click", "n": i, "country": "FR"}) for i in range(8)]  # types: int, str
    values = plain + [row for row, _ in EXACTNESS_ROWS]
    plan = assert_same(graph, values)
    got = plan.run(PipelineExecutor(graph), pa.array(values, pa.binary()), None, list(range(len(values))))
    assert got.parsed is not None
    assert got.parsed.fallback.to_pylist() == [False] * len(plain) + [out for _, out in EXACTNESS_ROWS]


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("literal", ["9007199254740992", "-9007199254740992.0", "9007199254740991"])
def test_ints_beyond_a_double_compare_as_the_executor_compares_them(literal: str) -> None:
    """Ints a double does not hold (2^53 + 1 rounds to 2^53; beyond int64 too) against a literal
    at the edge: rows that big run per event against a literal of 2^53; below it, order is kept."""
    values = [b'{"v": %d}' % v for v in (2**53 + 1, -(2**53) - 1, 2**53, 2**53 - 1, 2**64 + 1, -(2**64) - 1)]
    for op in ("==", ">", "<"):
        assert_same(compile_query(f"select event from in where event.v {op} {literal} into out;"), values)


def test_a_key_msgspec_cannot_name_runs_every_row_per_event() -> None:
    """A field name with a quote cannot be a msgspec field: the batch still gives the executor's
    results, all of them from the executor; an empty schema still finds the rows that are not records."""
    parsed = parse_values(
        pa.array([b'{"a\\"b": "x"}', b"{}"]), pa.schema([('a"b', pa.string())]), pa.array([False] * 2)
    )
    assert parsed.fallback.to_pylist() == [True, True]
    assert parsed.table.column(0).null_count == 2
    parsed = parse_values(pa.array([b'{"a": 1}', b"[1]", None]), pa.schema([]), pa.array([False] * 3))
    assert parsed.fallback.to_pylist() == [False, True, True]
    assert parsed.table.num_rows == 3


# --- generated pipelines and events -------------------------------------------------------------

FIELDS = ("a", "b", "c", "n.x")
KINDS = ("string", "number", "bool")
SAFE_TEXT = st.text(alphabet="abcxyz é日-_ 0129", max_size=4)
NUMBERS = st.one_of(st.integers(-300, 300), st.sampled_from([0.5, -2.25, 50.0, 1000.0, 2**53, -(2**53)]))


def literal(kind: str) -> st.SearchStrategy[Any]:
    return {"string": SAFE_TEXT, "number": NUMBERS, "bool": st.booleans()}[kind]


def render(value: Any) -> str:
    if type(value) is float:
        return repr(value) if "e" not in repr(value) else f"{value:.1f}"
    return json.dumps(value, ensure_ascii=False)


@st.composite
def comparison(draw: Any, kinds: dict[str, str]) -> str:
    name = draw(st.sampled_from(FIELDS))
    kind = kinds[name]
    ops = ["==", "!="] if kind == "bool" else ["==", "!=", "<", "<=", ">", ">="]
    op = draw(st.sampled_from(ops))
    value = render(draw(literal(kind)))
    if draw(st.booleans()):
        return f"event.{name} {op} {value}"
    flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
    return f"{value} {flipped} event.{name}"


@st.composite
def condition(draw: Any, kinds: dict[str, str], depth: int = 0) -> str:
    choice = draw(st.integers(0, 4 if depth < 2 else 0))
    if choice == 0:
        return draw(comparison(kinds))
    if choice == 1:
        return f"not ({draw(condition(kinds, depth + 1))})"
    if choice == 2:
        bools = [f for f in FIELDS if kinds[f] == "bool"]
        if bools:
            return f"event.{draw(st.sampled_from(bools))}"
        return draw(comparison(kinds))
    op = "and" if choice == 3 else "or"
    return f"({draw(condition(kinds, depth + 1))} {op} {draw(condition(kinds, depth + 1))})"


@st.composite
def value_expr(draw: Any, kinds: dict[str, str], depth: int = 0) -> str:
    choice = draw(st.integers(0, 4 if depth < 1 else 3))
    if choice == 0:
        return render(draw(st.one_of(SAFE_TEXT, NUMBERS, st.booleans(), st.none())))
    if choice == 1:
        return f"event.{draw(st.sampled_from(FIELDS))}"
    if choice == 2:
        return draw(condition(kinds, 1))
    if choice == 3:
        name = draw(st.sampled_from(FIELDS))
        cases = draw(st.lists(literal(kinds[name]), min_size=1, max_size=3))
        body = " ".join(f"case {render(c)} => {render(i)}" for i, c in enumerate(cases))
        default = draw(st.sampled_from(['default => "other"', "default => event.a", ""]))
        return f"match event.{name} of {body} {default} end"
    keys = draw(st.lists(st.sampled_from(["x", "y", "é", 'q"']), min_size=0, max_size=3))
    fields = ", ".join(
        f"{json.dumps(k, ensure_ascii=False)}: {draw(value_expr(kinds, depth + 1))}" for k in keys
    )
    return "{" + fields + "}"


@st.composite
def pipeline(draw: Any, kinds: dict[str, str]) -> str:
    shape = draw(st.integers(0, 3))
    where = draw(condition(kinds))
    if shape == 0:
        return f"select event from in where {where} into out;"
    if shape == 1:
        keys = draw(st.lists(st.sampled_from("pqr"), min_size=1, max_size=3))
        lets = "\n".join(f"let ${k} = {draw(value_expr(kinds))};" for k in keys)
        result = draw(st.sampled_from(["event", '{"m": $' + keys[0] + "}"]))
        return (
            f"define script s\nscript\n{lets}\n{result}\nend;\ncreate script s;\n"
            f"select event from in where {where} into s;\nselect event from s into out;"
        )
    if shape == 2:
        return f"select {draw(value_expr(kinds))} from in where {where} into out;"
    second = draw(condition(kinds))
    return (
        f"select event from in where {where} into out;\n"
        f'select {{"r": {draw(value_expr(kinds))}}} from in where {second} into out;\n'
        "select event from in into out;"
    )


JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, -(2**63), 2**53 + 1]),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
        SAFE_TEXT,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=2), st.dictionaries(st.sampled_from(["x", "y"]), children, max_size=2)
    ),
    max_leaves=4,
)
ODD_ROWS = st.sampled_from(
    [
        b"not json",
        b"[1, 2]",
        b"5",
        b'"text"',
        b"",
        b'  {"a": "abc"}',
        b'{"a": "abc"}\n',
        b'{"a": "x", "a": 1}',
        b'{"a": NaN}',
        b'{"b": 1e400, "a": "abc"}',
        b'{"a": "\xff"}',
        b'{"a": "\\ud800"}',
        b'{"a": {"$bytes": "AA=="}}',
        b'{"a": "abc"}{"a": "x"}',
        b'{"a": 18446744073709551616, "b": 1}',
    ]
)


TYPED = {"string": SAFE_TEXT, "number": st.integers(-300, 300), "bool": st.booleans()}


@st.composite
def channel_value(draw: Any, kinds: dict[str, str]) -> bytes:
    """Mostly records whose fields have the types the pipeline compares them as; then anything."""
    if draw(st.integers(0, 9)) == 0:
        return draw(ODD_ROWS)
    record: dict[str, Any] = {}
    for name in ("a", "b", "c", "n", "d"):
        if draw(st.integers(0, 4)) == 0:
            continue  # missing
        typed = kinds.get(name, kinds["n.x"]) if draw(st.integers(0, 3)) else None
        value = draw(TYPED[typed]) if typed else draw(JSON_VALUES)
        record[name] = {"x": value} if name == "n" and typed else value
    if draw(st.booleans()):
        return orjson.dumps(record) if _orjson_can(record) else json.dumps(record).encode()
    return json.dumps(record, ensure_ascii=draw(st.booleans())).encode()


@st.composite
def scenario(draw: Any) -> tuple[str, list[bytes], list[dict[str, Any] | None]]:
    kinds = {name: draw(st.sampled_from(KINDS)) for name in FIELDS}
    query = draw(pipeline(kinds))
    values = draw(st.lists(channel_value(kinds), min_size=1, max_size=40))
    metas = [{"m": 1} if draw(st.integers(0, 9)) == 0 else None for _ in values]
    return query, values, metas


def _orjson_can(value: Any) -> bool:
    try:
        orjson.dumps(value)
    except TypeError:
        return False
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_generated_pipelines_run_the_same(case: tuple[str, list[bytes], list[dict[str, Any] | None]]) -> None:
    query, values, metas = case
    graph = compile_query(query, name="query.trickle")
    note(f"query: {query}\nvalues: {values!r}\nmetas: {metas!r}")
    with mock.patch.object(parse, "PIECE_ROWS", 7):  # up to 6 pieces: odd rows in any of them
        plan = assert_same(graph, values, metas)
    got = plan.run(PipelineExecutor(graph), pa.array(values, pa.binary()), metas, list(range(len(values))))
    event(f"rows answered by the columns: {'some' if got.columnar_rows else 'none'}")
