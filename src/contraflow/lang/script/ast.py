"""The tremor-script syntax tree.

Plain frozen dataclasses, one per construct, each carrying the `pos` of the
source text it came from so the checker, the compiler and runtime errors can
point at it. The compiler and the reference interpreter both consume this tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contraflow.lang.errors import Position, SourceText


@dataclass(frozen=True)
class Node:
    """Base of every syntax node."""

    pos: Position


# ---------------------------------------------------------------- expressions


class Expr(Node):
    """Base of every expression node (the dataclass decorator is on the subclasses)."""


@dataclass(frozen=True)
class Literal(Expr):
    """A constant value: int, float, str, bool or None."""

    value: Any


@dataclass(frozen=True)
class Interpolated(Expr):
    """A string with `#{}` interpolations: literal `str` parts and expression parts."""

    parts: tuple[str | Expr, ...]


@dataclass(frozen=True)
class RecordLit(Expr):
    fields: tuple[tuple[Expr, Expr], ...]


@dataclass(frozen=True)
class ArrayLit(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class KeySeg(Node):
    """`.name` in a path."""

    key: str


@dataclass(frozen=True)
class IndexSeg(Node):
    """`[expr]` in a path: a string key or an integer index."""

    index: Expr


@dataclass(frozen=True)
class RangeSeg(Node):
    """`[start:end]` in a path: an array slice."""

    start: Expr
    end: Expr


Segment = KeySeg | IndexSeg | RangeSeg

#: Roots a path can start from; `local` paths name a variable or a constant.
PATH_ROOTS = ("event", "meta", "state", "args", "group", "window", "local")


@dataclass(frozen=True)
class Path(Expr):
    """`event.a[0]`, `$key.x`, `state`, `args.name`, `x.y`: a root and segments.

    `$key.x` is the `meta` root with segments `key`, `x`; `name` is set only for
    local roots (a variable, a constant or a function parameter).
    """

    root: str
    name: str | None
    segments: tuple[Segment, ...]

    def text(self) -> str:
        """The path as the user would write it (for error messages)."""
        head = {"meta": "$", "local": self.name or ""}.get(self.root, self.root)
        out = [head]
        for seg in self.segments:
            if isinstance(seg, KeySeg):
                out.append(seg.key if out == ["$"] else f".{seg.key}")
            else:
                out.append("[...]")
        return "".join(out)


@dataclass(frozen=True)
class BinarySegment(Node):
    """One segment of a binary literal: a value, its size (bits for integers, bytes for
    binaries) and its type words (`binary`, `integer`, `signed`, `unsigned`, `big`, `little`)."""

    value: Expr
    size: int | None
    types: tuple[str, ...]


@dataclass(frozen=True)
class BinaryLit(Expr):
    """`<< 1, 2:16/little, "abc"/binary >>`: a binary (bytes) value."""

    segments: tuple[BinarySegment, ...]


@dataclass(frozen=True)
class ExprPath(Expr):
    """Segments applied to a computed value: `string::split(x, ",")[0]`, `(event.a).b`."""

    target: Expr
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class Unary(Expr):
    op: str  # "-", "+", "not", "!"
    operand: Expr


@dataclass(frozen=True)
class Binary(Expr):
    op: str  # "or", "xor", "and", "|", "^", "&", "==", "!=", ">=", ">", "<=", "<", ">>", ">>>", "<<", "+", "-", "*", "/", "%"
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Present(Expr):
    """`present path` (or `absent path` when `absent` is true)."""

    path: Path
    absent: bool


@dataclass(frozen=True)
class Call(Expr):
    """`string::len(x)`, `f(x)`, `recur(x)`: `name` is the `::`-joined function name."""

    name: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Let(Expr):
    target: Path
    value: Expr


@dataclass(frozen=True)
class Emit(Expr):
    """`emit [value] [=> port]`; a missing value emits `event`."""

    value: Expr | None
    port: Expr | None


@dataclass(frozen=True)
class Drop(Expr):
    pass


# ---------------------------------------------------------------- patterns


class Pattern(Node):
    """Base of match patterns."""


@dataclass(frozen=True)
class AnyPattern(Pattern):
    """`_` and `default`."""


@dataclass(frozen=True)
class ExprPattern(Pattern):
    """A value the subject must equal."""

    expr: Expr


@dataclass(frozen=True)
class ExtractorPattern(Pattern):
    """`~ kind|text|`: matches when the extractor accepts the value."""

    kind: str
    text: str


@dataclass(frozen=True)
class FieldPred(Node):
    """One test in a record pattern.

    `op` is "present", "absent", a comparison ("==", "!=", "<", "<=", ">", ">="),
    "~" (with an ExtractorPattern) or "~=" (with a nested record/array/tuple pattern).
    """

    key: str
    op: str
    value: Expr | Pattern | None


@dataclass(frozen=True)
class RecordPattern(Pattern):
    fields: tuple[FieldPred, ...]


@dataclass(frozen=True)
class ArrayPattern(Pattern):
    """`%[p, ...]`: an array in which every element pattern matches some element."""

    elems: tuple[Pattern, ...]


@dataclass(frozen=True)
class TuplePattern(Pattern):
    """`%(p1, p2[, ...])`: an array matched position by position; `open` allows extra elements."""

    elems: tuple[Pattern, ...]
    open: bool


@dataclass(frozen=True)
class BinaryPattern(Pattern):
    """`<< a:8, 2:16, rest/binary >>`: a binary cut into segments; bare names bind, other values must equal.

    `_` as a segment value matches anything; a `/binary` segment without a size
    takes the rest and must come last.
    """

    segments: tuple[BinarySegment, ...]

    def binding(self, segment: BinarySegment) -> str | None:
        """The local a segment binds (`a`), None for `_` or a value to compare."""
        value = segment.value
        if isinstance(value, Path) and value.root == "local" and not value.segments and value.name:
            return None if value.name == "_" else value.name
        return None

    def compares(self, segment: BinarySegment) -> bool:
        value = segment.value
        return not (isinstance(value, Path) and value.root == "local" and not value.segments)


@dataclass(frozen=True)
class BindPattern(Pattern):
    """`name = pattern`: binds the matched value (with extractions applied) to a local."""

    name: str
    pattern: Pattern


@dataclass(frozen=True)
class Case(Node):
    pattern: Pattern
    guard: Expr | None
    body: tuple[Expr, ...]


@dataclass(frozen=True)
class Match(Expr):
    target: Expr
    cases: tuple[Case, ...]


@dataclass(frozen=True)
class ForCase(Node):
    key: str
    value: str
    guard: Expr | None
    body: tuple[Expr, ...]


@dataclass(frozen=True)
class For(Expr):
    """`for target of case ... [into initial [use op]] end`: without `into`, the result is an array.

    `fold` is the operator (`+` by default) that combines the accumulated value with each
    case's result: `+` appends to an array or merges into a record, and folds numbers.
    """

    target: Expr
    cases: tuple[ForCase, ...]
    initial: Expr | None = None
    fold: str | None = None


@dataclass(frozen=True)
class PatchOp(Node):
    """One patch operation: insert/upsert/update/erase/merge/default/copy/move; key None = whole record."""

    op: str
    key: Expr | None
    value: Expr | None


@dataclass(frozen=True)
class Patch(Expr):
    target: Expr
    ops: tuple[PatchOp, ...]


@dataclass(frozen=True)
class Merge(Expr):
    target: Expr
    value: Expr


# ---------------------------------------------------------------- definitions


@dataclass(frozen=True)
class FnDefn(Node):
    """`fn name(params) with body end` or `fn name(params) of case (...) => ... end`.

    For `of` functions `cases` holds TuplePattern cases over the arguments and
    `body` is empty.
    """

    name: str
    params: tuple[str, ...]
    body: tuple[Expr, ...]
    cases: tuple[Case, ...] | None
    varargs: bool = False  # `fn f(a, ...)`: extra arguments are the array `args`


@dataclass(frozen=True)
class ConstDefn(Node):
    name: str
    value: Expr


@dataclass(frozen=True)
class Use(Node):
    """`use std::string as s;`: the module `path` is reachable as `alias::...`."""

    path: tuple[str, ...]
    alias: str

    @property
    def text(self) -> str:
        return "::".join(self.path)


@dataclass(frozen=True)
class Script(Node):
    """A script body: expressions run in order, with the functions and constants it defines.

    `result_const` names the constant whose value is the script's result when the
    script ends with a `const` definition (a module of constants yields its last one).
    """

    exprs: tuple[Expr, ...]
    fns: tuple[FnDefn, ...]
    consts: tuple[ConstDefn, ...]
    source: SourceText | None = field(default=None, compare=False, repr=False)
    uses: tuple[Use, ...] = ()
    result_const: str | None = None
