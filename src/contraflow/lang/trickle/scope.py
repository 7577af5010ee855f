"""Lexical scopes: which definitions, constants and modules a statement can see.

Troy files, Trickle files, flows and pipeline bodies each open a scope. A name
is looked up in the innermost scope first, then outwards; a `::` path walks
the modules brought in by `use` (`use lib::flows as f;` then `f::main`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from contraflow.lang.trickle.ast import ModPath, Name, ScriptItem
from contraflow.lang.trickle.script_api import ALIASES, library_constants

DefKind = Literal["flow", "connector", "pipeline", "window", "operator", "script"]

# What `use a::b` resolves to: the module's own scope (or None when the path names no module).
ModuleLoader = Callable[[ModPath], "Scope | None"]


@dataclass
class Definition:
    """A `define` statement together with the scope it was written in (its lexical environment)."""

    stmt: Any
    scope: Scope


@dataclass
class Scope:
    """Definitions by kind, constants (already evaluated), script items and imported modules."""

    parent: Scope | None = None
    definitions: dict[str, dict[str, Definition]] = field(default_factory=dict)
    constants: dict[str, Any] = field(default_factory=dict)
    items: list[ScriptItem] = field(default_factory=list)
    modules: dict[str, Scope] = field(default_factory=dict)
    # Names imported with `use` that are not Troy modules (e.g. `use std::time::nanos;`):
    # they are function modules for tremor-script, recorded so the compiler can resolve them.
    function_modules: dict[str, str] = field(default_factory=dict)
    # A module whose `use` failed (already reported): lookups into it stay silent.
    broken: bool = False

    def child(self) -> Scope:
        return Scope(parent=self)

    def define(self, kind: DefKind, name: Name, stmt: Any) -> Definition | None:
        """Register a definition; returns the earlier one of that kind and name if this is a duplicate."""
        table = self.definitions.setdefault(kind, {})
        previous = table.get(name.value)
        if previous is None:
            table[name.value] = Definition(stmt, self)
        return previous

    def lookup(self, kind: DefKind, path: ModPath) -> Definition | None:
        """The definition `path` names, searching enclosing scopes for its first segment."""
        scope: Scope | None = self
        while scope is not None:
            found = scope._lookup_here(kind, path)
            if found is not None:
                return found
            scope = scope.parent
        return None

    def _lookup_here(self, kind: DefKind, path: ModPath) -> Definition | None:
        target: Scope | None = self
        for part in path.parts[:-1]:
            assert target is not None
            target = target.modules.get(part.value)
            if target is None:
                return None
        assert target is not None
        return target.definitions.get(kind, {}).get(path.last)

    def in_broken_module(self, path: ModPath) -> bool:
        """True when `path` goes through a module that failed to load (avoids cascading errors)."""
        if len(path.parts) < 2:
            return False
        scope: Scope | None = self
        while scope is not None:
            module = scope.modules.get(path.parts[0].value)
            if module is not None:
                return module.broken
            scope = scope.parent
        return False

    def names(self, kind: DefKind) -> list[str]:
        """Every name of `kind` visible from here (for did-you-mean hints), module paths included."""
        out: list[str] = []
        scope: Scope | None = self
        while scope is not None:
            out.extend(scope.definitions.get(kind, {}))
            for alias, module in scope.modules.items():
                out.extend(f"{alias}::{n}" for n in module.definitions.get(kind, {}))
            scope = scope.parent
        return out

    def all_constants(self) -> dict[str, Any]:
        """Constants visible here, inner scopes shadowing outer ones."""
        chain: list[Scope] = []
        scope: Scope | None = self
        while scope is not None:
            chain.append(scope)
            scope = scope.parent
        merged: dict[str, Any] = {}
        for s in reversed(chain):
            for alias, module in s.modules.items():  # `use lib::consts;` then `consts::LIMIT`
                merged.update({f"{alias}::{k}": v for k, v in module.constants.items()})
                for k, v in module.constants.items():  # what the module's own `fn`s read by bare name
                    merged.setdefault(k, v)
            merged.update(library_constants(s.function_modules))  # `use std::integer::signed;`
            merged.update(s.constants)
        return merged

    def function_aliases(self) -> dict[str, str]:
        """Library modules brought in with `use` here and outwards (`s` -> `std::string`), inner first."""
        merged: dict[str, str] = {}
        scope: Scope | None = self
        while scope is not None:
            merged = {**scope.function_modules, **merged}
            scope = scope.parent
        return merged

    def env(self, args: dict[str, Any]) -> dict[str, Any]:
        """What a compile-time expression (`with` value, `args` default, `const`) written here sees:
        the constants, the library aliases (under `ALIASES`, a key no name can spell) and `args`."""
        return {**self.all_constants(), ALIASES: self.function_aliases(), "args": args}

    def module_functions(self) -> dict[str, Any]:
        """`fn`s of the modules in scope, as `alias::name` (and by bare name, for calls inside them)."""
        out: dict[str, Any] = {}
        scope: Scope | None = self
        while scope is not None:
            for alias, module in scope.modules.items():
                for item in module.items:
                    if item.kind == "fn":
                        out.setdefault(f"{alias}::{item.name}", item.ast)
                        out.setdefault(item.name, item.ast)
            scope = scope.parent
        return out

    def all_items(self) -> list[ScriptItem]:
        """`const`/`fn` items visible here, outermost first (prepended when compiling scripts)."""
        chain: list[ScriptItem] = []
        scope: Scope | None = self
        while scope is not None:
            chain[:0] = scope.items
            scope = scope.parent
        return chain
