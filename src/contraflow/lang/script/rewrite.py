"""Rewriting syntax trees before compilation (the trees are frozen: rewriting copies)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from contraflow.lang.script import ast
from contraflow.lang.script.modules import qualify


def map_tree(node: Any, fn: Callable[[ast.Node], ast.Node]) -> Any:
    """`node` with `fn` applied to every sub-node, bottom up (unchanged subtrees are shared)."""
    if isinstance(node, tuple):
        items = tuple(map_tree(item, fn) for item in node)
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    if not isinstance(node, ast.Node):
        return node
    changes = {}
    for f in dataclasses.fields(node):
        if f.name in ("pos", "source"):
            continue
        old = getattr(node, f.name)
        new = map_tree(old, fn)
        if new is not old:
            changes[f.name] = new
    return fn(dataclasses.replace(node, **changes) if changes else node)


def qualify_calls(node: Any, aliases: Mapping[str, str]) -> Any:
    """Calls through a `use ... as alias` of a library module, renamed to the full function name."""
    if not aliases:
        return node

    def rename(n: ast.Node) -> ast.Node:
        if isinstance(n, ast.Call):
            full = qualify(n.name, aliases)
            if full != n.name:
                return dataclasses.replace(n, name=full)
        return n

    return map_tree(node, rename)
