"""Parsing tremor-script text into the syntax tree of `ast.py`.

The grammar lives in `grammar/script.lark`; `ScriptTransformer` turns lark's
parse tree into AST nodes. Trickle and Troy import the grammar's rules and
merge this transformer into theirs (`lark.visitors.merge_transformers`), so
every method here is named after a grammar rule or alias. Their `Lark`
instance must be built with `propagate_positions=True`, like ours.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from importlib import resources
from typing import Any

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedInput, UnexpectedToken

from contraflow.lang.errors import LangError, Position, SourceText
from contraflow.lang.grammar import parse_table_cache
from contraflow.lang.nesting import parse_bounded, transform_tree
from contraflow.lang.script import ast
from contraflow.lang.syntax_errors import Wording, expected_terminals, syntax_error

GRAMMAR_PACKAGE = "contraflow.lang.grammar"


def grammar_text() -> str:
    """The tremor-script grammar source (package data)."""
    return resources.files(GRAMMAR_PACKAGE).joinpath("script.lark").read_text(encoding="utf-8")


@functools.cache
def _parser() -> Lark:
    return Lark(
        grammar_text(),
        parser="lalr",
        start=["exprs", "expr"],
        propagate_positions=True,
        maybe_placeholders=False,
        cache=parse_table_cache("script"),
    )


_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "b": "\b",
    "f": "\f",
    "\\": "\\",
    '"': '"',
    "/": "/",
    "#": "#",
    "{": "{",
    "}": "}",
}


def _ident(tok: Token) -> str:
    """An identifier's name, without the backticks of an escaped one (`` `end` ``)."""
    text = str(tok)
    return text[1:-1] if text.startswith("`") else text


def _int_value(text: str) -> int:
    text = text.replace("_", "")
    return int(text, 16) if text.lower().startswith("0x") else int(text)


class _Builder:
    """Position bookkeeping shared by the transformer's rule methods."""

    def __init__(self, source: SourceText, line_offset: int = 0, col_offset: int = 0) -> None:
        self.source = source
        self.line_offset = line_offset
        self.col_offset = col_offset

    def pos_at(self, line: int, column: int, length: int = 1) -> Position:
        col = column + self.col_offset if line == 1 else column
        return self.source.position(line + self.line_offset, col, max(1, length))

    def pos(self, meta: Any) -> Position:
        if getattr(meta, "empty", True):
            return self.pos_at(1, 1)
        length = meta.end_column - meta.column if meta.end_line == meta.line else 1
        return self.pos_at(meta.line, meta.column, length)

    def tok_pos(self, tok: Token) -> Position:
        return self.pos_at(tok.line or 1, tok.column or 1, len(str(tok)))


def _binary(op: str) -> Callable[..., ast.Binary]:
    """A transformer method for a binary-operator rule (the rule alias names the operator)."""

    def rule(self: Any, meta: Any, items: list[Any]) -> ast.Binary:
        return ast.Binary(self._b.pos(meta), op, items[0], items[1])

    return rule


def _unary(op: str) -> Callable[..., ast.Unary]:
    def rule(self: Any, meta: Any, items: list[Any]) -> ast.Unary:
        return ast.Unary(self._b.pos(meta), op, items[0])

    return rule


def _field_cmp(op: str) -> Callable[..., ast.FieldPred]:
    def rule(self: Any, meta: Any, items: list[Any]) -> ast.FieldPred:
        return ast.FieldPred(self._b.pos(meta), _field_key(items[0]), op, items[1])

    return rule


def _patch(op: str, shape: str) -> Callable[..., ast.PatchOp]:
    """`shape`: "kv" (key => value), "k" (key only), "v" (=> value for the whole record)."""

    def rule(self: Any, meta: Any, items: list[Any]) -> ast.PatchOp:
        pos = self._b.pos(meta)
        if shape == "k":
            return ast.PatchOp(pos, op, items[0], None)
        if shape == "v":
            return ast.PatchOp(pos, op, None, items[0])
        return ast.PatchOp(pos, op, items[0], items[1])

    return rule


def _root(name: str) -> Callable[[Any, Any, list[Any]], tuple[str, None, None]]:
    """The transformer step for a path rooted at keyword `name` (`event`, `state`, ...)."""

    def root(self: Any, meta: Any, items: list[Any]) -> tuple[str, None, None]:
        return (name, None, None)

    return root


