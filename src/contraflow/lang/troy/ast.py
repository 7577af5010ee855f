"""Troy statements as parsed: flows, connectors, connections and deployments.

Pipelines, `create`, `use` and constants share their AST with Trickle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from contraflow.lang.errors import Position
from contraflow.lang.trickle.ast import (
    ArgDecl,
    Assignment,
    CreateStmt,
    DefineOperator,
    DefinePipeline,
    DefineScript,
    DefineWindow,
    KindDefinition,
    ModPath,
    Name,
    ScriptItem,
    UseStmt,
)


@dataclass
class DefineConnector(KindDefinition):
    """`define connector NAME from KIND [args ...] [with ...] end`."""


@dataclass
class Endpoint:
    """`/connector/alias[/port]` or `/pipeline/alias[/port]`; `port` None means the default."""

    kind: Literal["connector", "pipeline"]
    alias: Name
    port: Name | None
    pos: Position


@dataclass
class ConnectStmt:
    source: Endpoint
    target: Endpoint
    pos: Position


FlowStatement = DefineConnector | DefinePipeline | CreateStmt | ConnectStmt | UseStmt | ScriptItem


@dataclass
class DefineFlow:
    name: Name
    args: list[ArgDecl]
    body: list[FlowStatement]
    pos: Position


@dataclass
class DeployStmt:
    """`deploy flow ALIAS [from path] [with ... end]`; `target` None means 'the flow named ALIAS'."""

    alias: Name
    target: ModPath | None
    params: list[Assignment]
    pos: Position


TopStatement = (
    DefineFlow
    | DefineConnector
    | DefinePipeline
    | DefineWindow
    | DefineOperator
    | DefineScript
    | DeployStmt
    | UseStmt
    | ScriptItem
)


@dataclass
class TroyFile:
    """A parsed Troy file (a deployment, or a module other files `use`)."""

    statements: list[TopStatement]
    file: str
