"""Language errors that point at the exact place in the source.

Every syntax or semantic error carries the file, line and column, the source
line with a caret under the offending span, and a hint on how to fix it, so
`contraflow check` output reads like a compiler's.
"""

from __future__ import annotations

from dataclasses import dataclass

from contraflow.errors import UserError


@dataclass(frozen=True)
class Position:
    """A 1-based line/column in a named source; `length` is how many characters to underline."""

    file: str
    line: int
    column: int
    length: int = 1

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class SourceText:
    """The text of one source file, kept to quote lines in error messages."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text
        self._lines = text.splitlines()

    def line(self, number: int) -> str:
        """The 1-based line `number`, or '' past the end (errors at end of input)."""
        return self._lines[number - 1] if 0 < number <= len(self._lines) else ""

    def position(self, line: int, column: int, length: int = 1) -> Position:
        return Position(self.name, line, column, length)


class LangError(UserError):
    """A syntax or semantic error at a source position, rendered with a caret and a hint."""

    exit_code = 1

    def __init__(
        self, message: str, position: Position, source: SourceText | None = None, hint: str = ""
    ) -> None:
        self.message = message
        self.position = position
        self.source = source
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        """`file:line:col: message`, the source line, a caret line, and the hint."""
        return render_at(self.message, self.position, self.source, self.hint)


def render_at(message: str, pos: Position, source: SourceText | None, hint: str = "") -> str:
    """How every language error reads, at compile time or at run time (as Tremor shows them):
    `file:line:col: message`, the source line, a caret under the span, and the hint."""
    out = [f"{pos}: {message}"]
    if source is not None:
        text = source.line(pos.line)
        if text:
            gutter = f"{pos.line:>4} | "
            out.append(gutter + text)
            out.append(" " * (len(gutter) + pos.column - 1) + "^" * max(1, pos.length))
    if hint:
        out.append(f"hint: {hint}")
    return "\n".join(out)


class LangErrors(UserError):
    """Several language errors found in one pass (the checker reports all it can)."""

    exit_code = 1

    def __init__(self, errors: list[LangError]) -> None:
        self.errors = errors
        super().__init__("\n\n".join(e.render() for e in errors))


class ScriptRuntimeError(Exception):
    """An error while running compiled script code for one event.

    Not a UserError: it never stops a pipeline; the runtime turns it into an
    event on the `err` port carrying `node`, `position` and the original event.
    """

    def __init__(
        self,
        message: str,
        position: Position | None = None,
        node: str | None = None,
        source: SourceText | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.position = position
        self.node = node
        self.source = source  # the script's text, to quote the failing line

    def __str__(self) -> str:
        where = f" at {self.position}" if self.position else ""
        node = f" in node '{self.node}'" if self.node else ""
        return f"{self.message}{node}{where}"

    def render(self) -> str:
        """The message with the failing source line and a caret under it, as a compile error reads;
        just the message when the position is unknown."""
        if self.position is None:
            return self.message
        return render_at(self.message, self.position, self.source)
