"""The one place Troy and Trickle touch the tremor-script engine (parser, compiler, aggregates).

Keeping this boundary narrow means the statement languages only need four things
from expressions: parse them (via the merged transformer), evaluate constant
expressions such as `with` values, walk them for function calls, and know which
aggregate functions exist.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lark import Transformer

from contraflow.lang.errors import Position, SourceText
from contraflow.lang.script.parser import ScriptTransformer
from contraflow.lang.trickle.diagnostics import did_you_mean


def script_transformer(source: SourceText) -> Transformer:
    return ScriptTransformer(source)


def item_name(ast: Any) -> str:
    return str(ast[1])


def evaluate(ast: Any, env: dict[str, Any]) -> Any:
    """Evaluate a constant expression (no event) with `args` and constants in scope."""
    kind = ast[0]
    if kind == "lit":
        return ast[1]
    if kind == "record":
        return {k: evaluate(v, env) for k, v in ast[1]}
    if kind == "array":
        return [evaluate(v, env) for v in ast[1]]
    if kind == "add":
        return evaluate(ast[1], env) + evaluate(ast[2], env)
    if kind == "path":
        value = env[ast[1][0]]
        for p in ast[1][1:]:
            value = value[p]
        return value
    raise ValueError(f"not a constant expression: {kind}")


@dataclass
class CallProblem:
    """A function call worth reporting: an aggregate (`aggregate` set) and/or an error `message`."""

    position: Position | None
    aggregate: str | None = None
    message: str = ""
    hint: str = ""


def check_calls(ast: Any, function_modules: dict[str, str]) -> Iterator[CallProblem]:
    for name, nargs, (line, col) in _calls(ast):
        pos = None
        if name in AGGREGATES:
            lo, hi = AGGREGATES[name]
            msg = "" if lo <= nargs <= hi else f"wrong number of arguments for '{name}': expected {lo}, got {nargs}"
            yield CallProblem(pos, name, msg)
        elif name.startswith("aggr::"):
            yield CallProblem(pos, None, f"unknown aggregate function '{name}'", did_you_mean(name, AGGREGATES))


def _calls(ast: Any) -> Iterator[tuple[str, int, tuple[int, int]]]:
    if isinstance(ast, tuple):
        if ast and ast[0] == "call":
            yield ast[1], len(ast[2]), ast[3]
        for child in ast[1:]:
            yield from _calls(child)
    elif isinstance(ast, list):
        for child in ast:
            yield from _calls(child)


def emit_ports(ast: Any) -> list[str]:
    return []


def const_expr(node: Any) -> Any:
    return node[2]


def uses_state(ast: Any) -> bool:
    if isinstance(ast, tuple):
        if ast and ast[0] == "path" and ast[1][0] == "state":
            return True
        return any(uses_state(c) for c in ast[1:])
    if isinstance(ast, list):
        return any(uses_state(c) for c in ast)
    return False


AGGREGATES: dict[str, tuple[int, int]] = {
    "aggr::stats::count": (0, 1),
    "aggr::stats::sum": (1, 1),
    "aggr::win::last": (1, 1),
}

