"""The tremor-script standard library: a registry of functions by `module::name`.

Each module of this package registers its functions with `@tremor_fn`; the
compiler resolves calls at compile time (unknown function or wrong arity is a
compile error) and the generated code calls the Python function directly.
`std::string::len` and `string::len` name the same function.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MODULES = (
    "string",
    "array",
    "record",
    "math",
    "type",
    "json",
    "base64",
    "integer",
    "float",
    "re",
    "datetime",
    "system",
    "time",
    "size",
    "range",
    "path",
    "url",
    "origin",
    "chash",
    "binary",
    "win",
    "random",
    "logging",
    "test",
    "constants",
)


@dataclass(frozen=True)
class Function:
    """A library function and how many arguments it takes (`max_args` None = variadic)."""

    name: str
    fn: Callable[..., Any]
    min_args: int
    max_args: int | None

    def arity_text(self) -> str:
        if self.max_args is None:
            return f"at least {self.min_args}"
        if self.min_args == self.max_args:
            return str(self.min_args)
        return f"{self.min_args} to {self.max_args}"


FUNCTIONS: dict[str, Function] = {}

# Library constants by full name without root (`time::nanos::NANOS_PER_SECOND`, `integer::signed::MAX`).
CONSTANTS: dict[str, Any] = {}


def tremor_const(name: str, value: Any) -> None:
    """Register the library constant `name` (readable as `module::NAME` after `use`)."""
    CONSTANTS[name] = value


def tremor_fn(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn` as the library function `name` (arity read from its signature)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        params = list(inspect.signature(fn).parameters.values())
        variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
        fixed = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        required = sum(1 for p in fixed if p.default is p.empty)
        FUNCTIONS[name] = Function(name, fn, required, None if variadic else len(fixed))
        return fn

    return register


_loaded = False


def _load() -> None:
    global _loaded
    if not _loaded:
        for module in MODULES:
            importlib.import_module(f"contraflow.lang.script.stdlib.{module}_")
        _loaded = True


# `use std;` and `use tremor;` bring in the whole library under its root (`std::size::kiB(1)`).
_ROOTS = ("std", "tremor")


def _short(name: str) -> str:
    for root in ("std::", "tremor::"):
        if name.startswith(root):
            return name[len(root) :]
    return name


def lookup(name: str) -> Function | None:
    """The function called `name` (with or without the `std::`/`tremor::` prefix), or None."""
    _load()
    return FUNCTIONS.get(_short(name))


def has_module(path: str) -> bool:
    """Whether `path` (`std::string`, `string`, `tremor::system`) names a library module."""
    _load()
    if path in _ROOTS:
        return True
    prefix = _short(path) + "::"
    return (
        any(name.startswith(prefix) for name in FUNCTIONS)
        or any(name.startswith(prefix) for name in CONSTANTS)
        or _is_aggregate_module(path)
    )


def _is_aggregate_module(path: str) -> bool:
    """`aggr`, `aggr::stats`, `aggr::win`: Tremor's aggregate modules, usable with `use` in selects."""
    from contraflow.lang.script.aggr import AGGREGATES  # the aggregates import this package

    prefix = path + "::"
    return path.startswith("aggr") and any(name.startswith(prefix) for name in AGGREGATES)


def module_constants(path: str) -> dict[str, Any]:
    """The constants of the library module `path` and its submodules, by their names relative to it
    (`MAX` for `std::integer::signed`; `timezones::UTC` for `std::datetime`, as Tremor's modules `use` theirs)."""
    _load()
    prefix = "" if path in _ROOTS else _short(path) + "::"
    return {name[len(prefix) :]: value for name, value in CONSTANTS.items() if name.startswith(prefix)}


def aliased_constants(aliases: dict[str, str]) -> dict[str, Any]:
    """`alias::NAME` for every constant of the library modules brought in as `alias`."""
    return {
        f"{alias}::{name}": value
        for alias, path in aliases.items()
        for name, value in module_constants(path).items()
    }


def all_names() -> list[str]:
    _load()
    return sorted(FUNCTIONS)
