"""A bound on how deeply a program nests, and on how long parsing it may take.

The transformers, the compiler and the interpreter walk the syntax tree
recursively, so a record or array nested a few hundred levels deep would
exhaust Python's stack (a RecursionError, a traceback, a 500 from the API).
One limit, `MAX_NESTING` levels, holds for every construct. It is checked
twice: while parsing, on every bracket (records, arrays, parentheses,
patterns), so a program nested thousands deep is refused at its 201st bracket
instead of after a parse of seconds; then on the parse tree, without
recursion, for what nests without brackets (`not not ...`, long operator
chains, `match` inside `match`). Too deep a program is a language error at
the construct that goes too deep.

A caller that serves other work meanwhile (the REST API) sets a time budget
with `parse_budget`: parsing past it is a language error too.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from lark import Lark, Token, Transformer, Tree
from lark.exceptions import UnexpectedInput, VisitError

from contraflow.lang.errors import LangError, Position, SourceText

# Levels of nesting any construct may reach: about what every later stage handles on the
# default stack. A level of a record costs two levels of the parse tree, and the statements
# around an expression a few dozen more, hence the tree bound.
MAX_NESTING = 200
MAX_TREE_DEPTH = 2 * MAX_NESTING + 50

OPENING = frozenset({"(", "[", "{", "%(", "%[", "%{", "#{"})
CLOSING = frozenset({")", "]", "}"})

# When the parse in this context must have finished (time.monotonic()), or None: no budget.
# A context variable, so asyncio.to_thread carries the API request's budget into its thread.
_DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("contraflow_parse_deadline", default=None)

NESTING_HINT = "flatten the nesting of records, arrays, parentheses or expressions here (`let` a part)"


@contextlib.contextmanager
def parse_budget(seconds: float) -> Iterator[None]:
    """Within the block (and threads started from it with its context), parsing may take `seconds`."""
    token = _DEADLINE.set((time.monotonic() + seconds, seconds))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def parse_bounded(
    lark: Lark,
    text: str,
    source: SourceText,
    *,
    start: str | None = None,
    line_offset: int = 0,
    col_offset: int = 0,
) -> Tree:
    """`lark.parse(text)`, stopped with a LangError at the first bracket past `MAX_NESTING` levels
    or the first token past the budget; then the tree's depth is checked (`check_nesting`)."""
    parser = lark.parse_interactive(text, start=start)
    deadline = _DEADLINE.get()
    depth = 0
    token: Token | None = None
    try:
        for token in parser.iter_parse():
            if token.value in OPENING:
                depth += 1
                if depth > MAX_NESTING:
                    raise too_deep_at(_where(token, source, line_offset, col_offset), source)
            elif token.value in CLOSING:
                depth -= 1
            if deadline is not None and time.monotonic() > deadline[0]:
                raise over_budget(_where(token, source, line_offset, col_offset), source, deadline[1])
        tree: Tree = parser.feed_eof(token)
    except UnexpectedInput as err:
        if getattr(err, "interactive_parser", None) is None:
            err.interactive_parser = parser  # what lark's own parse() attaches: the expected terminals
        raise
    check_nesting(tree, source, line_offset=line_offset, col_offset=col_offset)
    return tree


def _where(token: Token, source: SourceText, line_offset: int, col_offset: int) -> Position:
    line = token.line or 1
    column = (token.column or 1) + (col_offset if line == 1 else 0)
    return source.position(line + line_offset, column, len(token.value))


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
            raise too_deep_at(where or source.position(1, 1), source)
        stack.extend((child, depth + 1, where) for child in node.children if isinstance(child, Tree))


def too_deep_at(where: Position, source: SourceText) -> LangError:
    """The one error for every construct nested past the limit."""
    return LangError(f"nested too deeply (more than {MAX_NESTING} levels)", where, source, hint=NESTING_HINT)


def over_budget(where: Position, source: SourceText, seconds: float) -> LangError:
    """Parsing ran past its time budget (the REST API's deploy)."""
    return LangError(
        f"parsing took longer than the {seconds:g} s budget and was stopped here",
        where,
        source,
        hint="deploy a smaller or simpler source, or run it with `contraflow run`",
    )


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
