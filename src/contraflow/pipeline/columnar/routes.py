"""A stateless pipeline graph as the routes an event can take from one input port to an output.

The per-event executor pushes each event depth first: a node hands it to its
successors in edge order, each finishing before the next starts (see
`contraflow.pipeline.wiring`). So the outputs of one event leave in the order
of the routes below, found by walking the graph the same way; a route's
outputs are the rows that pass all its `where` clauses, and sorting a batch's
outputs by (input row, route) gives exactly the executor's emission order.

Along the way `event` and `$` are tracked symbolically (`Scope`): after
`select {...}` the event *is* that record expression, and `let $k = e` binds
`$k` for what follows. `checks` lists every expression a row evaluates on its
way and the `where` clauses it passed to get there: a row on which one of them
is not exact runs on the per-event executor instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contraflow.lang.graph import Node, PipelineGraph, ScriptSpec, SelectSpec
from contraflow.lang.script import ast
from contraflow.pipeline.analysis import is_identity
from contraflow.pipeline.columnar.ir import Expr, NotVectorizable, Record
from contraflow.pipeline.columnar.lowering import Scope, lower, lower_bool

# More routes than this (fan-outs multiplying) is not worth compiling.
MAX_ROUTES = 64


@dataclass(frozen=True)
class Route:
    """Events reaching output `port` when every condition holds; `value` None keeps the input bytes."""

    port: str
    conditions: tuple[Expr, ...]
    value: Expr | None
    meta: Record | None


@dataclass(frozen=True)
class Check:
    """`expr` must be exact on every row for which all `conditions` hold."""

    conditions: tuple[Expr, ...]
    expr: Expr


@dataclass
class Routes:
    routes: list[Route] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)


def trace(graph: PipelineGraph, port: str) -> Routes:
    """The routes from input `port`, in emission order (raises NotVectorizable)."""
    found = Routes()
    _leave(graph, port, "out", (), Scope(), found)
    return found


def _leave(
    graph: PipelineGraph,
    name: str,
    port: str,
    conditions: tuple[Expr, ...],
    scope: Scope,
    found: Routes,
) -> None:
    for edge in graph.successors(name):
        if edge.from_port == port:
            _enter(graph, graph.nodes[edge.to_node], edge.to_port, conditions, scope, found)


def _enter(
    graph: PipelineGraph,
    node: Node,
    port: str,
    conditions: tuple[Expr, ...],
    scope: Scope,
    found: Routes,
) -> None:
    if node.kind == "output":
        if len(found.routes) >= MAX_ROUTES:
            raise NotVectorizable("too many routes")
        meta = Record(tuple(scope.meta.items())) if scope.meta else None
        found.routes.append(Route(node.name, conditions, scope.event, meta))
        return
    if is_identity(node):
        _leave(graph, node.name, "out", conditions, scope, found)
        return
    if isinstance(node.spec, SelectSpec) and port == "in":
        conditions, scope = _select(node.spec, conditions, scope, found)
    elif isinstance(node.spec, ScriptSpec) and port == "in" and not node.stateful:
        scope = _script(node.spec, conditions, scope, found)
    else:
        raise NotVectorizable(f"node {node.name} ({node.kind})")
    _leave(graph, node.name, "out", conditions, scope, found)


def _select(
    spec: SelectSpec, conditions: tuple[Expr, ...], scope: Scope, found: Routes
) -> tuple[tuple[Expr, ...], Scope]:
    """`select <target> from ... [where <cond>]`: no windows, grouping or `having`."""
    if spec.windows or spec.group_by is not None or spec.having is not None:
        raise NotVectorizable("windowed, grouped or `having` select")
    if spec.where is not None:
        where = lower_bool(spec.where.ast, scope)
        found.checks.append(Check(conditions, where))
        conditions = (*conditions, where)
    target = spec.target.ast
    if _is_event(target):
        return conditions, scope
    value = lower(target, scope)
    found.checks.append(Check(conditions, value))
    return conditions, Scope(value, dict(scope.meta))


def _script(spec: ScriptSpec, conditions: tuple[Expr, ...], scope: Scope, found: Routes) -> Scope:
    """`let $key = <expr>; ...` then the event itself (or a value) as the result."""
    body = spec.body.ast
    if spec.state is not None or spec.port_bodies or body.fns or body.consts or not body.exprs:
        raise NotVectorizable("script with state, functions, constants or extra ports")
    meta = dict(scope.meta)
    *lets, result = body.exprs
    for let in lets:
        target = let.target if isinstance(let, ast.Let) else None
        if target is None or target.root != "meta" or len(target.segments) != 1:
            raise NotVectorizable("script expression other than `let $key = ...`")
        key = target.segments[0]
        if not isinstance(key, ast.KeySeg):
            raise NotVectorizable("computed metadata key")
        value = lower(let.value, Scope(scope.event, meta))
        found.checks.append(Check(conditions, value))
        meta[key.key] = value
    if _is_event(result):
        return Scope(scope.event, meta)
    value = lower(result, Scope(scope.event, meta))
    found.checks.append(Check(conditions, value))
    return Scope(value, meta)


def _is_event(node: ast.Expr) -> bool:
    return isinstance(node, ast.Path) and node.root == "event" and not node.segments
