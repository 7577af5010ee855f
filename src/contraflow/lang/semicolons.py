"""Reporting a missing `;` at the statement that lacks it, not at the next statement."""

from __future__ import annotations

import re

from contraflow.lang.errors import LangError, SourceText

_TRAILING_COMMENT = re.compile(r'#[^"]*$')


def missing_semicolon(source: SourceText, offset: int, line: int, expected: set[str]) -> LangError | None:
    """When the parser wanted `;` and met a token at the start of a later line, blame the line before.

    `offset` and `line` locate the unexpected token; `expected` holds the terminal
    names the parser would have accepted there.
    """
    if not any(name.rsplit("__", 1)[-1] == "SEMICOLON" for name in expected):
        return None
    before = source.text[:offset].split("\n")
    if len(before) < 2 or before[-1].strip():
        return None  # the unexpected token is not the first thing on its line
    for index in range(len(before) - 2, -1, -1):
        code = _TRAILING_COMMENT.sub("", before[index]).rstrip()
        if code:
            number = index + 1
            return LangError(
                "missing ';' at the end of this statement",
                source.position(number, len(code), 1),
                source,
                hint=f"end the statement with ';' (the next one starts at line {line})",
            )
    return None
