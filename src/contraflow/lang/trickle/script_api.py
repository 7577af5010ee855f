"""The one place Troy and Trickle touch the tremor-script engine (AST, parser, functions).

Keeping this boundary narrow means the statement languages only need a few
things from expressions: parse them (via the merged transformer), evaluate
constant expressions such as `with` values, walk them for function calls and
emitted ports, and know which aggregate functions exist.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from lark import Transformer

from contraflow.lang.errors import Position, SourceText
from contraflow.lang.script import ast as sast
from contraflow.lang.script.parser import ScriptTransformer
from contraflow.lang.script.parser import describe_token as describe_token
from contraflow.lang.trickle.diagnostics import did_you_mean


def script_transformer(source: SourceText) -> Transformer:
    return ScriptTransformer(source)


def item_name(node: Any) -> str:
    """The name a `const`/`fn` definition introduces."""
    return str(node.name)


def const_expr(node: Any) -> Any:
    """The value expression of a `const` definition."""
    return node.value


# --- walking --------------------------------------------------------------------------------


def walk(node: Any) -> Iterator[Any]:
    """Every script AST node under `node` (itself included), depth first."""
    if isinstance(node, tuple | list):
        for item in node:
            yield from walk(item)
        return
    if not isinstance(node, sast.Node):
        return
    yield node
    for f in dataclasses.fields(node):
        if f.name != "pos":
            yield from walk(getattr(node, f.name))


def uses_state(node: Any) -> bool:
    """True when the script reads or writes `state` (so it needs a state store)."""
    return any(isinstance(n, sast.Path) and n.root == "state" for n in walk(node))


def emit_ports(node: Any) -> list[str]:
    """Ports a script emits to by a literal name (`emit => "alerts"`)."""
    ports: list[str] = []
    for n in walk(node):
        if isinstance(n, sast.Emit) and isinstance(n.port, sast.Literal) and isinstance(n.port.value, str):
            ports.append(n.port.value)
    return ports


# --- function calls -------------------------------------------------------------------------


@dataclass
class CallProblem:
    """A function call worth reporting: an aggregate (`aggregate` set) and/or an error `message`."""

    position: Position | None
    aggregate: str | None = None
    message: str = ""
    hint: str = ""


# Aggregate functions and their (min, max) argument counts, as Tremor defines them.
AGGREGATES: dict[str, tuple[int, int]] = {
    "aggr::stats::count": (0, 1),
    "aggr::stats::sum": (1, 1),
    "aggr::stats::min": (1, 1),
    "aggr::stats::max": (1, 1),
    "aggr::stats::mean": (1, 1),
    "aggr::stats::var": (1, 1),
    "aggr::stats::stdev": (1, 1),
    "aggr::stats::hdr": (1, 2),
    "aggr::win::first": (1, 1),
    "aggr::win::last": (1, 1),
    "aggr::win::collect_flattened": (1, 1),
    "aggr::win::collect_nested": (1, 1),
}


def check_calls(node: Any, function_modules: dict[str, str]) -> Iterator[CallProblem]:
    """Aggregate calls (with arity checked) and unknown `aggr::` functions in `node`."""
    for n in walk(node):
        if not isinstance(n, sast.Call):
            continue
        name = _qualified(n.name, function_modules)
        if name in AGGREGATES:
            lo, hi = AGGREGATES[name]
            message = ""
            if not lo <= len(n.args) <= hi:
                want = str(lo) if lo == hi else f"{lo} to {hi}"
                message = f"wrong number of arguments for '{name}': expected {want}, got {len(n.args)}"
            yield CallProblem(n.pos, name, message)
        elif name.startswith("aggr::"):
            yield CallProblem(
                n.pos, None, f"unknown aggregate function '{name}'", did_you_mean(name, AGGREGATES)
            )


def _qualified(name: str, function_modules: dict[str, str]) -> str:
    """`stats::count` after `use aggr::stats;` is `aggr::stats::count`."""
    head, _, rest = name.partition("::")
    if rest and head in function_modules:
        return f"{function_modules[head]}::{rest}"
    return name


# --- constant evaluation --------------------------------------------------------------------

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "%": operator.mod,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "and": lambda a, b: a and b,
    "or": lambda a, b: a or b,
}


def evaluate(node: Any, env: dict[str, Any]) -> Any:
    """The value of a constant expression: literals, records, arrays, `args`, constants, arithmetic."""
    if isinstance(node, sast.Literal):
        return node.value
    if isinstance(node, sast.RecordLit):
        return {str(evaluate(k, env)): evaluate(v, env) for k, v in node.fields}
    if isinstance(node, sast.ArrayLit):
        return [evaluate(item, env) for item in node.items]
    if isinstance(node, sast.Interpolated):
        return "".join(p if isinstance(p, str) else _text(evaluate(p, env)) for p in node.parts)
    if isinstance(node, sast.Path):
        return _path_value(node, env)
    if isinstance(node, sast.Unary) and node.op in ("-", "+", "not"):
        unary: dict[str, Callable[[Any], Any]] = {"-": operator.neg, "+": operator.pos, "not": operator.not_}
        return unary[node.op](evaluate(node.operand, env))
    if isinstance(node, sast.Binary) and (node.op in _BINARY or node.op == "/"):
        left, right = evaluate(node.left, env), evaluate(node.right, env)
        if node.op == "/":
            return left / right
        return _BINARY[node.op](left, right)
    raise ValueError("only literals, records, arrays, `args`, constants and arithmetic are allowed here")


def _path_value(node: sast.Path, env: dict[str, Any]) -> Any:
    if node.root == "args":
        value = env.get("args", {})
    elif node.root == "local" and node.name in env:
        value = env[node.name]
    else:
        raise ValueError(f"'{node.text()}' is not known when the flow is compiled")
    for seg in node.segments:
        if isinstance(seg, sast.KeySeg):
            if not isinstance(value, dict) or seg.key not in value:
                raise ValueError(f"'{node.text()}' has no field '{seg.key}'")
            value = value[seg.key]
        elif isinstance(seg, sast.IndexSeg):
            value = value[evaluate(seg.index, env)]
        else:
            raise ValueError("ranges are not allowed here")
    return value


def _text(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value)
