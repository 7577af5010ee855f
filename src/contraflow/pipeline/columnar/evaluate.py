"""Columnar expressions evaluated over a parsed batch with pyarrow.compute.

`Evaluator.value(expr)` is the expression's column (bools for conditions) and
`Evaluator.exact(expr)` the rows where it equals what the per-event code
computes without an error (see `contraflow.pipeline.columnar.ir`).
`Evaluator.text(expr)` is its JSON text, byte for byte what orjson writes:
literals are encoded by orjson itself; integers and bools have one spelling;
strings are quoted as they are, and a string orjson would escape (a quote, a
backslash, a control character) is not exact, so its row falls back.
Values outside the exact rows are filled with something harmless (false,
empty text): they are never used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from contraflow.pipeline.columnar.ir import Compare, Const, Expr, Field, Logic, Match, Not, Record
from contraflow.pipeline.columnar.lowering import EXACT_DOUBLE

E = TypeVar("E", bound=Expr)

_COMPARE = {
    "==": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}
# Characters orjson escapes inside a string.
NEEDS_ESCAPE = r'[\x00-\x1f"\\]'
_EMPTY = pa.scalar("", pa.string())


class Evaluator:
    """Evaluates expressions over one parsed batch, each distinct expression once."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.rows = table.num_rows
        self._values: dict[Expr, pa.Array] = {}
        self._exact: dict[Expr, pa.Array] = {}
        self._texts: dict[Expr, pa.Array] = {}
        self._lookups: dict[Match, pa.Array] = {}
        self._true = pa.repeat(pa.scalar(True), self.rows)

    def column(self, field: Field) -> pa.Array:
        array: Any = self.table.column(field.path[0]).chunk(0)
        for key in field.path[1:]:
            array = pc.struct_field(array, key)
        return array

    # --- values ---------------------------------------------------------------------------------

    def value(self, expr: Expr) -> pa.Array:
        """The expression's column (conditions: bools, false where not exact)."""
        return _once(self._values, expr, self._value)

    def _value(self, expr: Expr) -> pa.Array:
        if isinstance(expr, Compare):
            column = self.column(expr.field)
            literal = expr.literal.value
            if isinstance(literal, int | float) and not isinstance(literal, bool):
                # Rounding big ints to doubles keeps their order against a literal within 2^53.
                column, literal = pc.cast(column, pa.float64(), safe=False), float(literal)
            return _COMPARE[expr.op](column, pa.scalar(literal)).fill_null(False)
        if isinstance(expr, Logic):
            both = pc.and_ if expr.op == "and" else pc.or_
            return both(self.value(expr.left), self.value(expr.right))
        if isinstance(expr, Not):
            return pc.invert(self.value(expr.operand))
        if isinstance(expr, Const) and type(expr.value) is bool:
            return pa.repeat(pa.scalar(expr.value), self.rows)
        raise TypeError(f"{type(expr).__name__} has no value column")  # lowering never asks

    # --- exactness ------------------------------------------------------------------------------

    def exact(self, expr: Expr) -> pa.Array:
        """Rows on which the expression is what the per-event code computes, without an error."""
        return _once(self._exact, expr, self._exactness)

    def _exactness(self, expr: Expr) -> pa.Array:
        if isinstance(expr, Const):
            return self._true
        if isinstance(expr, Field):
            column = self.column(expr)
            valid = column.is_valid()
            if column.type == pa.string():
                valid = pc.and_(
                    valid, pc.invert(pc.match_substring_regex(column, NEEDS_ESCAPE).fill_null(True))
                )
            return valid
        if isinstance(expr, Compare):
            column = self.column(expr.field)
            literal = expr.literal.value
            if (
                isinstance(literal, int | float)
                and not isinstance(literal, bool)
                and abs(literal) == EXACT_DOUBLE
            ):
                # 2^53 + 1 rounds to 2^53, so rows that big compare per event against this literal.
                small = pc.less(pc.abs(pc.cast(column, pa.float64(), safe=False)), float(EXACT_DOUBLE))
                return pc.and_(column.is_valid(), small.fill_null(False))
            return column.is_valid()
        if isinstance(expr, Logic):
            left = self.value(expr.left)
            # The right side runs only when the left does not decide: `and` on true, `or` on false.
            runs = left if expr.op == "and" else pc.invert(left)
            right = pc.or_(pc.invert(runs), self.exact(expr.right))
            return pc.and_(self.exact(expr.left), right)
        if isinstance(expr, Not):
            return self.exact(expr.operand)
        if isinstance(expr, Match):
            lookup = self._lookup(expr)
            if lookup is not None:  # every body a literal: exact unless no case matches without default
                matched = lookup.is_valid() if expr.default is None else self._true
                return pc.and_(self.column(expr.subject).is_valid(), matched)
            conditions = [self.value(Compare("==", expr.subject, literal)) for literal, _ in expr.cases]
            bodies = [self.exact(body) for _, body in expr.cases]
            otherwise = self.exact(expr.default) if expr.default is not None else pa.repeat(False, self.rows)
            chosen = _first(conditions, bodies, otherwise)
            return pc.and_(self.column(expr.subject).is_valid(), chosen)
        assert isinstance(expr, Record)
        exact = self._true
        for value in (*(value for _, value in expr.fields), *expr.shadowed):
            exact = pc.and_(exact, self.exact(value))
        return exact

    def _lookup(self, expr: Match) -> pa.Array | None:
        """For a `match` of literals on a string field (`_literal_cases`), each row's case number
        (null: none matches), found in one hash lookup instead of a comparison per case."""
        cases = _literal_cases(expr)
        column = self.column(expr.subject)
        if cases is None or column.type != pa.string():
            return None
        return _once(
            self._lookups, expr, lambda _: pc.index_in(column, value_set=pa.array(list(cases), pa.string()))
        )

    # --- JSON text ------------------------------------------------------------------------------

    def text(self, expr: Expr) -> pa.Array:
        """The expression's value as orjson would encode it (empty where not exact)."""
        return _once(self._texts, expr, self._text)

    def _text(self, expr: Expr) -> pa.Array:
        if isinstance(expr, Const):
            return pa.repeat(pa.scalar(orjson.dumps(expr.value).decode()), self.rows)
        if isinstance(expr, Field):
            column = self.column(expr)
            if column.type == pa.string():
                quoted = pc.binary_join_element_wise('"', column, '"', "")
            elif column.type == pa.bool_():
                quoted = pc.if_else(column, "true", "false")
            else:
                assert column.type == pa.int64(), column.type  # `FieldTypes.schema` allows no other
                quoted = column.cast(pa.string())
            return quoted.fill_null(_EMPTY)
        if isinstance(expr, Match):
            lookup = self._lookup(expr)
            if lookup is not None:
                bodies = _literal_cases(expr)
                assert bodies is not None
                default = orjson.dumps(expr.default.value).decode() if isinstance(expr.default, Const) else ""
                choices = pa.array([*bodies.values(), default], pa.string())
                return choices.take(lookup.fill_null(len(bodies)))
            conditions = [self.value(Compare("==", expr.subject, literal)) for literal, _ in expr.cases]
            texts = [self.text(body) for _, body in expr.cases]
            otherwise = self.text(expr.default) if expr.default is not None else pa.repeat(_EMPTY, self.rows)
            return _first(conditions, texts, otherwise)
        if isinstance(expr, Record):
            parts: list[Any] = []
            for index, (key, value) in enumerate(expr.fields):
                prefix = ("{" if index == 0 else ",") + orjson.dumps(key).decode() + ":"
                parts += [prefix, self.text(value)]
            if not parts:
                return pa.repeat(pa.scalar("{}"), self.rows)
            return pc.binary_join_element_wise(*parts, "}", "")
        return pc.if_else(self.value(expr), "true", "false")


def _once(cache: dict[E, pa.Array], expr: E, make: Callable[[E], pa.Array]) -> pa.Array:
    """`cache[expr]`, made by `make` the first time: each distinct expression is evaluated once per batch."""
    found = cache.get(expr)
    if found is None:
        found = cache[expr] = make(expr)
    return found


def _literal_cases(expr: Match) -> dict[str, str] | None:
    """A `match` of a string field on string literals, every body (and default) a literal: each
    case's string with its body's JSON text (the first case of equal strings wins); else None."""
    bodies: dict[str, str] = {}
    for literal, body in expr.cases:
        if type(literal.value) is not str or not isinstance(body, Const):
            return None
        bodies.setdefault(literal.value, orjson.dumps(body.value).decode())
    return bodies if expr.default is None or isinstance(expr.default, Const) else None


def _first(conditions: list[pa.Array], choices: list[pa.Array], otherwise: pa.Array) -> pa.Array:
    """Per row, the choice of the first true condition, else `otherwise` (a `match`'s case order)."""
    if not conditions:
        return otherwise
    struct = pa.StructArray.from_arrays(conditions, [f"c{i}" for i in range(len(conditions))])
    return pc.case_when(struct, *choices, otherwise)