@v_args(meta=True)
class ScriptTransformer(Transformer[Token, Any]):
    """Turns a tremor-script parse tree into `ast` nodes.

    `source` names the file for positions. Merge into a Trickle/Troy
    transformer with `merge_transformers(base, script=ScriptTransformer(src))`.
    """

    def __init__(self, source: SourceText, *, line_offset: int = 0, col_offset: int = 0) -> None:
        super().__init__()
        self._b = _Builder(source, line_offset, col_offset)
        self.source = source

    # ------------------------------------------------------------ body
    def exprs(self, meta: Any, items: list[Any]) -> ast.Script:
        flat = [u for i in items for u in (i if isinstance(i, list) else [i])]
        exprs = tuple(i for i in flat if isinstance(i, ast.Expr))
        fns = tuple(i for i in flat if isinstance(i, ast.FnDefn))
        consts = tuple(i for i in flat if isinstance(i, ast.ConstDefn))
        uses = tuple(i for i in flat if isinstance(i, ast.Use))
        last = flat[-1] if flat else None
        result_const = last.name if isinstance(last, ast.ConstDefn) else None
        return ast.Script(self._b.pos(meta), exprs, fns, consts, self.source, uses, result_const)

    # ------------------------------------------------------------ use
    def use_alias(self, meta: Any, items: list[Token]) -> _Alias:
        return _Alias(_ident(items[0]))

    def use_item(self, meta: Any, items: list[Any]) -> list[tuple[tuple[str, ...], str]]:
        alias = items.pop().name if isinstance(items[-1], _Alias) else None
        path = tuple(_ident(t) for t in items)
        return [(path, alias or path[-1])]

    def use_nested(self, meta: Any, items: list[Any]) -> list[tuple[tuple[str, ...], str]]:
        base = tuple(_ident(t) for t in items[:-1])
        return [((*base, *path), alias) for path, alias in items[-1]]

    def use_braces(self, meta: Any, items: list[Any]) -> list[tuple[tuple[str, ...], str]]:
        return [pair for item in items for pair in item]

    def use_one(self, meta: Any, items: list[Any]) -> list[ast.Use]:
        alias = items.pop().name if isinstance(items[-1], _Alias) else None
        path = tuple(_ident(t) for t in items)
        return [ast.Use(self._b.pos(meta), path, alias or path[-1])]

    def use_group(self, meta: Any, items: list[Any]) -> list[ast.Use]:
        base = tuple(_ident(t) for t in items[:-1])
        pos = self._b.pos(meta)
        return [ast.Use(pos, (*base, *path), alias) for path, alias in items[-1]]

    def block(self, meta: Any, items: list[Any]) -> tuple[ast.Expr, ...]:
        return tuple(items)

    def const_defn(self, meta: Any, items: list[Any]) -> ast.ConstDefn:
        name, value = items
        return ast.ConstDefn(self._b.pos(meta), _ident(name), value)

    def fn_params(self, meta: Any, items: list[Any]) -> tuple[str, ...]:
        return tuple(_ident(t) if isinstance(t, Token) else "..." for t in items)

    def fn_varargs(self, meta: Any, items: list[Any]) -> str:
        return "..."

    def fn_with_body(self, meta: Any, items: list[Any]) -> tuple[str, Any]:
        return ("with", items[0])

    def fn_of_body(self, meta: Any, items: list[Any]) -> tuple[str, Any]:
        return ("of", tuple(items))

    def fn_case(self, meta: Any, items: list[Any]) -> ast.Case:
        body = items[-1]
        guard = None
        rest = items[:-1]
        if rest and isinstance(rest[-1], _Guard):
            guard = rest.pop().expr
        elems, is_open = _split_rest(rest)
        pattern = ast.TuplePattern(self._b.pos(meta), tuple(elems), is_open)
        return ast.Case(self._b.pos(meta), pattern, guard, body)

    def fn_case_any(self, meta: Any, items: list[Any]) -> ast.Case:
        pos = self._b.pos(meta)
        guard = items[0].expr if len(items) == 2 else None
        return ast.Case(pos, ast.AnyPattern(pos), guard, items[-1])

    def fn_default(self, meta: Any, items: list[Any]) -> ast.Case:
        pos = self._b.pos(meta)
        return ast.Case(pos, ast.AnyPattern(pos), None, items[0])

    def fn_defn(self, meta: Any, items: list[Any]) -> ast.FnDefn:
        name = _ident(items[0])
        params: tuple[str, ...] = items[1] if len(items) == 3 else ()
        kind, body = items[-1]
        pos = self._b.pos(meta)
        varargs = "..." in params
        params = tuple(p for p in params if p != "...")
        if kind == "with":
            return ast.FnDefn(pos, name, params, body, None, varargs)
        return ast.FnDefn(pos, name, params, (), body, varargs)

    # ------------------------------------------------------------ statements
    def let_expr(self, meta: Any, items: list[Any]) -> ast.Let:
        return ast.Let(self._b.pos(meta), items[0], items[1])

    def emit_event(self, meta: Any, items: list[Any]) -> ast.Emit:
        return ast.Emit(self._b.pos(meta), None, None)

    def emit_value(self, meta: Any, items: list[Any]) -> ast.Emit:
        return ast.Emit(self._b.pos(meta), items[0], None)

    def emit_event_port(self, meta: Any, items: list[Any]) -> ast.Emit:
        return ast.Emit(self._b.pos(meta), None, items[0])

    def emit_value_port(self, meta: Any, items: list[Any]) -> ast.Emit:
        return ast.Emit(self._b.pos(meta), items[0], items[1])

    def drop_expr(self, meta: Any, items: list[Any]) -> ast.Drop:
        return ast.Drop(self._b.pos(meta))

    # ------------------------------------------------------------ operators
    or_op = _binary("or")
    xor_op = _binary("xor")
    and_op = _binary("and")
    bor_op = _binary("|")
    bxor_op = _binary("^")
    band_op = _binary("&")
    eq_op = _binary("==")
    ne_op = _binary("!=")
    ge_op = _binary(">=")
    gt_op = _binary(">")
    le_op = _binary("<=")
    lt_op = _binary("<")
    shr_op = _binary(">>")
    ushr_op = _binary(">>>")
    shl_op = _binary("<<")
    add_op = _binary("+")
    sub_op = _binary("-")
    mul_op = _binary("*")
    div_op = _binary("/")
    mod_op = _binary("%")
    neg_op = _unary("-")
    pos_op = _unary("+")
    not_op = _unary("not")
    bnot_op = _unary("!")
    fp_eq = _field_cmp("==")
    fp_ne = _field_cmp("!=")
    fp_ge = _field_cmp(">=")
    fp_gt = _field_cmp(">")
    fp_le = _field_cmp("<=")
    fp_lt = _field_cmp("<")
    po_insert = _patch("insert", "kv")
    po_upsert = _patch("upsert", "kv")
    po_update = _patch("update", "kv")
    po_erase = _patch("erase", "k")
    po_merge_key = _patch("merge", "kv")
    po_merge = _patch("merge", "v")
    po_default_key = _patch("default", "kv")
    po_default = _patch("default", "v")
    po_copy = _patch("copy", "kv")
    po_move = _patch("move", "kv")

    def present_expr(self, meta: Any, items: list[Any]) -> ast.Present:
        return ast.Present(self._b.pos(meta), items[0], False)

    def absent_expr(self, meta: Any, items: list[Any]) -> ast.Present:
        return ast.Present(self._b.pos(meta), items[0], True)

    # ------------------------------------------------------------ literals
    def int_lit(self, meta: Any, items: list[Token]) -> ast.Literal:
        return ast.Literal(self._b.pos(meta), _int_value(str(items[0])))

    def float_lit(self, meta: Any, items: list[Token]) -> ast.Literal:
        return ast.Literal(self._b.pos(meta), float(str(items[0]).replace("_", "")))

    def true_lit(self, meta: Any, items: list[Any]) -> ast.Literal:
        return ast.Literal(self._b.pos(meta), True)

    def false_lit(self, meta: Any, items: list[Any]) -> ast.Literal:
        return ast.Literal(self._b.pos(meta), False)

    def null_lit(self, meta: Any, items: list[Any]) -> ast.Literal:
        return ast.Literal(self._b.pos(meta), None)

    def string_lit(self, meta: Any, items: list[Token]) -> ast.Expr:
        tok = items[0]
        return self._string(tok, str(tok)[1:-1], (tok.line or 1), (tok.column or 1) + 1)

    def heredoc_lit(self, meta: Any, items: list[Token]) -> ast.Expr:
        tok = items[0]
        raw = str(tok)[3:-3]
        first_nl = raw.index("\n")
        return self._string(tok, raw[first_nl + 1 :], (tok.line or 1) + 1, 1)

    def _string(self, tok: Token, raw: str, line: int, column: int) -> ast.Expr:
        pos = self._b.tok_pos(tok)
        parts = _split_interpolation(raw, line, column, self._b, self.source)
        if all(isinstance(p, str) for p in parts):
            return ast.Literal(pos, "".join(p for p in parts if isinstance(p, str)))
        return ast.Interpolated(pos, tuple(parts))

    def record(self, meta: Any, items: list[Any]) -> ast.RecordLit:
        return ast.RecordLit(self._b.pos(meta), tuple(items))

    def record_field(self, meta: Any, items: list[Any]) -> tuple[ast.Expr, ast.Expr]:
        key_tok, value = items
        key = self.string_lit(meta, [key_tok])
        return (key, value)

    def array(self, meta: Any, items: list[Any]) -> ast.ArrayLit:
        return ast.ArrayLit(self._b.pos(meta), tuple(items))

    # ------------------------------------------------------------ paths and calls
    def path(self, meta: Any, items: list[Any]) -> ast.Path:
        root, name, first = items[0]
        segments = tuple(([first] if first else []) + items[1:])
        return ast.Path(self._b.pos(meta), root, name, segments)

    # A path's root keyword: (root, no local name, no first segment).
    root_event = _root("event")
    root_state = _root("state")
    root_args = _root("args")
    root_group = _root("group")
    root_window = _root("window")
    root_meta = _root("meta")

    def root_meta_key(self, meta: Any, items: list[Token]) -> tuple[str, None, ast.KeySeg]:
        return ("meta", None, ast.KeySeg(self._b.tok_pos(items[0]), _ident(items[0])))

    def root_local(self, meta: Any, items: list[Token]) -> tuple[str, str, None]:
        return ("local", _ident(items[0]), None)

    def root_module(self, meta: Any, items: list[Token]) -> tuple[str, str, None]:
        """`consts::MAP`: a constant of a module brought in with `use`."""
        return ("local", "::".join(_ident(t) for t in items), None)

    def binary_lit(self, meta: Any, items: list[Any]) -> ast.BinaryLit:
        return ast.BinaryLit(self._b.pos(meta), tuple(i for i in items if i is not None))

    def bin_seg(self, meta: Any, items: list[Any]) -> ast.BinarySegment:
        value, *rest = (i for i in items if i is not None)
        size = next((r for r in rest if isinstance(r, int)), None)
        types = next((r for r in rest if isinstance(r, tuple)), ())
        return check_binary_segment(ast.BinarySegment(self._b.pos(meta), value, size, types), self.source)

    def bin_size(self, meta: Any, items: list[Token]) -> int:
        return _int_value(str(items[0]))

    def bin_types(self, meta: Any, items: list[Token]) -> tuple[str, ...]:
        return tuple(_ident(t) for t in items)

    def expr_path(self, meta: Any, items: list[Any]) -> ast.ExprPath:
        return ast.ExprPath(self._b.pos(meta), items[0], tuple(items[1:]))

    def seg_key(self, meta: Any, items: list[Token]) -> ast.KeySeg:
        return ast.KeySeg(self._b.pos(meta), _ident(items[0]))

    def seg_index(self, meta: Any, items: list[Any]) -> ast.IndexSeg:
        return ast.IndexSeg(self._b.pos(meta), items[0])

    def seg_range(self, meta: Any, items: list[Any]) -> ast.RangeSeg:
        return ast.RangeSeg(self._b.pos(meta), items[0], items[1])

    def fn_name(self, meta: Any, items: list[Token]) -> str:
        return "::".join(_ident(t) for t in items)

    def call(self, meta: Any, items: list[Any]) -> ast.Call:
        return ast.Call(self._b.pos(meta), items[0], tuple(items[1:]))

    # ------------------------------------------------------------ match and patterns
    def match_expr(self, meta: Any, items: list[Any]) -> ast.Match:
        return ast.Match(self._b.pos(meta), items[0], tuple(items[1:]))

    def match_case(self, meta: Any, items: list[Any]) -> ast.Case:
        guard = items[1].expr if len(items) == 3 else None
        return ast.Case(self._b.pos(meta), items[0], guard, items[-1])

    def match_default(self, meta: Any, items: list[Any]) -> ast.Case:
        pos = self._b.pos(meta)
        return ast.Case(pos, ast.AnyPattern(pos), None, items[0])

    def guard(self, meta: Any, items: list[Any]) -> _Guard:
        return _Guard(items[0])

    def bind_pattern(self, meta: Any, items: list[Any]) -> ast.BindPattern:
        return ast.BindPattern(self._b.pos(meta), _ident(items[0]), items[1])

    def bind_expr_pattern(self, meta: Any, items: list[Any]) -> ast.BindPattern:
        """`case x = 1 =>`: binds the value when it equals the expression."""
        pos = self._b.pos(meta)
        return ast.BindPattern(pos, _ident(items[0]), ast.ExprPattern(items[1].pos, items[1]))

    def any_pattern(self, meta: Any, items: list[Any]) -> ast.AnyPattern:
        return ast.AnyPattern(self._b.pos(meta))

    def expr_pattern(self, meta: Any, items: list[Any]) -> ast.Pattern:
        """A value to compare with; a binary literal in a pattern is a binary pattern."""
        if isinstance(items[0], ast.BinaryLit):
            return binary_pattern(items[0], self.source)
        return ast.ExprPattern(self._b.pos(meta), items[0])

    def extractor_pattern(self, meta: Any, items: list[Token]) -> ast.ExtractorPattern:
        return _extractor(self._b.tok_pos(items[0]), str(items[0]))

    def record_pattern(self, meta: Any, items: list[Any]) -> ast.RecordPattern:
        return ast.RecordPattern(self._b.pos(meta), tuple(items))

    def array_pattern(self, meta: Any, items: list[Any]) -> ast.ArrayPattern:
        return ast.ArrayPattern(self._b.pos(meta), tuple(items))

    def tuple_pattern(self, meta: Any, items: list[Any]) -> ast.TuplePattern:
        elems, is_open = _split_rest(items)
        return ast.TuplePattern(self._b.pos(meta), tuple(elems), is_open)

    def tuple_rest(self, meta: Any, items: list[Any]) -> _Rest:
        return _Rest()

    def fp_present(self, meta: Any, items: list[Token]) -> ast.FieldPred:
        return ast.FieldPred(self._b.pos(meta), _field_key(items[0]), "present", None)

    def fp_absent(self, meta: Any, items: list[Token]) -> ast.FieldPred:
        return ast.FieldPred(self._b.pos(meta), _field_key(items[0]), "absent", None)

    def fp_extract(self, meta: Any, items: list[Token]) -> ast.FieldPred:
        ext = _extractor(self._b.tok_pos(items[1]), str(items[1]))
        return ast.FieldPred(self._b.pos(meta), _field_key(items[0]), "~", ext)

    def fp_sub(self, meta: Any, items: list[Any]) -> ast.FieldPred:
        return ast.FieldPred(self._b.pos(meta), _field_key(items[0]), "~=", items[1])

    # ------------------------------------------------------------ for, patch, merge
    def for_expr(self, meta: Any, items: list[Any]) -> ast.For:
        items = [i for i in items if i is not None]  # Trickle's parser keeps `[...]` placeholders
        fold = items.pop() if isinstance(items[-1], _Fold) else None
        pos = self._b.pos(meta)
        if fold is None:
            return ast.For(pos, items[0], tuple(items[1:]))
        return ast.For(pos, items[0], tuple(items[1:]), fold.initial, fold.op)

    def for_into(self, meta: Any, items: list[Any]) -> _Fold:
        op = items[1] if len(items) > 1 else None
        return _Fold(items[0], op or "+")

    def fold_op(self, meta: Any, items: list[Token]) -> str:
        return str(items[0])

    def for_case(self, meta: Any, items: list[Any]) -> ast.ForCase:
        guard = items[2].expr if len(items) == 4 else None
        return ast.ForCase(self._b.pos(meta), _ident(items[0]), _ident(items[1]), guard, items[-1])

    def patch_expr(self, meta: Any, items: list[Any]) -> ast.Patch:
        return ast.Patch(self._b.pos(meta), items[0], tuple(items[1:]))

    def merge_expr(self, meta: Any, items: list[Any]) -> ast.Merge:
        return ast.Merge(self._b.pos(meta), items[0], items[1])


