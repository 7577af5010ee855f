"""The one place Troy and Trickle touch the tremor-script engine (AST, parser, functions).

Keeping this boundary narrow means the statement languages only need a few
things from expressions: parse them (via the merged transformer), evaluate
constant expressions such as `with` values, walk them for function calls and
emitted ports, and know which aggregate functions exist.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from lark import Transformer

from contraflow.lang.errors import LangError, Position, ScriptRuntimeError, SourceText
from contraflow.lang.script import ast as sast
from contraflow.lang.script import stdlib
from contraflow.lang.script.aggr import AGGREGATES, lookup_aggregate
from contraflow.lang.script.compiler import compile_expr, compile_script
from contraflow.lang.script.modules import is_library_module as is_library_module
from contraflow.lang.script.parser import ScriptTransformer, parse_script
from contraflow.lang.script.parser import describe_token as describe_token
from contraflow.lang.script.rewrite import qualify_calls as qualify_calls
from contraflow.lang.trickle.diagnostics import did_you_mean


def script_transformer(source: SourceText) -> Transformer:
    return ScriptTransformer(source)


def item_name(node: Any) -> str:
    """The name a `const`/`fn` definition introduces."""
    return str(node.name)


def const_expr(node: Any) -> Any:
    """The value expression of a `const` definition."""
    return node.value


def module_uses(script: Any) -> tuple[Any, list[sast.Use]]:
    """The script without its `use`s of script modules, and those uses (Troy resolves them).

    `use`s of library modules (`use std::string as s;`) stay: the compiler binds them.
    """
    kept = tuple(u for u in script.uses if is_library_module(u.path))
    modules = [u for u in script.uses if not is_library_module(u.path)]
    return (dataclasses.replace(script, uses=kept) if modules else script), modules


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


# --- Troy's time helpers -------------------------------------------------------------------

# Tremor flows write durations as `nanos::from_seconds(5)` (after `use std::time::nanos;`)
# or `core::datetime::with_seconds(5)` (0.11). They are defined here in tremor-script and
# handed to the compiler as functions, so `with` values and scripts can use them.
_NANOS = """
fn from_nanos(n) with n end;
fn from_micros(n) with n * 1000 end;
fn from_millis(n) with n * 1000000 end;
fn from_seconds(n) with n * 1000000000 end;
fn from_minutes(n) with n * 60000000000 end;
fn from_hours(n) with n * 3600000000000 end;
fn from_days(n) with n * 86400000000000 end;
"""
_NANOS_PREFIXES = ("nanos", "std::time::nanos")
_CORE_DATETIME = {
    "with_nanoseconds": "from_nanos",
    "with_microseconds": "from_micros",
    "with_milliseconds": "from_millis",
    "with_seconds": "from_seconds",
    "with_minutes": "from_minutes",
    "with_hours": "from_hours",
    "with_days": "from_days",
}


_NANOS_NAMES = tuple(re.findall(r"^fn (\w+)", _NANOS, re.MULTILINE))
TIME_FUNCTION_NAMES = frozenset(
    [f"{prefix}::{name}" for prefix in _NANOS_PREFIXES for name in _NANOS_NAMES]
    + [f"core::datetime::{old}" for old in _CORE_DATETIME]
)


def time_functions_for(node: Any) -> dict[str, sast.FnDefn]:
    """The time helpers, only when `node` calls one (parsing them costs a grammar build)."""
    if any(isinstance(n, sast.Call) and n.name in TIME_FUNCTION_NAMES for n in walk(node)):
        return time_functions()
    return {}


@cache
def time_functions() -> dict[str, sast.FnDefn]:
    """`nanos::from_seconds`, `std::time::nanos::from_seconds`, `core::datetime::with_seconds`..."""
    defs = {fn.name: fn for fn in parse_script(_NANOS, "<std::time::nanos>").fns}
    names = {f"{prefix}::{name}": name for prefix in _NANOS_PREFIXES for name in defs}
    names.update({f"core::datetime::{old}": new for old, new in _CORE_DATETIME.items()})
    return {full: dataclasses.replace(defs[short], name=full) for full, short in names.items()}


# --- function calls -------------------------------------------------------------------------


@dataclass
class CallProblem:
    """A function call worth reporting: an aggregate (`aggregate` set) and/or an error `message`."""

    position: Position | None
    aggregate: str | None = None
    message: str = ""
    hint: str = ""


def aggregate_names() -> list[str]:
    return sorted(AGGREGATES)


def check_calls(
    node: Any, function_modules: dict[str, str], fns: Iterable[str] = ()
) -> Iterator[CallProblem]:
    """Every aggregate call in `node`, plus unknown functions and wrong arities (library and `fn`s)."""
    user_fns = {*fns, *TIME_FUNCTION_NAMES}
    for n in walk(node):
        if not isinstance(n, sast.Call):
            continue
        name = _qualified(n.name, function_modules)
        if name in user_fns:
            continue
        if name.startswith("aggr::"):
            yield _aggregate_call(n, name)
            continue
        fn = stdlib.lookup(name)
        if fn is None:
            hint = did_you_mean(name, [*user_fns, *stdlib.all_names(), *AGGREGATES])
            yield CallProblem(n.pos, None, f"unknown function '{name}'", hint)
        elif len(n.args) < fn.min_args or (fn.max_args is not None and len(n.args) > fn.max_args):
            yield CallProblem(
                n.pos,
                None,
                f"wrong number of arguments for '{name}': expected {fn.arity_text()}, got {len(n.args)}",
            )


def _aggregate_call(call: sast.Call, name: str) -> CallProblem:
    cls = lookup_aggregate(name)
    if cls is None:
        return CallProblem(
            call.pos, None, f"unknown aggregate function '{name}'", did_you_mean(name, AGGREGATES)
        )
    lo, hi = cls.min_args, cls.max_args
    message = ""
    if not lo <= len(call.args) <= hi:
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        message = f"wrong number of arguments for '{name}': expected {want}, got {len(call.args)}"
    return CallProblem(call.pos, cls.name, message)


def _qualified(name: str, function_modules: dict[str, str]) -> str:
    """`nanos::from_seconds` after `use std::time::nanos;` is `std::time::nanos::from_seconds`."""
    head, _, rest = name.partition("::")
    if rest and head in function_modules:
        return f"{function_modules[head]}::{rest}"
    return name


def check_script(body: Any, name: str, consts: dict[str, Any], fns: dict[str, Any]) -> LangError | None:
    """Compile a script body once to surface unknown names/functions and arity errors."""
    try:
        compile_script(body, name=name, consts=consts, fns=fns)
    except LangError as err:
        return err
    return None


# --- constant evaluation --------------------------------------------------------------------

_EVENT_ROOTS = frozenset({"event", "meta", "state", "group", "window"})


def library_constants(aliases: dict[str, str]) -> dict[str, Any]:
    """`alias::NAME` for the constants of the library modules brought in by `use` (`signed::MAX`)."""
    return stdlib.aliased_constants(aliases)


# The key of an evaluation environment holding the library aliases in scope (`s` -> `std::string`);
# `::` cannot start a constant's name, so it never shadows one.
ALIASES = "::aliases"


def evaluate(node: Any, env: dict[str, Any]) -> Any:
    """The value of a constant expression (`with` values, `args` defaults, `const`s).

    It may use literals, operators, library functions, `args` and constants,
    but nothing that only exists once events flow (`event`, `$`, `state`...).
    """
    for n in walk(node):
        if isinstance(n, sast.Path) and n.root in _EVENT_ROOTS:
            raise ValueError(f"'{n.text()}' is not known when the flow is compiled")
    consts = {k: v for k, v in env.items() if k != "args" and k != ALIASES}
    node = qualify_calls(node, env.get(ALIASES) or {})
    try:
        compiled = compile_expr(node, name="<with>", consts=consts, fns=time_functions_for(node))
        return compiled.call(None, {}, None, env.get("args", {}))
    except LangError as err:
        raise EvaluationError(err.message, err.position, err.hint) from None
    except ScriptRuntimeError as err:
        raise EvaluationError(err.message, err.position) from None


def args_used(node: Any) -> set[str]:
    """The names `args.<name>` reads in an expression (to tell which missing argument it needs)."""
    return {
        n.segments[0].key
        for n in walk(node)
        if isinstance(n, sast.Path)
        and n.root == "args"
        and n.segments
        and isinstance(n.segments[0], sast.KeySeg)
    }


class EvaluationError(ValueError):
    """A compile-time expression failed; `position` is the culprit inside it, when known."""

    def __init__(self, message: str, position: Position | None = None, hint: str = "") -> None:
        super().__init__(message)
        self.position = position
        self.hint = hint
