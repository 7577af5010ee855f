"""`group by`: turning one event into the group values (`group` in scripts) it belongs to.

Every group value is an array of dimensions, as in Tremor: `group by event.k`
gives `[k]`, `set(a, b)` gives `[a, b]`, and `each(xs)` gives one group per
element (a record gives one per `[key, value]` pair), combined as a cross
product inside `set`. A select's scripts see `group` as Tremor sets it: the
dimensions followed by their sorted JSON text (`[1, "[1]"]`; `[null, "[null]"]`
without `group by`), see `script_group`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from contraflow.lang.graph import GroupBy, PipelineGraph
from contraflow.lang.script.compiler import CompiledExpr, compile_expr

# (event, meta, args) -> every group the event belongs to
GroupFn = Callable[[Any, dict[str, Any], Any], list[list[Any]]]


class GroupError(Exception):
    """`each(...)` over a value that is neither an array nor a record."""


def compile_group(clause: GroupBy, graph: PipelineGraph, name: str) -> tuple[GroupFn, list[CompiledExpr]]:
    """A function computing the groups of an event, plus the compiled expressions (for error locations)."""
    exprs: list[CompiledExpr] = []

    def build(c: GroupBy) -> GroupFn:
        if c.mode == "set":
            parts = [build(item) for item in c.items]

            def set_groups(event: Any, meta: dict[str, Any], args: Any) -> list[list[Any]]:
                acc: list[list[Any]] = [[]]
                for part in parts:
                    acc = [g + dims for g in acc for dims in part(event, meta, args)]
                return acc

            return set_groups
        assert c.expr is not None
        fn = compile_expr(c.expr.ast, name=name, consts=graph.constants, fns=graph.functions)
        exprs.append(fn)
        call = fn.fn
        if c.mode == "each":

            def each_groups(event: Any, meta: dict[str, Any], args: Any) -> list[list[Any]]:
                value = call(event, meta, None, args, None, None)
                if isinstance(value, list):
                    return [[v] for v in value]
                if isinstance(value, dict):
                    return [[[k, v]] for k, v in value.items()]
                raise GroupError(f"`each` needs an array or a record, got {type(value).__name__}")

            return each_groups

        def expr_groups(event: Any, meta: dict[str, Any], args: Any) -> list[list[Any]]:
            return [[call(event, meta, None, args, None, None)]]

        return expr_groups

    return build(clause), exprs


# `group` in the target and `having` of a select without `group by` (Tremor's value).
NO_GROUP: list[Any] = [None, "[null]"]


def script_group(dims: list[Any] | None) -> list[Any]:
    """`group` as a select's target, `having` and window scripts read it: the dimensions, then
    their sorted JSON text (Tremor's group key), e.g. `[1, "[1]"]` for `group by event.n`."""
    if dims is None:
        return NO_GROUP
    return [*dims, orjson.dumps(dims, option=orjson.OPT_SORT_KEYS).decode()]


def group_key(dims: list[Any] | None) -> Any:
    """A dict key for a group value: the string itself for one string dimension, else sorted JSON.

    A select without `group by` has one group, `None` (`group` is null in its target).
    """
    if dims is None:
        return None
    if len(dims) == 1 and type(dims[0]) is str:
        return dims[0]
    return orjson.dumps(dims, option=orjson.OPT_SORT_KEYS)
