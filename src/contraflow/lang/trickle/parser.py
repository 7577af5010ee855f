"""Parsing Trickle into `trickle.ast` statements (expressions parsed by tremor-script).

The grammar imports the expression rules from script.lark; lark prefixes the
imported rules' dependencies with `script__`, and `merge_transformers` routes
those to the script transformer, so one parse yields both statement and
expression ASTs.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any, TypeVar

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedInput
from lark.tree import Meta
from lark.visitors import merge_transformers

from contraflow.lang.errors import Position, SourceText
from contraflow.lang.grammar import GRAMMAR_DIR, parse_table_cache
from contraflow.lang.graph import SourceExpr
from contraflow.lang.nesting import parse_bounded, transform_tree
from contraflow.lang.syntax_errors import Wording, expected_terminals, syntax_error
from contraflow.lang.trickle import ast
from contraflow.lang.trickle.script_api import describe_token, item_name, script_transformer

# Rules script.lark exports under their own names; the combined transformer must answer to them.
SCRIPT_EXPORTS = ("expr", "exprs", "fn_defn", "const_defn", "path", "IDENT", "STRING", "INT", "FLOAT")


@cache
def grammar(name: str) -> Lark:
    """The LALR parser for `grammar/<name>.lark`, built once per process."""
    path = GRAMMAR_DIR / f"{name}.lark"
    return Lark.open(
        str(path),
        parser="lalr",
        propagate_positions=True,
        maybe_placeholders=True,
        cache=parse_table_cache(name),
    )


def delegate(target: Transformer, source: Transformer, names: Iterable[str]) -> None:
    """Make `target` answer for `names` with `source`'s callbacks (rules imported by name)."""
    for name in names:
        method = getattr(source, name, None)
        if callable(method):
            setattr(target, name, method)


def token_pos(source: SourceText, token: Token) -> Position:
    return source.position(token.line or 1, token.column or 1, len(token.value))


def meta_pos(source: SourceText, meta: Meta) -> Position:
    """Position of a rule's match; underline to the end of its first line."""
    if getattr(meta, "empty", True):
        return source.position(1, 1)
    length = meta.end_pos - meta.start_pos if meta.end_line == meta.line else 0
    if length <= 0:
        length = max(1, len(source.line(meta.line)) - meta.column + 1)
    return source.position(meta.line, meta.column, length)


# Keywords whose construct is closed by `end`; the innermost still open names the missing `end`.
_END_OPENERS = frozenset({"match", "for", "patch", "merge", "fn", "flow", "pipeline", "script", "with"})
_BRACKETS = {"(": "')'", "[": "']'", "{": "'}'", "%{": "'}'", "%[": "']'", "%(": "')'"}


def _quoted(token: Token) -> str:
    return f"'{token.value}'"


TRICKLE_WORDING = Wording("syntax error: ", "input", _quoted, accepts_first=True)


def _open_construct_hint(err: UnexpectedInput, expected: set[str]) -> str:
    """'expected 'end' to close the 'script' started at 3:5' when that is what is missing."""
    parser_state = getattr(getattr(err, "interactive_parser", None), "parser_state", None)
    stack = getattr(parser_state, "value_stack", [])
    short = {name.rsplit("__", 1)[-1] for name in expected}
    for item in reversed(stack):
        if not isinstance(item, Token):
            continue
        if item.value in _END_OPENERS and "END" in short:
            return f"expected 'end' to close the '{item.value}' started at {item.line}:{item.column}"
        if item.value in _BRACKETS:
            closer = _BRACKETS[item.value]
            return f"expected {closer} to close the '{item.value}' started at {item.line}:{item.column}"
    return ""


def _expected_hint(expected: set[str], parser: Lark) -> str:
    words = sorted({describe_token(name, parser) for name in expected if not name.startswith("__")})
    if not words:
        return ""
    if len(words) > 8:
        words = words[:8] + ["..."]
    return "expected " + ", ".join(words)


def flatten_statements(children: list[Any]) -> list[Any]:
    """Statements in order, with a grouped `use` (a list) spliced in."""
    return [s for c in children for s in (c if isinstance(c, list) else [c])]


D = TypeVar("D", bound=ast.KindDefinition)


