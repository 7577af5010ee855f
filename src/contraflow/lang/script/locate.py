"""Turning an exception raised inside generated code into a tremor position.

The code generator records, for every line it emits, the source node the line
came from. Nothing is paid per event: only when an exception escapes does the
traceback's line number get mapped back, and a failed path read is re-walked
with the checked accessors (on the frame's own locals) to name the exact step
that failed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

from contraflow.lang.errors import Position, ScriptRuntimeError, SourceText
from contraflow.lang.script import ast, values


@dataclass
class LineInfo:
    """The source node one generated line came from (`path` for inlined path reads)."""

    pos: Position
    what: str
    path: ast.Path | None = None


class Locator:
    """Maps generated line numbers back to tremor positions."""

    def __init__(
        self, filename: str, lines: dict[int, LineInfo], node: str, source: SourceText | None = None
    ) -> None:
        self.filename = filename
        self.lines = lines
        self.node = node
        self.source = source

    def error(self, exc: BaseException) -> ScriptRuntimeError:
        outermost = isinstance(exc, RecursionError)
        info, frame = self._line_of(exc.__traceback__, outermost)
        message = None
        if (
            info is not None
            and info.path is not None
            and frame is not None
            and not isinstance(exc, ScriptRuntimeError)
        ):
            message = explain_path(info.path, frame)
        return ScriptRuntimeError(
            message or message_for(exc, info), info.pos if info else None, self.node, self.source
        )

    def _line_of(self, tb: TracebackType | None, outermost: bool) -> tuple[LineInfo | None, FrameType | None]:
        """The mapped line (and its frame) where the exception left generated code."""
        found: tuple[LineInfo | None, FrameType | None] = (None, None)
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename and tb.tb_lineno in self.lines:
                found = (self.lines[tb.tb_lineno], tb.tb_frame)
                if outermost:
                    return found
            tb = tb.tb_next
        return found


def explain_path(path: ast.Path, frame: FrameType) -> str | None:
    """Re-walk an inlined path read with the checked accessors to say exactly which step failed."""
    root = "l_" + (path.name or "") if path.root == "local" else path.root
    if root in frame.f_locals:
        value = frame.f_locals[root]
    elif path.root == "local" and f"_c_{path.name}" in frame.f_globals:
        value = frame.f_globals[f"_c_{path.name}"]
    else:
        return None
    for seg in path.segments:
        if isinstance(seg, ast.KeySeg):
            key: Any = seg.key
        elif (
            isinstance(seg, ast.IndexSeg)
            and isinstance(seg.index, ast.Literal)
            and type(seg.index.value) is str
        ):
            key = seg.index.value
        else:
            return None
        try:
            value = values.get_key(value, key)
        except ScriptRuntimeError as err:
            return err.message
    return None


def message_for(exc: BaseException, info: LineInfo | None) -> str:
    where = f" in `{info.what}`" if info and info.what else ""
    if isinstance(exc, ScriptRuntimeError):
        return exc.message
    if isinstance(exc, KeyError):
        return f"trying to access a non-existing key `{exc.args[0]}`{where}"
    if isinstance(exc, NameError):
        # a local bound only in a branch that did not run: the interpreter's "unknown name"
        name = getattr(exc, "name", None) or next(iter(re.findall(r"'(\w+)'", str(exc))), "?")
        return f"unknown name `{name.removeprefix('l_')}`"
    if isinstance(exc, RecursionError):
        return "maximum recursion depth exceeded"
    if isinstance(exc, (TypeError, IndexError, AttributeError)):
        return f"invalid access{where}: {exc}"
    if isinstance(exc, (OverflowError, ValueError)):
        return f"invalid value{where}: {exc}"
    return f"{type(exc).__name__}{where}: {exc}"
