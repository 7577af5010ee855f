"""Collecting semantic errors so one check reports every mistake in a file, not just the first."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from contraflow.lang.errors import LangError, LangErrors, Position, SourceText


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A hint naming the closest candidate (difflib), or listing the choices when none is close."""
    choices = sorted(set(candidates))
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    if not choices:
        return ""
    shown = ", ".join(choices[:12]) + (", ..." if len(choices) > 12 else "")
    return f"expected one of: {shown}"


class Diagnostics:
    """An error sink shared by the checkers of one compilation; `raise_if_any` ends the pass."""

    def __init__(self, sources: dict[str, SourceText] | None = None) -> None:
        self.errors: list[LangError] = []
        self._sources = sources if sources is not None else {}

    def add_source(self, source: SourceText) -> None:
        self._sources[source.name] = source

    def error(self, message: str, position: Position, hint: str = "") -> None:
        """Record an error; the same error at the same place (a flow deployed twice) is kept once."""
        if any(e.message == message and e.position == position for e in self.errors):
            return
        self.errors.append(LangError(message, position, self._sources.get(position.file), hint))

    def unknown(self, what: str, name: str, position: Position, candidates: Iterable[str]) -> None:
        """The common 'unknown X' error with a did-you-mean hint."""
        self.error(f"unknown {what} '{name}'", position, did_you_mean(name, candidates))

    def extend(self, errors: Iterable[LangError]) -> None:
        self.errors.extend(errors)

    def raise_if_any(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise LangErrors(sorted(self.errors, key=_order))


def _order(err: LangError) -> tuple[str, int, int]:
    pos = err.position
    return (pos.file, pos.line, pos.column)