class TrickleTransformer(Transformer):
    """Builds `trickle.ast` nodes; expression subtrees are handled by the merged script transformer."""

    def __init__(self, source: SourceText) -> None:
        super().__init__()
        self.source = source
        self.script: Transformer | None = None

    def __default__(self, data: Any, children: list[Any], meta: Any) -> Any:
        """Rules of the imported script grammar that it handles generically (operators...)."""
        if self.script is not None and "script__" in str(data):
            return self.script.__default__(data, children, meta)
        return super().__default__(data, children, meta)

    # --- helpers -----------------------------------------------------------------------------

    def _name(self, token: Token) -> ast.Name:
        """A name; a quoted one (`` `udp-out` ``) is the text between its backticks."""
        text = str(token)
        if len(text) > 1 and text[0] == text[-1] == "`":
            text = text[1:-1]
        return ast.Name(text, token_pos(self.source, token))

    def _pos(self, meta: Meta) -> Position:
        return meta_pos(self.source, meta)

    def _text(self, meta: Meta) -> str:
        return self.source.text[meta.start_pos : meta.end_pos]

    # --- module level ------------------------------------------------------------------------

    def start(self, children: list[Any]) -> list[ast.Statement]:
        return list(children[0])

    def pipeline_stmts(self, children: list[Any]) -> list[ast.Statement]:
        return flatten_statements(children)

    @v_args(meta=True)
    def use_stmt(self, meta: Meta, children: list[Any]) -> ast.UseStmt:
        path, alias = children
        return ast.UseStmt(path, self._name(alias) if alias is not None else None, self._pos(meta))

    @v_args(meta=True)
    def use_group(self, meta: Meta, children: list[Any]) -> list[ast.UseStmt]:
        """`use lib::{a, b as c};` is `use lib::a; use lib::b as c;`."""
        base: ast.ModPath = children[0]
        uses = []
        for parts, alias in _members(children[1:]):
            path = ast.ModPath((*base.parts, *parts), parts[-1].pos)
            uses.append(ast.UseStmt(path, alias, self._pos(meta)))
        return uses

    def use_member(self, children: list[Any]) -> list[tuple[tuple[ast.Name, ...], ast.Name | None]]:
        path, alias = children
        return [(path.parts, self._name(alias) if alias is not None else None)]

    def use_nested(self, children: list[Any]) -> list[tuple[tuple[ast.Name, ...], ast.Name | None]]:
        """`integer::{unsigned, signed}` inside a group: each member under the nested path."""
        base: ast.ModPath = children[0]
        return [((*base.parts, *parts), alias) for parts, alias in _members(children[1:])]

    @v_args(meta=True)
    def mod_path(self, meta: Meta, children: list[Token]) -> ast.ModPath:
        return ast.ModPath(tuple(self._name(t) for t in children), self._pos(meta))

    @v_args(meta=True)
    def script_const(self, meta: Meta, children: list[Any]) -> ast.ScriptItem:
        return self._script_item("const", meta, children[0])

    @v_args(meta=True)
    def script_fn(self, meta: Meta, children: list[Any]) -> ast.ScriptItem:
        return self._script_item("fn", meta, children[0])

    def _script_item(self, kind: Any, meta: Meta, node: Any) -> ast.ScriptItem:
        return ast.ScriptItem(kind, item_name(node), node, self._text(meta), self._pos(meta))

    @v_args(meta=True)
    def sexpr(self, meta: Meta, children: list[Any]) -> SourceExpr:
        return SourceExpr(self._text(meta), children[0], self._pos(meta))

    @v_args(meta=True)
    def script_body(self, meta: Meta, children: list[Any]) -> SourceExpr:
        return SourceExpr(self._text(meta), children[0], self._pos(meta))

    # --- select ------------------------------------------------------------------------------

    @v_args(meta=True)
    def select_stmt(self, meta: Meta, children: list[Any]) -> ast.SelectStmt:
        target, source, windows, where, group, into, having = children
        return ast.SelectStmt(target, source, windows or [], where, group, into, having, self._pos(meta))

    @v_args(meta=True)
    def join_stmt(self, meta: Meta, children: list[Any]) -> ast.JoinStmt:
        target, left, outer, right, on, within, where, into, having = children
        return ast.JoinStmt(
            target, left, right, on, within, where, into, having, self._pos(meta), outer is not None
        )

    def join_side(self, children: list[Any]) -> ast.JoinSide:
        return ast.JoinSide(children[0], children[1])

    @v_args(meta=True)
    def stream_ref(self, meta: Meta, children: list[Token]) -> ast.StreamRef:
        port = self._name(children[1]) if len(children) > 1 else None
        return ast.StreamRef(self._name(children[0]), port, self._pos(meta))

    def window_list(self, children: list[ast.ModPath]) -> list[ast.ModPath]:
        return list(children)

    @v_args(meta=True)
    def window_ref(self, meta: Meta, children: list[Token]) -> ast.ModPath:
        return self.mod_path(meta, children)

    def where_clause(self, children: list[Any]) -> SourceExpr:
        return children[0]

    having_clause = where_clause

    def group_clause(self, children: list[Any]) -> ast.GroupClause:
        return children[0]

    def group_set(self, children: list[Any]) -> ast.GroupClause:
        return ast.GroupClause("set", items=list(children))

    def group_each(self, children: list[Any]) -> ast.GroupClause:
        return ast.GroupClause("each", expr=children[0])

    def group_expr(self, children: list[Any]) -> ast.GroupClause:
        return ast.GroupClause("expr", expr=children[0])

    # --- definitions -------------------------------------------------------------------------

    @v_args(meta=True)
    def define_window(self, meta: Meta, children: list[Any]) -> ast.DefineWindow:
        name, kind, args, params, state, script = children
        return ast.DefineWindow(
            self._name(name), self._name(kind), args or [], params or [], script, self._pos(meta), state
        )

    @v_args(meta=True)
    def define_window_legacy(self, meta: Meta, children: list[Any]) -> ast.DefineWindow:
        kind, name, *rest = children
        return self.define_window(meta, [name, kind, *rest])

    def _kind_definition(self, cls: type[D], meta: Meta, name: Token, kind: ast.ModPath, args_with: Any) -> D:
        """`define ... NAME from KIND [args] [with params] end`, operators and connectors alike."""
        args, params = args_with or ([], [])
        return cls(self._name(name), kind, args, params, self._pos(meta))

    @v_args(meta=True)
    def define_operator(self, meta: Meta, children: list[Any]) -> ast.DefineOperator:
        return self._kind_definition(ast.DefineOperator, meta, *children)

    @v_args(meta=True)
    def define_operator_legacy(self, meta: Meta, children: list[Any]) -> ast.DefineOperator:
        kind, name, args_with = children  # `define KIND operator NAME`, Tremor's older order
        return self._kind_definition(ast.DefineOperator, meta, name, kind, args_with)

    @v_args(meta=True)
    def define_script(self, meta: Meta, children: list[Any]) -> ast.DefineScript:
        name, args, state, *ports, body = children
        return ast.DefineScript(self._name(name), args or [], state, body, self._pos(meta), list(ports))

    def port_script(self, children: list[Any]) -> tuple[ast.Name, SourceExpr]:
        return self._name(children[0]), children[1]

    @v_args(meta=True)
    def define_pipeline(self, meta: Meta, children: list[Any]) -> ast.DefinePipeline:
        name, inputs, outputs, args, body = children
        return ast.DefinePipeline(self._name(name), inputs, outputs, args or [], body, self._pos(meta))

    def from_ports(self, children: list[Any]) -> list[ast.Name]:
        return children[0]

    into_ports = from_ports

    def port_list(self, children: list[Token]) -> list[ast.Name]:
        return [self._name(t) for t in children]

    def _only(self, children: list[Any]) -> Any:
        """A clause that wraps one thing (`state ...`, `script ...`, `with ... end`): that thing."""
        return children[0]

    def _present(self, children: list[Any]) -> list[Any]:
        """A list whose optional items lark leaves as None: the items written."""
        return [c for c in children if c is not None]

    state_clause = script_clause = window_state = with_clause = with_end = _only
    def_args = assignments = _present

    def arg_decl(self, children: list[Any]) -> ast.ArgDecl:
        return ast.ArgDecl(self._name(children[0]), children[1])

    def assignment(self, children: list[Any]) -> ast.Assignment:
        return ast.Assignment(self._name(children[0]), children[1])

    def args_with_end(self, children: list[Any]) -> tuple[list[ast.ArgDecl], list[ast.Assignment]]:
        return (children[0] or [], children[1] or [])

    @v_args(meta=True)
    def create_stmt(self, meta: Meta, children: list[Any]) -> ast.CreateStmt:
        kind, alias, target, params = children
        return ast.CreateStmt(kind, self._name(alias), target, params or [], self._pos(meta))

    def create_kind(self, children: list[Token]) -> str:
        return str(children[0])


