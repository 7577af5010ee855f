"""A lark parse failure as a LangError: where, what was met, and a hint in words.

tremor-script, Trickle and Troy share this shape (a stray character, the end of
the input, an unexpected token, a missing `;` blamed on the line that lacks it);
each language brings its own wording and hint (`Wording`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lark import Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from contraflow.lang.errors import LangError, SourceText
from contraflow.lang.semicolons import missing_semicolon


@dataclass(frozen=True)
class Wording:
    """How a language words its syntax errors."""

    prefix: str  # before every message ("syntax error: " in Trickle and Troy)
    end_of: str  # what ended too soon: "input", "script", ...
    token: Callable[[Token], str]  # the unexpected token in words
    accepts_first: bool = False  # read the expected terminals from lark's `accepts` before `expected`


def expected_terminals(err: UnexpectedInput, accepts_first: bool = False) -> set[str]:
    """The terminal names the parser would have taken where it stopped."""
    names = ("accepts", "expected") if accepts_first else ("expected", "accepts")
    return set(getattr(err, names[0], None) or getattr(err, names[1], None) or ())


def syntax_error(
    err: UnexpectedInput,
    source: SourceText,
    wording: Wording,
    hint: str,
    *,
    line_offset: int = 0,
    col_offset: int = 0,
    parsed_text: str | None = None,
) -> LangError:
    """`err` as a LangError in `source`; `parsed_text` starts at the offsets when it is a part of it."""
    line = max(1, err.line or 1) + line_offset
    column = max(1, err.column or 1) + (col_offset if err.line == 1 else 0)
    if isinstance(err, UnexpectedCharacters):
        bad = source.line(line)[column - 1 : column] or "?"
        return LangError(
            f"{wording.prefix}unexpected character {bad!r}",
            source.position(line, column),
            source,
            hint="check for a stray character or an unclosed string",
        )
    if isinstance(err, UnexpectedEOF) or (isinstance(err, UnexpectedToken) and err.token.type == "$END"):
        text = (source.text if parsed_text is None else parsed_text).rstrip()
        inner_line = text.count("\n") + 1
        last_col = len(text) - (text.rfind("\n") + 1) + 1 + (col_offset if inner_line == 1 else 0)
        return LangError(
            f"{wording.prefix}unexpected end of {wording.end_of}",
            source.position(inner_line + line_offset, last_col),
            source,
            hint=hint,
        )
    assert isinstance(err, UnexpectedToken)
    token = err.token
    if line_offset == 0 and col_offset == 0:
        missing = missing_semicolon(
            source, token.start_pos or 0, line, expected_terminals(err, wording.accepts_first)
        )
        if missing is not None:
            return missing
    return LangError(
        f"{wording.prefix}unexpected {_without_article(wording.token(token))}",
        source.position(line, column, max(1, len(str(token)))),
        source,
        hint=hint,
    )


def _without_article(words: str) -> str:
    """`a name 'x'` reads as `name 'x'` after "unexpected"."""
    for article in ("a ", "an "):
        if words.startswith(article):
            return words[len(article) :]
    return words
