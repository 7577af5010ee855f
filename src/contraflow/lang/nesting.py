"""A bound on how deeply a parsed program nests, checked before anything recurses over it.

The transformers, the compiler and the interpreter walk the syntax tree
recursively, so a record or array nested a few hundred levels deep would
exhaust Python's stack (a RecursionError, a traceback, a 500 from the API).
The parse tree is measured first, without recursion, and too deep a program is
a language error at the construct that goes too deep.
"""

from __future__ import annotations

from typing import Any

from lark import Transformer, Tree
from lark.exceptions import VisitError

from contraflow.lang.errors import LangError, Position, SourceText

# Levels of the parse tree (a nested record costs two, an array one): about 200
# nested records, well inside what every later stage handles on the default stack.
MAX_TREE_DEPTH = 400


def check_nesting(
    tree: Tree, source: SourceText, *, line_offset: int = 0, col_offset: int = 0, limit: int = MAX_TREE_DEPTH
) -> None:
    """Raise LangError at the first node deeper than `limit` (an iterative walk)."""
    stack: list[tuple[Tree, int, Position | None]] = [(tree, 1, None)]
    while stack:
        node, depth, where = stack.pop()
        meta = node.meta
        if not meta.empty:
            column = meta.column + (col_offset if meta.line == 1 else 0)
            where = source.position(meta.line + line_offset, column)
        if depth > limit:
            raise LangError(
                f"nested too deeply (more than {limit} levels of syntax)",
                where or source.position(1, 1),
                source,
                hint="flatten the nesting of records, arrays or expressions here",
            )
        stack.extend((child, depth + 1, where) for child in node.children if isinstance(child, Tree))


def transform_tree(transformer: Transformer, tree: Tree[Any], source: SourceText) -> Any:
    """`transformer.transform(tree)`, with a transformer's LangError passed through as it is and
    running out of stack reported as `too_deep`: how every language turns its parse tree into an AST."""
    try:
        return transformer.transform(tree)
    except VisitError as err:
        if isinstance(err.orig_exc, LangError):
            raise err.orig_exc from None
        if isinstance(err.orig_exc, RecursionError):
            raise too_deep(source) from None
        raise
    except RecursionError:
        raise too_deep(source) from None


def too_deep(source: SourceText) -> LangError:
    """The error when a later stage still runs out of stack (a last line of defence after the check)."""
    return LangError(
        "the input is nested too deeply to compile",
        source.position(1, 1),
        source,
        hint="split deeply nested `match`/`for`/`patch` expressions with `let` or `fn`",
    )
