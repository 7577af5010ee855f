"""Parsing tremor-script: positions, syntax errors in words, and the grammar contract with Trickle/Troy."""

from __future__ import annotations

from pathlib import Path

import pytest
from lark import Lark, Transformer
from lark.visitors import merge_transformers

from contraflow.lang.errors import LangError, Position, SourceText
from contraflow.lang.nesting import MAX_NESTING
from contraflow.lang.script import ast
from contraflow.lang.script.compiler import Env, compile_expr, compile_script
from contraflow.lang.script.parser import ScriptTransformer, parse_expr, parse_script

GRAMMAR_DIR = Path(__file__).resolve().parents[2] / "src" / "contraflow" / "lang" / "grammar"


def test_nodes_carry_file_line_and_column() -> None:
    script = parse_script("let x = 1;\n  event.a.b", "f.tremor")
    path = script.exprs[1]
    assert isinstance(path, ast.Path)
    assert (path.pos.file, path.pos.line, path.pos.column) == ("f.tremor", 2, 3)
    assert [s.key for s in path.segments if isinstance(s, ast.KeySeg)] == ["a", "b"]


def test_precedence_builds_the_expected_tree() -> None:
    expr = parse_expr("1 + 2 * 3 == 7 and not false")
    assert isinstance(expr, ast.Binary) and expr.op == "and"
    eq = expr.left
    assert isinstance(eq, ast.Binary) and eq.op == "=="
    add = eq.left
    assert isinstance(add, ast.Binary) and add.op == "+"
    assert isinstance(add.right, ast.Binary) and add.right.op == "*"
    assert isinstance(expr.right, ast.Unary) and expr.right.op == "not"


def test_interpolated_expression_positions_point_into_the_string() -> None:
    expr = parse_expr('"ab #{event.x} cd"', "s.tremor")
    assert isinstance(expr, ast.Interpolated)
    inner = expr.parts[1]
    assert isinstance(inner, ast.Path) and inner.pos.column == 7


def test_syntax_error_names_the_unclosed_construct() -> None:
    with pytest.raises(LangError) as info:
        parse_script("let x = 1;\nmatch event of\n  case 1 => 2\n", "f.tremor")
    err = info.value
    assert err.hint == "expected 'end' to close the 'match' started at 2:1"
    assert "f.tremor:3:" in err.render()


def test_syntax_error_renders_caret_under_the_token() -> None:
    with pytest.raises(LangError) as info:
        parse_script("let x = 1 +;", "f.tremor")
    lines = info.value.render().splitlines()
    assert lines[0] == "f.tremor:1:12: unexpected ';'"
    assert lines[1] == "   1 | let x = 1 +;"
    assert lines[2] == " " * (len("   1 | ") + 11) + "^"
    assert lines[3] == "hint: expected an expression"


def test_error_inside_interpolation_points_at_it() -> None:
    with pytest.raises(LangError) as info:
        parse_script('let a = 1;\nlet b = "x #{ 1 + } y"', "f.tremor")
    assert str(info.value.position) == "f.tremor:2:18"
    assert "interpolation" in info.value.message


def test_empty_script_is_an_error() -> None:
    with pytest.raises(LangError, match="empty script"):
        parse_script("# only a comment\n")


def test_keywords_can_be_escaped_as_names() -> None:
    script = parse_script("let `end` = 1; `end`")
    let = script.exprs[0]
    assert isinstance(let, ast.Let) and let.target.name == "end"


TRICKLE_LIKE = r"""
start: stmt+
stmt: "select" script__expr "from" IDENT "into" IDENT ("where" script__expr)? ";"   -> select
    | "define" "script" IDENT "script" script__exprs "end" ";"                     -> define_script
%import .script.expr -> script__expr
%import .script.exprs -> script__exprs
%import .script.IDENT
%import .script.WS
%import .script.COMMENT
%ignore WS
%ignore COMMENT
"""


class _Statements(Transformer[object, object]):
    def start(self, children: list[object]) -> list[object]:
        return children

    def select(self, children: list[object]) -> tuple[object, ...]:
        return ("select", *children)

    def define_script(self, children: list[object]) -> tuple[object, ...]:
        return ("script", *children)


def test_an_importing_grammar_reuses_rules_and_transformer() -> None:
    """The contract with the Trickle/Troy grammars: `%import .script (...)` + merge_transformers."""
    parser = Lark(TRICKLE_LIKE, parser="lalr", import_paths=[str(GRAMMAR_DIR)], propagate_positions=True)
    text = (
        'select {"n": event.n + 1} from in into out where event.n > 1;\n'
        "define script tag script let $tag = args.tag; event end;\n"
    )
    source = SourceText("p.trickle", text)
    transformer = merge_transformers(_Statements(), script=ScriptTransformer(source))
    select, define = transformer.transform(parser.parse(text))
    assert select[0] == "select" and isinstance(select[1], ast.RecordLit)
    where = compile_expr(select[4], source=source)
    assert where(Env(event={"n": 2})) is True
    projection = compile_expr(select[1])
    assert projection.call({"n": 2}) == {"n": 3}
    assert isinstance(define[2], ast.Script) and define[2].exprs[0].pos.line == 2
    result = compile_script(define[2], name="tag").run({"x": 1}, {}, None, {"tag": "t"})
    assert result.meta == {"tag": "t"} and result.event == {"x": 1}


def test_deep_nesting_is_a_language_error_at_its_position() -> None:
    text = "let x = " + "[" * 600 + "1" + "]" * 600 + ";\nx"
    with pytest.raises(LangError, match="nested too deeply") as caught:
        parse_script(text, "deep.tremor")
    assert (caught.value.position.file, caught.value.position.line) == ("deep.tremor", 1)
    assert caught.value.position.column > 9


@pytest.mark.parametrize(
    ("opening", "closing"),
    [('{"a": ', "}"), ("[", "]"), ("(", ")"), ("string::len(", ")")],
    ids=["record", "array", "parentheses", "call"],
)
def test_one_nesting_limit_for_every_bracketed_construct(opening: str, closing: str) -> None:
    """Issue 32: 20,000 nested parentheses parsed for seconds and passed while records were refused
    at 200; every construct now stops at MAX_NESTING, at the bracket that goes one level too deep."""
    parse_script(opening * MAX_NESTING + "1" + closing * MAX_NESTING, "ok.tremor")
    with pytest.raises(LangError, match=f"nested too deeply \\(more than {MAX_NESTING} levels\\)") as caught:
        parse_script(opening * 20_000 + "1" + closing * 20_000, "deep.tremor")
    bracket = len(opening) * MAX_NESTING + opening.index(
        opening.rstrip()[-1] if "(" in opening else opening[0]
    )
    assert caught.value.position == Position("deep.tremor", 1, bracket + 1, 1)
