"""The compiler's public API: results, metadata and state, expressions, errors with positions."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contraflow.lang.errors import LangError, ScriptRuntimeError
from contraflow.lang.script import ast
from contraflow.lang.script.compiler import Env, compile_expr, compile_script, compile_select, compile_text
from contraflow.lang.script.interpreter import Interpreter
from contraflow.lang.script.parser import parse_expr, parse_script

CLASSIFY = """
match event of
  case %{ level == "error", service == "db" } => let $class = "critical"; let $page = true
  case %{ level == "error" } => let $class = "high"; let $page = false
  default => let $class = "normal"; let $page = false
end;
event
"""


def test_run_mutates_meta_in_place_and_returns_the_last_value() -> None:
    script = compile_text(CLASSIFY, name="classify")
    meta: dict[str, object] = {"keep": 1}
    result = script.run({"level": "error", "service": "db"}, meta)
    assert result.port is None and not result.dropped
    assert result.event == {"level": "error", "service": "db"}
    assert result.meta is meta and meta == {"keep": 1, "class": "critical", "page": True}


def test_record_patterns_compile_to_dict_lookups() -> None:
    script = compile_text(CLASSIFY, name="classify")
    assert "event.get('level', _M)" in script.python_source
    assert script.python_source.count("event.get('level', _M)") == 1  # fetched once for all cases


def test_emit_to_port_and_drop() -> None:
    script = compile_text(
        'match event of case "x" => emit 1 => "side" case "d" => drop default => event end', name="s"
    )
    side = script.run("x")
    assert (side.port, side.event, side.dropped) == ("side", 1, False)
    assert script.run("d").dropped
    assert script.run("y").event == "y"


def test_state_is_returned_and_not_aliased_to_the_event() -> None:
    script = compile_text("let state = event; let state.seen = true; event", name="s")
    event = {"a": 1}
    result = script.run(event, {}, None)
    assert result.state == {"a": 1, "seen": True}
    assert event == {"a": 1}


def test_runtime_error_carries_node_and_position() -> None:
    script = compile_text("let x = 1;\nlet y = event.a + x;\ny", name="adder", file="adder.tremor")
    with pytest.raises(ScriptRuntimeError) as info:
        script.run({"a": "text"})
    err = info.value
    assert err.node == "adder"
    assert err.position is not None and (err.position.file, err.position.line, err.position.column) == (
        "adder.tremor",
        2,
        9,
    )
    assert "cannot apply '+' to string and integer" in err.message


def test_missing_key_error_names_the_key() -> None:
    script = compile_text("event.a.b.c", name="s")
    with pytest.raises(ScriptRuntimeError, match="non-existing key `b`"):
        script.run({"a": {"x": 1}})


def test_compile_expr_sees_the_environment() -> None:
    expr = compile_expr(parse_expr('[event.x, $m, state, args.k, group[0], window, "#{event.x}"]'))
    env = Env(event={"x": 1}, meta={"m": 2}, state=3, args={"k": 4}, group=["g"], window="w")
    assert expr(env) == [1, 2, 3, 4, "g", "w", "1"]


def test_compile_expr_rejects_emit() -> None:
    with pytest.raises(LangError, match="only allowed in scripts"):
        compile_expr(parse_expr("emit event"))


def test_outer_consts_and_functions_are_usable() -> None:
    """Troy/Trickle pass module-level definitions in by name."""
    module = parse_script("fn double(x) with x * 2 end; 0")
    fns = {"lib::double": module.fns[0]}
    script = compile_script(
        parse_script("lib::double(event) + OFFSET"), name="s", consts={"OFFSET": 1}, fns=fns
    )
    assert script.run(20).event == 41


def test_unknown_function_is_a_compile_error_with_a_hint() -> None:
    with pytest.raises(LangError) as info:
        compile_text("string::uppercas(event)", name="s", file="f.tremor")
    assert info.value.hint == "did you mean `string::uppercase`?"
    assert str(info.value.position) == "f.tremor:1:1"


def test_generated_code_is_compiled_once() -> None:
    script = compile_text("event + 1", name="s")
    code = script.fn.__code__
    for i in range(3):
        assert script.run(i).event == i + 1
    assert script.fn.__code__ is code
    assert "_t" in script.python_source and "ast." not in script.python_source


_OPS = ["+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>", ">>>", "==", "!=", "<", "<=", ">", ">="]
_ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@settings(max_examples=150, deadline=None)
@given(
    op=st.sampled_from(_OPS), a=_ints, b=_ints | st.floats(allow_nan=False, allow_infinity=False, width=32)
)
def test_compiled_operators_agree_with_the_interpreter(op: str, a: int, b: int | float) -> None:
    script = parse_script(f"event.a {op} event.b")
    compiled = compile_script(script, name="op")
    reference = Interpreter(script, name="op")
    event = {"a": a, "b": b}
    try:
        expected: object = reference.run(dict(event)).event
    except ScriptRuntimeError as err:
        with pytest.raises(ScriptRuntimeError) as info:
            compiled.run(dict(event))
        assert info.value.message == err.message
        return
    got = compiled.run(dict(event)).event
    assert type(got) is type(expected) and got == expected


def test_let_in_pattern_value_is_rejected() -> None:
    with pytest.raises(LangError, match="patterns can only compare with plain expressions"):
        compile_script(
            parse_script("match event of case %{ a == (let x = 1) } => 1 default => 2 end"), name="s"
        )


def test_script_ast_roundtrip_has_positions_everywhere() -> None:
    script = parse_script(CLASSIFY, "c.tremor")
    from contraflow.lang.script.compiler import walk

    nodes = [n for n in walk(script) if isinstance(n, ast.Node)]
    assert nodes and all(n.pos.file == "c.tremor" and n.pos.line >= 1 for n in nodes)


def test_windowed_select_feeds_aggregates_and_computes_the_target() -> None:
    select = compile_select(
        parse_expr(
            '{"n": aggr::stats::count(), "mean": aggr::stats::mean(event.x), '
            '"xs": aggr::win::collect_flattened(event.x * 10), "g": group[0], "last": event.x}'
        )
    )
    assert [call.name for call in select.aggregates] == [
        "aggr::stats::count",
        "aggr::stats::mean",
        "aggr::win::collect_flattened",
    ]
    aggs = select.new_aggregates()
    for x in (1, 2, 6):
        select.accumulate(aggs, {"x": x}, group=["g1"])
    out = select.emit(aggs, {"x": 6}, group=["g1"])
    assert out == {"n": 3, "mean": 3.0, "xs": [10, 20, 60], "g": "g1", "last": 6}


def test_aggregate_outside_a_select_or_nested_is_an_error() -> None:
    with pytest.raises(LangError, match="only be used in the target of a windowed select"):
        compile_text("aggr::stats::count()", name="s")
    with pytest.raises(LangError, match="cannot be nested"):
        compile_select(parse_expr("aggr::stats::sum(aggr::stats::count())"))
    with pytest.raises(LangError, match="did you mean `aggr::stats::mean`"):
        compile_select(parse_expr("aggr::stats::maen(event)"))
    with pytest.raises(LangError, match="wrong number of arguments for `aggr::stats::sum`"):
        compile_select(parse_expr("aggr::stats::sum()"))


def test_aggregate_argument_errors_point_at_the_call() -> None:
    select = compile_select(parse_expr("aggr::stats::sum(event.x)", "w.trickle"))
    aggs = select.new_aggregates()
    with pytest.raises(ScriptRuntimeError) as info:
        select.accumulate(aggs, {"x": "text"})
    assert info.value.position is not None and str(info.value.position) == "w.trickle:1:1"


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["error", "db", "warn", ""]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["level", "service", "x"]), inner)
    ),
    max_leaves=8,
)

PATTERNS = """
match event of
  case %{ level == "error", service == "db" } => let $c = 1; "critical"
  case r = %{ level ~= glob|w*|, absent service } => r
  case %{ x > 1 } when event.x < 4 => event.x
  case %[ "db" ] => "array-with-db"
  case %( _, %{ present level } ) => "pair"
  case {"level": "warn"} => "exact"
  case _ when present event.x => "has-x"
  default => null
end
"""


@settings(max_examples=200, deadline=None)
@given(event=_json)
def test_compiled_patterns_agree_with_the_interpreter(event: object) -> None:
    script = parse_script(PATTERNS)
    compiled, reference = compile_script(script, name="p"), Interpreter(script, name="p")
    outcomes = []
    for engine in (compiled, reference):
        try:
            result = engine.run(event, {})
            outcomes.append(orjson.dumps([result.event, result.meta], option=orjson.OPT_SORT_KEYS))
        except ScriptRuntimeError as err:
            outcomes.append(orjson.dumps(["error", err.message]))
    assert outcomes[0] == outcomes[1]