def combined_transformer(base: Transformer, source: SourceText, prefix: str = "") -> Transformer:
    """`base` plus the script transformer, answering both for `script__*` rules and exported names."""
    script = script_transformer(source)
    merge_transformers(base, script=script)
    if isinstance(base, TrickleTransformer):
        base.script = script
    delegate(base, script, SCRIPT_EXPORTS)
    return base


def parse_with(name: str, source: SourceText, transformer: Transformer) -> Any:
    """Parse `source` with grammar `name`; syntax errors become LangError with caret and hint."""
    try:
        tree = parse_bounded(grammar(name), source.text, source)
    except UnexpectedInput as err:
        expected = expected_terminals(err, accepts_first=True)
        hint = _open_construct_hint(err, expected) or _expected_hint(expected, grammar(name))
        raise syntax_error(err, source, TRICKLE_WORDING, hint) from None
    return transform_tree(transformer, tree, source)


def parse_trickle(source: SourceText) -> ast.Query:
    """Parse a `.trickle` file (one pipeline body)."""
    transformer = combined_transformer(TrickleTransformer(source), source)
    return ast.Query(parse_with("trickle", source, transformer), source.name)


def _members(children: list[Any]) -> list[tuple[tuple[ast.Name, ...], ast.Name | None]]:
    """The (path, alias) pairs of a `use` group's members (a trailing comma leaves a None)."""
    return [pair for member in children if member is not None for pair in member]
