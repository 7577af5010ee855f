"""Binding `args` and evaluating the constant expressions of `with` blocks.

`define X ... args a, b = 1` declares parameters; `create X with a = 2 end`
binds them. Missing and unknown arguments are reported as errors; values are
evaluated once, at compile time, with the enclosing `args` and constants in scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contraflow.lang.graph import SourceExpr
from contraflow.lang.trickle.ast import ArgDecl, Assignment, Name
from contraflow.lang.trickle.diagnostics import Diagnostics, did_you_mean
from contraflow.lang.trickle.script_api import EvaluationError, args_used, evaluate


class BoundArgs(dict[str, Any]):
    """Bound argument values, remembering the declared ones that were missing (already reported)."""

    missing: frozenset[str] = frozenset()


def evaluate_expr(diag: Diagnostics, expr: SourceExpr, env: dict[str, Any]) -> Any:
    """The value of `expr`, or `None` after recording an error when it cannot be computed.

    The error points at the culprit inside the expression (an unknown function,
    a failing call) when the compiler knows it, else at the whole expression.
    """
    missing = getattr(env.get("args"), "missing", ())
    if missing and args_used(expr.ast) & missing:
        return None  # it needs an argument already reported missing
    try:
        return evaluate(expr.ast, env)
    except Exception as err:  # noqa: BLE001 - any failure is the user's expression's fault
        if expr.position is None:
            return None
        where, hint = (err.position, err.hint) if isinstance(err, EvaluationError) else (None, "")
        diag.error(
            f"cannot evaluate '{expr.source}': {err}",
            where or expr.position,
            hint or "values in `args` and `with` are computed when the flow is compiled",
        )
        return None


def bind_args(
    diag: Diagnostics,
    what: str,
    decls: Sequence[ArgDecl],
    overrides: Sequence[Assignment],
    env: dict[str, Any],
    at: Name,
) -> BoundArgs:
    """Values for the declared `decls`: defaults, replaced by `overrides` (evaluated in `env`)."""
    declared = {d.name.value: d for d in decls}
    bound: dict[str, Any] = {}
    for assign in overrides:
        name = assign.name.value
        if name not in declared:
            hint = did_you_mean(name, declared) if declared else f"{what} declares no `args`"
            diag.error(f"unknown argument '{name}' for {what}", assign.name.pos, hint)
            continue
        if name in bound:
            diag.error(f"argument '{name}' given twice", assign.name.pos)
            continue
        bound[name] = evaluate_expr(diag, assign.value, env)
    defaults_env = {**env, "args": {**env.get("args", {}), **bound}}
    for name, decl in declared.items():
        if name in bound:
            continue
        if decl.default is None:
            diag.error(
                f"missing argument '{name}' for {what}",
                at.pos,
                f"add `with {name} = ... end` where it is created",
            )
            continue
        bound[name] = evaluate_expr(diag, decl.default, defaults_env)
    result = BoundArgs({d: bound[d] for d in declared if d in bound})
    result.missing = frozenset(declared) - result.keys()
    return result


def evaluate_params(
    diag: Diagnostics, params: Sequence[Assignment], env: dict[str, Any]
) -> dict[str, tuple[Assignment, Any]]:
    """`with` assignments evaluated in `env`, keyed by name (duplicates reported)."""
    out: dict[str, tuple[Assignment, Any]] = {}
    for assign in params:
        if assign.name.value in out:
            diag.error(f"'{assign.name.value}' is set twice", assign.name.pos)
            continue
        out[assign.name.value] = (assign, evaluate_expr(diag, assign.value, env))
    return out
