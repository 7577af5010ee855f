"""tremor-script syntax trees to columnar expressions (`contraflow.pipeline.columnar.ir`).

Only constructs whose per-event semantics (`contraflow.lang.script.values`,
`codegen`) a column kernel reproduces exactly on every row it claims are
lowered; anything else raises `NotVectorizable` and its node stays on the
per-event executor. The choices, each read off the per-event code:

- `event.a.b` reads a field; a missing field is an error there, a null field
  is not, but both are null in a column, so null rows fall back;
- comparisons take a field and a literal: strings (code-point order, which is
  UTF-8 byte order), bools (`==`/`!=` only), and numbers that a double holds
  exactly (|n| <= 2^53), so an int column compared as doubles keeps its order;
  `null` literals are left out (a null field always falls back);
- `and`/`or` short-circuit: the right side must be exact only where it runs;
- `match` on literal patterns of one kind, no guards, one expression per case;
- `{...}` with literal keys (a Python dict: first position, last value wins);
- `$key` reads only what a `let $key` earlier on the same route set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from contraflow.lang.script import ast
from contraflow.pipeline.columnar.ir import (
    Compare,
    Const,
    Expr,
    Field,
    Logic,
    Match,
    Not,
    NotVectorizable,
    Record,
    is_boolean,
)

# Largest integer a double holds exactly: comparing an int64 column as doubles against a literal
# no larger keeps every row's order (rounding is monotonic).
EXACT_DOUBLE = 2**53
_ORDERING = ("<", "<=", ">", ">=")
_FLIPPED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass
class Scope:
    """What `event` and `$` are at this point of a route.

    `event` None is the input event itself (its fields are read from the
    batch); otherwise the record a `select {...}` or script built upstream.
    `meta` holds the keys set by `let $key = ...` upstream, in dict order.
    """

    event: Expr | None = None
    meta: dict[str, Expr] = field(default_factory=dict)


def lower(node: Any, scope: Scope) -> Expr:
    """The columnar form of a tremor-script expression used as a value."""
    if isinstance(node, ast.Literal):
        return literal(node.value)
    if isinstance(node, ast.Path):
        return path(node, scope)
    if isinstance(node, ast.Binary) and node.op in ("and", "or"):
        return Logic(node.op, lower_bool(node.left, scope), lower_bool(node.right, scope))
    if isinstance(node, ast.Binary) and node.op in _FLIPPED:
        return comparison(node, scope)
    if isinstance(node, ast.Unary) and node.op == "-" and isinstance(node.operand, ast.Literal):
        value = node.operand.value
        if type(value) in (int, float):
            return literal(-value)  # as the code generator folds it (`values.neg` of a number)
    if isinstance(node, ast.Unary) and node.op in ("not", "!"):
        # `!` on a bool is `not`; the operand is lowered as a bool, so other types fall back.
        return Not(lower_bool(node.operand, scope))
    if isinstance(node, ast.Match):
        return match(node, scope)
    if isinstance(node, ast.RecordLit):
        return record(node, scope)
    raise NotVectorizable(type(node).__name__)


def lower_bool(node: Any, scope: Scope) -> Expr:
    """An expression that must be a bool (`where`, operands of `and`/`or`/`not`).

    A bare field becomes `field == true`: exact on bool rows, and every other
    type is an error per event, so it must fall back there anyway."""
    expr = lower(node, scope)
    if isinstance(expr, Field):
        return Compare("==", expr, Const(True))
    if not is_boolean(expr):
        raise NotVectorizable("not a boolean expression")
    return expr


def literal(value: Any) -> Const:
    if value is None or type(value) in (str, bool):
        return Const(value)
    if type(value) is float and math.isfinite(value):
        return Const(value)
    if type(value) is int and -(2**63) <= value < 2**64:
        return Const(value)
    raise NotVectorizable(f"literal {value!r}")


def path(node: ast.Path, scope: Scope) -> Expr:
    keys = []
    for seg in node.segments:
        if isinstance(seg, ast.KeySeg):
            keys.append(seg.key)
        elif (
            isinstance(seg, ast.IndexSeg)
            and isinstance(seg.index, ast.Literal)
            and type(seg.index.value) is str
        ):
            keys.append(seg.index.value)
        else:
            raise NotVectorizable("index or range segment")
    if node.root == "event":
        if scope.event is None:
            if not keys:
                raise NotVectorizable("the whole input event as a value")
            return Field(tuple(keys))
        return member(scope.event, keys)
    if node.root == "meta" and keys and keys[0] in scope.meta:
        return member(scope.meta[keys[0]], keys[1:])
    raise NotVectorizable(f"path {node.text()}")


def member(value: Expr, keys: list[str]) -> Expr:
    """`keys` looked up in a value built upstream: only literal record fields resolve statically."""
    for key in keys:
        if not isinstance(value, Record):
            raise NotVectorizable("field of a computed value")
        found = dict(value.fields).get(key)
        if found is None:
            raise NotVectorizable(f"missing field {key}")
        value = found
    return value


def comparison(node: ast.Binary, scope: Scope) -> Compare:
    left, right = lower(node.left, scope), lower(node.right, scope)
    op = node.op
    if isinstance(left, Const) and isinstance(right, Field):
        left, right, op = right, left, _FLIPPED[op]
    if not (isinstance(left, Field) and isinstance(right, Const)):
        raise NotVectorizable("comparison other than field against literal")
    return Compare(op, left, comparable(op, right))


def match(node: ast.Match, scope: Scope) -> Match:
    subject = lower(node.target, scope)
    if not isinstance(subject, Field):
        raise NotVectorizable("match on a computed value")
    cases: list[tuple[Const, Expr]] = []
    default: Expr | None = None
    for case in node.cases:
        if case.guard is not None or len(case.body) != 1:
            raise NotVectorizable("match case with a guard or several expressions")
        body = lower(case.body[0], scope)
        if isinstance(case.pattern, ast.AnyPattern):
            default = body
            break  # later cases never run
        pattern = lower(case.pattern.expr, scope) if isinstance(case.pattern, ast.ExprPattern) else None
        if not isinstance(pattern, Const):
            raise NotVectorizable("match pattern other than a literal")
        # A literal case tests `subject == literal`: the rules of a comparison.
        cases.append((comparable("==", pattern), body))
    if len({kind(c.value) for c, _ in cases}) > 1:
        raise NotVectorizable("match on literals of different types")
    return Match(subject, tuple(cases), default)


def comparable(op: str, literal: Const) -> Const:
    """`literal`, if `field <op> literal` vectorizes (see the module docstring)."""
    value = literal.value
    if value is None:
        raise NotVectorizable("comparison with null")
    if type(value) is bool and op in _ORDERING:
        raise NotVectorizable("ordering of bools")
    if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) > EXACT_DOUBLE:
        raise NotVectorizable("number beyond 2^53")
    return literal


def kind(value: Any) -> str:
    """The column type a literal asks of the field it is compared with."""
    if type(value) is bool:
        return "bool"
    if type(value) in (int, float):
        return "number"
    return "string"


def record(node: ast.RecordLit, scope: Scope) -> Record:
    fields: dict[str, Expr] = {}
    shadowed: list[Expr] = []
    for key, value in node.fields:
        if not (isinstance(key, ast.Literal) and type(key.value) is str):
            raise NotVectorizable("computed record key")
        if key.value in fields:
            shadowed.append(fields[key.value])
        fields[key.value] = lower(value, scope)
    return Record(tuple(fields.items()), tuple(shadowed))
