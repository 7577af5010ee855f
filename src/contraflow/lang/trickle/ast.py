"""Trickle statements as parsed (before any name is resolved).

Expressions inside them are tremor-script ASTs wrapped in `SourceExpr`, so the
checker can quote them and the executor can compile them. Troy reuses the
definition/creation statements here for its own `define pipeline` and `create`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from contraflow.lang.errors import Position
from contraflow.lang.graph import SourceExpr


@dataclass(frozen=True)
class Name:
    """An identifier with its position (for carets under the exact name)."""

    value: str
    pos: Position

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ModPath:
    """A `::` path such as `generic::counter` or `mymod::sub::thing`."""

    parts: tuple[Name, ...]
    pos: Position

    @property
    def text(self) -> str:
        return "::".join(p.value for p in self.parts)

    @property
    def last(self) -> str:
        return self.parts[-1].value

    @property
    def module(self) -> tuple[str, ...]:
        return tuple(p.value for p in self.parts[:-1])


@dataclass
class ArgDecl:
    """`name` or `name = default` in an `args` clause."""

    name: Name
    default: SourceExpr | None


@dataclass
class Assignment:
    """`name = expr` in a `with` block."""

    name: Name
    value: SourceExpr


@dataclass
class UseStmt:
    """`use a::b [as c];`: makes module `a::b` visible as `c` (default: its last segment)."""

    path: ModPath
    alias: Name | None
    pos: Position

    @property
    def local_name(self) -> str:
        return self.alias.value if self.alias else self.path.last


@dataclass
class ScriptItem:
    """A tremor-script top-level item (`const`, `fn`) appearing among Trickle or Troy statements."""

    kind: Literal["const", "fn"]
    name: str
    ast: Any
    source: str
    pos: Position


@dataclass
class StreamRef:
    """`node[/port]` in a select's `from`/`into`."""

    node: Name
    port: Name | None
    pos: Position


@dataclass
class GroupClause:
    mode: Literal["expr", "set", "each"]
    expr: SourceExpr | None = None
    items: list[GroupClause] = field(default_factory=list)


@dataclass
class SelectStmt:
    target: SourceExpr
    source: StreamRef
    windows: list[ModPath]
    where: SourceExpr | None
    group_by: GroupClause | None
    into: StreamRef
    having: SourceExpr | None
    pos: Position


@dataclass
class JoinSide:
    """One stream of a join, and the expression giving its events' time (None: the ingest time)."""

    stream: StreamRef
    time: SourceExpr | None


@dataclass
class JoinStmt:
    """`select <target> from <left> [left] join <right> on <cond> within <ns> [where] into <out> [having]`."""

    target: SourceExpr
    left: JoinSide
    right: JoinSide
    on: SourceExpr
    within: SourceExpr
    where: SourceExpr | None
    into: StreamRef
    having: SourceExpr | None
    pos: Position
    left_outer: bool = False  # `left join`: unmatched left events come out with `right` null


@dataclass
class DefineWindow:
    name: Name
    kind: Name
    args: list[ArgDecl]
    params: list[Assignment]
    script: SourceExpr | None
    pos: Position
    # `state <expr>`: the initial state of a state window (Tremor 0.13).
    state: SourceExpr | None = None


@dataclass
class KindDefinition:
    """`define ... NAME from KIND [args ...] [with ...] end`: what operator and connector definitions share."""

    name: Name
    kind: ModPath
    args: list[ArgDecl]
    params: list[Assignment]
    pos: Position


@dataclass
class DefineOperator(KindDefinition):
    """`define operator NAME from KIND ...`."""


@dataclass
class DefineScript:
    """`define script`; `port_bodies` are the `script from <port>` bodies for extra input ports."""

    name: Name
    args: list[ArgDecl]
    state: SourceExpr | None
    body: SourceExpr
    pos: Position
    port_bodies: list[tuple[Name, SourceExpr]] = field(default_factory=list)


@dataclass
class DefinePipeline:
    """A pipeline definition, in Trickle (nested) or in Troy; `None` ports mean the defaults."""

    name: Name
    inputs: list[Name] | None
    outputs: list[Name] | None
    args: list[ArgDecl]
    body: list[Statement]
    pos: Position


CreateKind = Literal["connector", "pipeline", "operator", "script", "stream"]


@dataclass
class CreateStmt:
    """`create KIND alias [from path] [with ... end]`; `target` None means 'the definition named alias'."""

    kind: CreateKind
    alias: Name
    target: ModPath | None
    params: list[Assignment]
    pos: Position


Statement = (
    SelectStmt
    | JoinStmt
    | DefineWindow
    | DefineOperator
    | DefineScript
    | DefinePipeline
    | CreateStmt
    | UseStmt
    | ScriptItem
)


@dataclass
class Query:
    """A whole `.trickle` file: one pipeline with the default ports in -> out, err."""

    statements: list[Statement]
    file: str
