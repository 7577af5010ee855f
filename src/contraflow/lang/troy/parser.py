"""Parsing Troy files into `troy.ast` (Trickle statements and expressions included)."""

from __future__ import annotations

from typing import Any

from lark import Token, v_args
from lark.tree import Meta
from lark.visitors import merge_transformers

from contraflow.lang.errors import SourceText
from contraflow.lang.trickle.parser import (
    TrickleTransformer,
    combined_transformer,
    delegate,
    flatten_statements,
    parse_with,
)
from contraflow.lang.troy import ast

# Rules troy.lark imports from trickle.lark by name (so they are not `trickle__`-prefixed).
TRICKLE_EXPORTS = (
    "define_pipeline",
    "define_window",
    "define_operator",
    "define_script",
    "create_stmt",
    "mod_path",
    "def_args",
    "args_with_end",
    "with_end",
)


class TroyTransformer(TrickleTransformer):
    """Troy statements; everything Trickle is inherited, expressions come from the script transformer."""

    def start(self, children: list[Any]) -> list[Any]:  # Troy statements, not Trickle's
        return flatten_statements(children)

    @v_args(meta=True)
    def define_flow(self, meta: Meta, children: list[Any]) -> ast.DefineFlow:
        name, args, *body = children
        return ast.DefineFlow(self._name(name), args or [], flatten_statements(body), self._pos(meta))

    @v_args(meta=True)
    def define_connector(self, meta: Meta, children: list[Any]) -> ast.DefineConnector:
        return self._kind_definition(ast.DefineConnector, meta, *children)

    @v_args(meta=True)
    def connect_stmt(self, meta: Meta, children: list[Any]) -> ast.ConnectStmt:
        return ast.ConnectStmt(children[0], children[1], self._pos(meta))

    @v_args(meta=True)
    def endpoint(self, meta: Meta, children: list[Any]) -> ast.Endpoint:
        kind, alias, *port = children
        return ast.Endpoint(kind, self._name(alias), self._name(port[0]) if port else None, self._pos(meta))

    def endpoint_kind(self, children: list[Token]) -> str:
        return str(children[0])

    @v_args(meta=True)
    def deploy_stmt(self, meta: Meta, children: list[Any]) -> ast.DeployStmt:
        alias, target, params = children
        return ast.DeployStmt(self._name(alias), target, params or [], self._pos(meta))


def parse_troy(source: SourceText) -> ast.TroyFile:
    """Parse a Troy file; raises LangError (with caret and hint) on a syntax error."""
    trickle = TrickleTransformer(source)
    combined_transformer(trickle, source)
    troy = TroyTransformer(source)
    merge_transformers(troy, trickle=trickle)
    troy.script = trickle.script
    delegate(
        troy, trickle, ("expr", "exprs", "fn_defn", "const_defn", "path", "IDENT", "STRING", "INT", "FLOAT")
    )
    return ast.TroyFile(parse_with("troy", source, troy), source.name)
