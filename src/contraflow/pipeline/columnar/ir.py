"""The columnar expression tree: what a vectorizable tremor-script expression becomes.

Every node evaluates, over a whole batch, to a column of values plus a column
saying on which rows that value is *exact*: computed as the per-event code
would compute it, without an error. Rows where any expression a row reaches
is not exact run through the per-event executor instead (see
`contraflow.pipeline.columnar.plan`), so a node only has to be right where it
claims to be, never everywhere.

Nodes are frozen dataclasses: equal expressions are equal keys, so a batch
evaluates each distinct expression once however many routes share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JsonScalar = str | int | float | bool | None


class NotVectorizable(Exception):
    """The construct has no columnar form here: the node (or graph) runs on the per-event executor."""


@dataclass(frozen=True)
class Field:
    """`event.a.b`: a field of the input event, read from the parsed batch."""

    path: tuple[str, ...]


@dataclass(frozen=True)
class Const:
    """A literal (string, number, bool or null).

    `kind` keeps literals of different types apart: `0`, `0.0` and `false` are equal in Python
    (and would share a cache entry) but are three different values here."""

    value: JsonScalar
    kind: str = field(default="", compare=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", type(self.value).__name__)


@dataclass(frozen=True)
class Compare:
    """`field <op> literal` (the literal on the right; `op` is one of == != < <= > >=)."""

    op: str
    field: Field
    literal: Const


@dataclass(frozen=True)
class Logic:
    """`left and right` / `left or right`, with the right side evaluated only when needed."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Not:
    operand: Expr


@dataclass(frozen=True)
class Match:
    """`match subject of case <literal> => body ... [default => body] end` (first match wins)."""

    subject: Field
    cases: tuple[tuple[Const, Expr], ...]
    default: Expr | None


@dataclass(frozen=True)
class Record:
    """`{"key": expr, ...}` with literal keys, in the order the value's dict would have them.

    `shadowed` are the values of repeated keys that a later one replaced: still evaluated (and
    able to fail) per event, so they must be exact too."""

    fields: tuple[tuple[str, Expr], ...]
    shadowed: tuple[Expr, ...] = ()


Expr = Field | Const | Compare | Logic | Not | Match | Record

# Expressions whose value is a bool on every row where it is exact.
BOOLEAN = (Compare, Logic, Not)


def is_boolean(expr: Any) -> bool:
    """Whether `expr` always yields a bool (what `where`, `and`, `or`, `not` require)."""
    return isinstance(expr, BOOLEAN) or (isinstance(expr, Const) and type(expr.value) is bool)
