"""`use` inside tremor-script: library modules become aliases, script modules bring `fn`s and `const`s.

`use std::string as s;` lets `s::len(x)` call `std::string::len`. `use lib::util;`
(a file `lib/util.tremor` next to the script, or in $CONTRAFLOW_PATH) makes its
functions callable as `util::name(...)` and its constants readable as
`util::NAME`, also with index segments (`util::MAP[event.key]`). Modules are
resolved once, at compile time, so a call costs the same as a local one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contraflow.lang.errors import LangError
from contraflow.lang.script import ast, stdlib

MODULE_SUFFIXES = (".tremor",)

# Tremor's library modules written in tremor-script itself (`cncf::otel::...`), searched last.
LIBRARY_DIR = Path(__file__).parent / "lib"


@dataclass(frozen=True)
class ScriptModule:
    """What a script module exports: evaluated constants and function definitions."""

    consts: Mapping[str, Any]
    fns: Mapping[str, ast.FnDefn]


# Finds and compiles the module a `use` path names, or returns None.
ModuleResolver = Callable[[tuple[str, ...]], ScriptModule | None]


def is_library_module(path: tuple[str, ...]) -> bool:
    """A standard library module: `std::string`, `tremor::system`, or without its root (`string`)."""
    return stdlib.has_module("::".join(path))


@dataclass
class Bindings:
    """What a script's `use`s bring in: call aliases, constants and functions by `alias::name`."""

    aliases: dict[str, str]
    consts: dict[str, Any]
    fns: dict[str, ast.FnDefn]


def bind_uses(uses: tuple[ast.Use, ...], modules: ModuleResolver | None) -> Bindings:
    """Bind each `use`: library modules as call aliases, script modules' consts and fns.

    A module's own functions call each other and read its constants by their
    bare names, so those are bound too (the script's own definitions take precedence).
    """
    out = Bindings({}, {}, {})
    for use in uses:
        if is_library_module(use.path):
            out.aliases[use.alias] = use.text
            out.consts.update(stdlib.aliased_constants({use.alias: use.text}))
            continue
        module = modules(use.path) if modules is not None else None
        if module is None:
            raise LangError(
                f"unknown module `{use.text}`",
                use.pos,
                hint=f"looked for {'/'.join(use.path)}.tremor next to the script and in $CONTRAFLOW_PATH",
            )
        for key, value in module.consts.items():
            out.consts[f"{use.alias}::{key}"] = value
            out.consts[f"{use.text}::{key}"] = value  # also by its full path: `foo::bar::SNOT`
            out.consts.setdefault(key, value)
        for fn_name, defn in module.fns.items():
            out.fns[f"{use.alias}::{fn_name}"] = defn
            out.fns[f"{use.text}::{fn_name}"] = defn
            out.fns.setdefault(fn_name, defn)
    return out


def qualify(name: str, aliases: Mapping[str, str]) -> str:
    """`s::len` after `use std::string as s;` is `std::string::len`."""
    head, sep, rest = name.partition("::")
    if sep and head in aliases:
        return f"{aliases[head]}::{rest}"
    return name


def search_path() -> list[Path]:
    """Directories in $CONTRAFLOW_PATH (separated by ':')."""
    return [Path(p) for p in os.environ.get("CONTRAFLOW_PATH", "").split(os.pathsep) if p]


def file_resolver(directories: list[Path]) -> ModuleResolver:
    """Resolve `use a::b` to `a/b.tremor` in `directories` (in order), compiled once each."""
    cache: dict[Path, ScriptModule] = {}

    def resolve(path: tuple[str, ...]) -> ScriptModule | None:
        relative = Path(*path)
        for base in [*directories, LIBRARY_DIR]:
            for suffix in MODULE_SUFFIXES:
                candidate = (base / relative).with_suffix(suffix)
                if candidate.is_file():
                    key = candidate.resolve()
                    if key not in cache:
                        cache[key] = load_module(candidate, resolve)
                    return cache[key]
        return None

    return resolve


def load_module(file: Path, resolver: ModuleResolver | None = None) -> ScriptModule:
    """Parse a module file and evaluate its constants (its expressions, if any, are ignored)."""
    from contraflow.lang.script.compiler import module_exports
    from contraflow.lang.script.parser import parse_script

    script = parse_script(file.read_text(encoding="utf-8"), str(file))
    return module_exports(script, resolver)