# Tremor's binary segment types (`/little-signed-integer`...) and what each means here.
_BINARY_TYPES: dict[str, tuple[str, ...]] = {
    "binary": ("binary",),
    "": ("unsigned",),
    "integer": ("unsigned",),
    "big": ("unsigned",),
    "unsigned": ("unsigned",),
    "unsigned-integer": ("unsigned",),
    "big-integer": ("unsigned",),
    "big-unsigned-integer": ("unsigned",),
    "signed-integer": ("signed",),
    "big-signed-integer": ("signed",),
    "little": ("unsigned", "little"),
    "little-integer": ("unsigned", "little"),
    "little-unsigned-integer": ("unsigned", "little"),
    "little-signed-integer": ("signed", "little"),
}


def check_binary_segment(segment: ast.BinarySegment, source: SourceText) -> ast.BinarySegment:
    """The segment with its type in canonical form, or a compile error for a type or size
    Tremor rejects: sizes are 1 to 64 (bits for integers, bytes for `/binary`)."""
    # `signed_integer` is read as `signed-integer`: Tremor spells the parts with `-`, but
    # the `_` spelling appears in the wild and cannot mean anything else
    name = "-".join(segment.types).replace("_", "-")
    canonical = _BINARY_TYPES.get(name)
    if canonical is None:
        raise LangError(
            f"unknown binary segment type `{name}`",
            segment.pos,
            source,
            hint="types: " + ", ".join(sorted(t for t in _BINARY_TYPES if t)),
        )
    if segment.size is not None and not 1 <= segment.size <= 64:
        unit = "bytes" if canonical[0] == "binary" else "bits"
        raise LangError(
            f"binary segment size must be from 1 to 64 {unit}, got {segment.size}",
            segment.pos,
            source,
        )
    return dataclasses.replace(segment, types=canonical)


