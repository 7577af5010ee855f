"""Windowed stream-stream joins (beyond Tremor): checking a join select and shaping its expressions.

In the source, `left` and `right` name the two joined events. The `on` clause must be
equalities (joined with `and`) each comparing something of `left` with something of
`right`: they become one key expression per side, which reads that side's event as
`event`, so the executor can index each side by key. The target, `where` and `having`
read the pair: there `left`/`right` become `event.left`/`event.right`.
"""

from __future__ import annotations

import dataclasses

from contraflow.lang.graph import SourceExpr
from contraflow.lang.script import ast as sast
from contraflow.lang.script.codegen import walk
from contraflow.lang.script.rewrite import map_tree
from contraflow.lang.trickle.diagnostics import Diagnostics

SIDES = ("left", "right")


def pair_expr(expr: SourceExpr | None) -> SourceExpr | None:
    """`expr` reading the joined pair: `left.x` becomes `event.left.x`."""
    if expr is None:
        return None

    def nest(node: sast.Node) -> sast.Node:
        if isinstance(node, sast.Path) and node.root == "local" and node.name in SIDES:
            segment = sast.KeySeg(node.pos, node.name)
            return dataclasses.replace(node, root="event", name=None, segments=(segment, *node.segments))
        return node

    return dataclasses.replace(expr, ast=map_tree(expr.ast, nest))


def side_keys(diag: Diagnostics, on: SourceExpr) -> tuple[list[SourceExpr], list[SourceExpr]]:
    """The key expressions of each side, from `on` (`left.a == right.b and ...`); errors reported."""
    left: list[SourceExpr] = []
    right: list[SourceExpr] = []
    for equality in _conjuncts(on.ast):
        sides = _sides(equality)
        if sides is None:
            diag.error(
                "a join's `on` must compare `left` with `right` with `==` (several joined with `and`)",
                equality.pos,
                "e.g. `on left.id == right.order_id and left.region == right.region`",
            )
            continue
        for keys, expr in zip((left, right), sides, strict=True):
            keys.append(SourceExpr(on.source, _as_event(expr), on.position))
    return left, right


def _conjuncts(expr: sast.Expr) -> list[sast.Expr]:
    if isinstance(expr, sast.Binary) and expr.op == "and":
        return [*_conjuncts(expr.left), *_conjuncts(expr.right)]
    return [expr]


def _sides(expr: sast.Expr) -> tuple[sast.Expr, sast.Expr] | None:
    """(left's side, right's side) of `a == b` when one reads only `left` and the other only `right`."""
    if not isinstance(expr, sast.Binary) or expr.op != "==":
        return None
    reads = (_reads(expr.left), _reads(expr.right))
    if reads == ({"left"}, {"right"}):
        return expr.left, expr.right
    if reads == ({"right"}, {"left"}):
        return expr.right, expr.left
    return None


def _reads(expr: sast.Expr) -> set[str]:
    """Which joined events an expression reads (`event` counts as neither: it is ambiguous)."""
    found = set()
    for node in walk(expr):
        if isinstance(node, sast.Path):
            found.add(node.name if node.root == "local" and node.name in SIDES else "other")
    return found


def _as_event(expr: sast.Expr) -> sast.Expr:
    """`left.id` as `event.id`: a key expression reads one side's event."""

    def rename(node: sast.Node) -> sast.Node:
        if isinstance(node, sast.Path) and node.root == "local" and node.name in SIDES:
            return dataclasses.replace(node, root="event", name=None)
        return node

    result = map_tree(expr, rename)
    assert isinstance(result, sast.Expr)
    return result
