"""A limit on how deeply brackets nest in source text, checked before parsing.

Parsing and compiling are recursive, so input nested hundreds of levels deep
would otherwise end in Python's RecursionError. Counting brackets first turns
it into a language error that points at the bracket that went too deep.
"""

from __future__ import annotations

from contraflow.lang.errors import LangError, SourceText

MAX_NESTING = 100
_OPEN = "([{"
_CLOSE = ")]}"


def check_nesting(source: SourceText, limit: int = MAX_NESTING) -> None:
    """Raise LangError at the first bracket nested deeper than `limit` (strings and comments skipped)."""
    text = source.text
    depth, line, column, i = 0, 1, 1, 0
    in_string = False
    while i < len(text):
        ch = text[i]
        if ch == "\n":
            line, column, i = line + 1, 1, i + 1
            continue
        if in_string:
            if ch == "\\":
                i, column = i + 2, column + 2
                continue
            if ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "#":
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        elif ch in _OPEN:
            depth += 1
            if depth > limit:
                raise LangError(
                    f"nested more than {limit} levels deep",
                    source.position(line, column),
                    source,
                    hint="flatten the expression, or build the value in steps with `let`",
                )
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
        i, column = i + 1, column + 1


def too_deep(source: SourceText) -> LangError:
    """The error for input whose nesting (of `match`, `for`... rather than brackets) is too deep to compile."""
    return LangError(
        "the input is nested too deeply to compile",
        source.position(1, 1),
        source,
        hint="split deeply nested `match`/`for`/`patch` expressions with `let` or `fn`",
    )