def binary_pattern(literal: ast.BinaryLit, source: SourceText) -> ast.BinaryPattern:
    """`case << a:8, rest/binary >>`: only the last `/binary` segment may go without a size."""
    bits = 0
    for segment in literal.segments:
        takes_rest = segment.types[0] == "binary" and segment.size is None
        if takes_rest and segment is not literal.segments[-1]:
            raise LangError(
                "only the last segment of a binary pattern can take the rest",
                segment.pos,
                source,
                hint="give this /binary segment a size in bytes: `x:4/binary`",
            )
        if takes_rest and bits % 8:
            raise LangError(
                f"the rest of a binary pattern must start on a byte boundary, not after {bits} bits",
                segment.pos,
                source,
                hint="make the segments before it add up to a multiple of 8 bits",
            )
        bits += (segment.size or 8) * (8 if segment.types[0] == "binary" else 1)
    return ast.BinaryPattern(literal.pos, literal.segments)


class _Guard:
    """A `when` guard, told apart from the patterns next to it."""

    def __init__(self, expr: ast.Expr) -> None:
        self.expr = expr


class _Rest:
    """The `...` that opens a tuple pattern."""


class _Alias:
    """The `as name` of a `use`."""

    def __init__(self, name: str) -> None:
        self.name = name


class _Fold:
    """The `into initial [use op]` clause of a comprehension."""

    def __init__(self, initial: ast.Expr, op: str) -> None:
        self.initial = initial
        self.op = op


def _split_rest(items: list[Any]) -> tuple[list[Any], bool]:
    if items and isinstance(items[-1], _Rest):
        return items[:-1], True
    return items, False


def _field_key(tok: Token) -> str:
    if tok.type.endswith("STRING"):
        return _unescape(str(tok)[1:-1])
    return _ident(tok)


def _extractor(pos: Position, text: str) -> ast.ExtractorPattern:
    kind, _, rest = text.partition("|")
    return ast.ExtractorPattern(pos, kind, extractor_text(rest[:-1]))


_EXTRACTOR_ESCAPE = re.compile(r"\\([\\|\n])")


def extractor_text(raw: str) -> str:
    """The text between an extractor's bars, read as Tremor's lexer reads it: `\\|` is a bar,
    `\\\\` a backslash, and a backslash at the end of a line continues the text on the next one
    (the lines' common indentation removed, then joined). Other backslashes stay as written, so
    `re|\\d+|` is the regex `\\d+` (Tremor rejects them; accepting them breaks no Tremor file)."""
    lines: list[str] = []
    current: list[str] = []
    pos = 0
    for m in _EXTRACTOR_ESCAPE.finditer(raw):
        current.append(raw[pos : m.start()])
        pos = m.end()
        if m.group(1) == "\n":
            lines.append("".join(current))
            current = []
        else:
            current.append(m.group(1))
    current.append(raw[pos:])
    lines.append("".join(current))
    if len(lines) == 1:
        return lines[0]
    indent = min((len(line) - len(line.lstrip()) for line in lines if line), default=0)
    return "".join(line[indent:] for line in lines)


def _unescape(raw: str) -> str:
    if "\\" not in raw:
        return raw
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch != "\\" or i + 1 >= len(raw):
            out.append(ch)
            i += 1
            continue
        nxt = raw[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9A-Fa-f]{4}", raw[i + 2 : i + 6]):
            out.append(chr(int(raw[i + 2 : i + 6], 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, "\\" + nxt))
        i += 2
    return "".join(out)


def _interp_end(raw: str, start: int) -> int:
    """Index of the `}` closing the interpolation whose body starts at `start`."""
    depth = 0
    i = start
    in_str = False
    while i < len(raw):
        ch = raw[i]
        if in_str:
            if ch == "\\":
                i += 1
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    return -1


def _split_interpolation(
    raw: str, line: int, column: int, builder: _Builder, source: SourceText
) -> list[str | ast.Expr]:
    """Literal text and parsed `#{...}` expressions of a string body starting at (line, column)."""
    parts: list[str | ast.Expr] = []
    literal_start = 0
    i = 0
    while i < len(raw):
        if raw[i] == "\\":
            i += 2
            continue
        if raw.startswith("#{", i):
            end = _interp_end(raw, i + 2)
            if end < 0:
                break
            if i > literal_start:
                parts.append(_unescape(raw[literal_start:i]))
            inner = raw[i + 2 : end]
            before = raw[: i + 2]
            inner_line = line + before.count("\n")
            inner_col = (len(before) - before.rfind("\n")) if "\n" in before else column + len(before)
            abs_line = builder.line_offset + inner_line
            abs_col = inner_col + (builder.col_offset if inner_line == 1 else 0)
            parts.append(_parse(inner, source, "expr", abs_line - 1, abs_col - 1))
            i = literal_start = end + 1
            continue
        i += 1
    if literal_start < len(raw):
        parts.append(_unescape(raw[literal_start:]))
    merged: list[str | ast.Expr] = []
    for part in parts:
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        else:
            merged.append(part)
    return merged


# ---------------------------------------------------------------- errors

_TOKEN_WORDS = {
    "IDENT": "a name",
    "STRING": "a string",
    "HEREDOC": "a heredoc string",
    "INT": "an integer",
    "FLOAT": "a float",
    "EXTRACTOR": "an extractor like glob|*|",
    "$END": "the end of the script",
    "SEMICOLON": "';'",
    "COMMA": "','",
    "COLON": "':'",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "DOT": "'.'",
    "EQUAL": "'='",
    "PLUS": "'+'",
    "MINUS": "'-'",
    "STAR": "'*'",
    "SLASH": "'/'",
    "PERCENT": "'%'",
    "MORETHAN": "'>'",
    "LESSTHAN": "'<'",
    "VBAR": "'|'",
    "CIRCUMFLEX": "'^'",
    "AMPERSAND": "'&'",
    "BANG": "'!'",
    "TILDE": "'~'",
    "DOLLAR": "'$'",
}
_OPENERS = {"match", "for", "patch", "merge", "fn", "(", "[", "{", "%{", "%[", "%("}
_CLOSERS = {"(": "')'", "[": "']'", "{": "'}'", "%{": "'}'", "%[": "']'", "%(": "')'"}


def describe_token(name: str, lark: Lark | None = None) -> str:
    """A terminal's name in words: 'end' for END, 'a name' for IDENT."""
    short = name.rsplit("__", 1)[-1]
    if short in _TOKEN_WORDS:
        return _TOKEN_WORDS[short]
    if lark is not None:
        for term in lark.terminals:
            if term.name == name and term.pattern.type == "str":
                return f"'{term.pattern.value}'"
    return f"'{short.lower()}'" if short.isalpha() else short


def _open_construct(err: UnexpectedInput) -> Token | None:
    """The innermost keyword or bracket still open when the parser stopped."""
    parser = getattr(err, "interactive_parser", None)
    if parser is None:
        return None
    stack = getattr(parser.parser_state, "value_stack", [])
    depth = 0
    for item in reversed(stack):
        if not isinstance(item, Token):
            continue
        if item.value in ("end", ")", "]", "}"):
            depth += 1
        elif item.value in _OPENERS:
            if depth == 0:
                return item
            depth -= 1
    return None


def _hint(err: UnexpectedInput, lark: Lark) -> str:
    """What tremor-script expected where it stopped, in words: a closer for what is open, an expression..."""
    expected = sorted(expected_terminals(err))
    words = sorted({describe_token(name, lark) for name in expected})
    opener = _open_construct(err)
    hint = ""
    if opener is not None:
        want = _CLOSERS.get(opener.value, "'end'")
        if want in words:
            hint = f"expected {want} to close the '{opener.value}' started at {opener.line}:{opener.column}"
    short_names = {name.rsplit("__", 1)[-1] for name in expected}
    if not hint and {"INT", "STRING", "IDENT"} <= short_names:
        hint = "expected an expression"
    if isinstance(err, UnexpectedToken) and err.token.value == "=" and not hint.startswith("expected 'end'"):
        hint = "to assign, write `let <path> = <value>`"
    if not hint and words:
        shown = words if len(words) <= 8 else words[:8] + ["..."]
        hint = "expected " + ", ".join(shown)
    return hint


def _wording(lark: Lark, end_of: str) -> Wording:
    def token(tok: Token) -> str:
        word = describe_token(tok.type, lark)
        return word if word.strip("'") == str(tok) else f"{word} {str(tok)!r}"

    return Wording("", end_of, token)


def _parse(text: str, source: SourceText, start: str, line_offset: int = 0, col_offset: int = 0) -> Any:
    lark = _parser()
    try:
        tree = parse_bounded(lark, text, source, start=start, line_offset=line_offset, col_offset=col_offset)
    except UnexpectedInput as err:
        end_of = "script" if text == source.text else "interpolation `#{...}`"
        raise syntax_error(
            err,
            source,
            _wording(lark, end_of),
            _hint(err, lark),
            line_offset=line_offset,
            col_offset=col_offset,
            parsed_text=text,
        ) from None
    transformer = ScriptTransformer(source, line_offset=line_offset, col_offset=col_offset)
    return transform_tree(transformer, tree, source)


def parse_script(text: str, file: str = "<script>") -> ast.Script:
    """Parse a whole script body (expressions, `fn` and `const` definitions)."""
    source = SourceText(file, text)
    if not text.strip() or not _has_code(text):
        raise LangError(
            "empty script",
            source.position(1, 1),
            source,
            hint="a script needs at least one expression, e.g. `event`",
        )
    result = _parse(text, source, "exprs")
    assert isinstance(result, ast.Script)
    return result


def parse_expr(text: str, file: str = "<expr>") -> ast.Expr:
    """Parse one expression (Trickle's select/where/having clauses use this grammar rule)."""
    source = SourceText(file, text)
    result = _parse(text, source, "expr")
    assert isinstance(result, ast.Expr)
    return result


def _has_code(text: str) -> bool:
    return any(line.strip() and not line.strip().startswith("#") for line in text.splitlines())
