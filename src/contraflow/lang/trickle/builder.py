"""Turning a pipeline body (Trickle statements) into a checked `PipelineGraph`.

The builder walks the statements in three passes, so the order of `create`
and `select` inside a pipeline does not matter, just as in Tremor:
1. declarations (`use`, `const`, `fn`, `define ...`), in order;
2. `create` statements, which make nodes;
3. `select` statements, which make select nodes and the edges around them.
Every problem is recorded in the shared `Diagnostics`, and building goes on,
so a single `contraflow check` shows all mistakes of a file.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contraflow.lang.errors import LangError, Position
from contraflow.lang.graph import (
    Edge,
    GroupBy,
    JoinSpec,
    Node,
    NodeKind,
    NodeSpec,
    OperatorSpec,
    PipelineGraph,
    ScriptSpec,
    SelectSpec,
    SourceExpr,
    WindowSpec,
)
from contraflow.lang.trickle import ast
from contraflow.lang.trickle.binding import BoundArgs, bind_args, evaluate_expr, evaluate_params
from contraflow.lang.trickle.diagnostics import Diagnostics, did_you_mean
from contraflow.lang.trickle.joins import SIDES, pair_expr, side_keys
from contraflow.lang.trickle.kinds import DEFAULT_OUTPUTS, OPERATORS, PYTHON_KINDS, PYTHON_REQUIRED
from contraflow.lang.trickle.scope import Definition, DefKind, ModuleLoader, Scope
from contraflow.lang.trickle.script_api import (
    check_calls,
    check_script,
    const_expr,
    emit_ports,
    is_library_module,
    module_uses,
    qualify_calls,
    time_functions_for,
    uses_state,
)
from contraflow.lang.trickle.windows import check_tilt_frames, window_spec
from contraflow.user_modules import search_path_from_env

_DEFINE_KINDS: dict[type, DefKind] = {
    ast.DefineWindow: "window",
    ast.DefineOperator: "operator",
    ast.DefineScript: "script",
    ast.DefinePipeline: "pipeline",
}


def use_module(diag: Diagnostics, scope: Scope, stmt: ast.UseStmt, loader: ModuleLoader) -> None:
    """`use a::b [as c]`: bind a Troy module, or record a tremor-script function module."""
    try:
        module = loader(stmt.path)
    except LangError as err:  # a cyclic `use`, reported where the cycle closes
        scope.modules[stmt.local_name] = Scope(broken=True)
        diag.error(err.message, err.position, err.hint)
        return
    if module is not None:
        scope.modules[stmt.local_name] = module
    elif is_library_module(tuple(p.value for p in stmt.path.parts)):
        scope.function_modules[stmt.local_name] = stmt.path.text
    else:
        scope.modules[stmt.local_name] = Scope(broken=True)
        diag.error(
            f"unknown module '{stmt.path.text}'",
            stmt.path.pos,
            "modules are looked up as <path>.troy in the file's directory and in $CONTRAFLOW_PATH;"
            " built in: tremor::connectors, tremor::pipelines",
        )


def declare(diag: Diagnostics, scope: Scope, stmt: Any, kind: DefKind) -> bool:
    """Register a `define`; a second definition of the same kind and name is an error."""
    previous = scope.define(kind, stmt.name, stmt)
    if previous is not None:
        diag.error(
            f"duplicate definition of {kind} '{stmt.name.value}'",
            stmt.name.pos,
            f"'{stmt.name.value}' is already defined at {previous.stmt.name.pos}",
        )
        return False
    return True


def add_constant(diag: Diagnostics, scope: Scope, item: ast.ScriptItem, env: dict[str, Any]) -> None:
    """`const NAME = expr;` is evaluated now so `with` values and args can use it; `fn` is recorded."""
    previous = next((i for i in scope.items if i.kind == item.kind and i.name == item.name), None)
    if previous is not None:
        diag.error(
            f"duplicate {item.kind} '{item.name}'",
            item.pos,
            f"'{item.name}' is already defined at {previous.pos}",
        )
        return
    scope.items.append(item)
    if item.kind == "const":
        value_text = item.source.split("=", 1)[-1].strip()
        value_expr = SourceExpr(value_text, const_expr(item.ast), item.pos)
        scope.constants[item.name] = evaluate_expr(diag, value_expr, {**scope.env({}), **env})


@dataclass
class _Pipeline:
    """What one pipeline body being built needs: its graph, scope and evaluation environment."""

    graph: PipelineGraph
    scope: Scope
    args: dict[str, Any]
    selects: int = 0
    window_defs: dict[str, WindowSpec] = field(default_factory=dict)

    def env(self) -> dict[str, Any]:
        return self.scope.env(self.args)


class PipelineBuilder:
    """Builds pipeline graphs; one instance per compilation (it shares the diagnostics)."""

    def __init__(self, diag: Diagnostics, loader: ModuleLoader, used: set[int] | None = None) -> None:
        self.diag = diag
        self.loader = loader
        # ids of the pipeline definitions instantiated so far (the rest get a check build).
        self.used = used if used is not None else set()
        self._building: list[int] = []

    def build_definition(self, found: Definition, args: dict[str, Any]) -> PipelineGraph:
        """Instantiate a `define pipeline` with bound `args`."""
        defn: ast.DefinePipeline = found.stmt
        self.used.add(id(defn))
        if id(defn) in self._building:
            self.diag.error(
                f"pipeline '{defn.name.value}' contains itself",
                defn.name.pos,
                "a pipeline cannot `create pipeline` its own definition, directly or not",
            )
            return PipelineGraph(defn.name.value)
        self._building.append(id(defn))
        try:
            return self.build(defn.name.value, defn.inputs, defn.outputs, defn.body, found.scope, args)
        finally:
            self._building.pop()

    def check_unused(self, scope: Scope) -> None:
        """Build, to check them, the pipelines defined in `scope` that nothing instantiated.

        Only pipelines whose `args` all have defaults can be built without a `create`.
        """
        for found in list(scope.definitions.get("pipeline", {}).values()):
            defn: ast.DefinePipeline = found.stmt
            if id(defn) in self.used or any(a.default is None for a in defn.args):
                continue
            env = found.scope.env({})
            args = bind_args(self.diag, f"pipeline '{defn.name.value}'", defn.args, [], env, defn.name)
            self.build_definition(found, args)

    # --- entry point ---------------------------------------------------------------------------

    def build(
        self,
        name: str,
        inputs: Sequence[ast.Name] | None,
        outputs: Sequence[ast.Name] | None,
        body: Sequence[ast.Statement],
        scope: Scope,
        args: dict[str, Any],
    ) -> PipelineGraph:
        graph = PipelineGraph(
            name,
            inputs=[n.value for n in inputs] if inputs else ["in"],
            outputs=_with_err([n.value for n in outputs]) if outputs else ["out", "err"],
            args=args,
        )
        ctx = _Pipeline(graph, scope.child(), args)
        self._ports(ctx, inputs, outputs)
        for stmt in body:
            self._declare(ctx, stmt)
        graph.constants = ctx.scope.all_constants()
        select_exprs = [
            e.ast
            for s in body
            if isinstance(s, ast.SelectStmt | ast.JoinStmt)
            for e in (s.target, s.where, s.having)
            if e is not None
        ]
        graph.functions = visible_functions(ctx.scope, select_exprs)
        for stmt in body:
            if isinstance(stmt, ast.CreateStmt):
                self._create(ctx, stmt)
        for stmt in body:
            if isinstance(stmt, ast.SelectStmt):
                self._select(ctx, stmt)
            elif isinstance(stmt, ast.JoinStmt):
                self._join(ctx, stmt)
        self._check_acyclic(graph)
        self.check_unused(ctx.scope)
        return graph

    def _check_acyclic(self, graph: PipelineGraph) -> None:
        """Events must not flow in a circle: the executor runs nodes in topological order."""
        cycle = graph.find_cycle()
        if cycle:
            node = graph.nodes[cycle[1]]
            self.diag.error(
                f"pipeline '{graph.name}' has a cycle: {' -> '.join(cycle)}",
                node.position or _nowhere(),
                "events may not flow back into a node they came from",
            )

    def _ports(
        self, ctx: _Pipeline, inputs: Sequence[ast.Name] | None, outputs: Sequence[ast.Name] | None
    ) -> None:
        for port in ctx.graph.inputs:
            ctx.graph.nodes[port] = Node(port, "input", inputs=[], outputs=["out"])
        for name in outputs or []:
            if name.value in ctx.graph.nodes:
                self.diag.error(
                    f"duplicate port '{name.value}'", name.pos, "a port is either an input or an output"
                )
        for port in ctx.graph.outputs:
            ctx.graph.nodes.setdefault(port, Node(port, "output", inputs=["in"], outputs=[]))

    # --- pass 1: declarations ------------------------------------------------------------------

    def _declare(self, ctx: _Pipeline, stmt: ast.Statement) -> None:
        if isinstance(stmt, ast.UseStmt):
            use_module(self.diag, ctx.scope, stmt, self.loader)
        elif isinstance(stmt, ast.ScriptItem):
            add_constant(self.diag, ctx.scope, stmt, {"args": ctx.args})
        elif type(stmt) in _DEFINE_KINDS and declare(self.diag, ctx.scope, stmt, _DEFINE_KINDS[type(stmt)]):
            self._validate_definition(ctx, stmt)

    def _validate_definition(self, ctx: _Pipeline, stmt: Any) -> None:
        spec = self.validate_definition(stmt, ctx.scope, ctx.env())
        if spec is not None:
            ctx.window_defs[spec.name] = spec
            ctx.graph.windows[spec.name] = spec

    def validate_definition(self, stmt: Any, scope: Scope, env: dict[str, Any]) -> WindowSpec | None:
        """Check what a definition alone can tell, so unused definitions are checked too.

        Returns the window's spec for `define window`, which selects then reuse.
        """
        if isinstance(stmt, ast.DefineOperator) and stmt.kind.text not in OPERATORS:
            self.diag.unknown("operator", stmt.kind.text, stmt.kind.pos, OPERATORS)
        elif isinstance(stmt, ast.DefineWindow):
            return self.window_spec(stmt, env)
        elif isinstance(stmt, ast.DefineScript):
            self._check_script_definition(stmt, scope)
        return None

    def _check_script_definition(self, stmt: ast.DefineScript, scope: Scope) -> None:
        """Compile every body once; `script from <port>` names each extra input port once."""
        seen = {"in"}
        for port, _ in stmt.port_bodies:
            if port.value in seen:
                self.diag.error(
                    f"script '{stmt.name.value}' already has an input port '{port.value}'",
                    port.pos,
                    "`in` runs the main `script` body; name each other port once",
                )
            seen.add(port.value)
        for source in [stmt.body, *(b for _, b in stmt.port_bodies)]:
            body, consts, fns = self.script_body(scope, source)
            err = check_script(body.ast, stmt.name.value, consts, fns)
            if err is not None:
                self.diag.error(err.message, err.position, err.hint)

    def script_body(
        self, scope: Scope, body: SourceExpr
    ) -> tuple[SourceExpr, dict[str, Any], dict[str, Any]]:
        """A script body ready to compile: library aliases spelled out, its `use`d modules bound.

        Returns the body and the constants and functions it can see (those of
        modules it `use`s itself included, as `alias::name`).
        """
        script, uses = module_uses(qualify_calls(body.ast, _function_modules(scope)))
        consts = scope.all_constants()
        fns = visible_functions(scope, [script])
        for use in uses:
            path = ast.ModPath(tuple(ast.Name(p, use.pos) for p in use.path), use.pos)
            try:
                module = self.loader(path)
            except LangError as err:
                self.diag.error(err.message, err.position, err.hint)
                continue
            if module is None:
                self.diag.error(
                    f"unknown module '{use.text}'",
                    use.pos,
                    "modules are looked up next to the file and in $CONTRAFLOW_PATH",
                )
                continue
            consts.update({f"{use.alias}::{k}": v for k, v in module.constants.items()})
            for item in module.items:
                if item.kind == "fn":
                    fns[f"{use.alias}::{item.name}"] = item.ast
                    fns.setdefault(item.name, item.ast)
        return SourceExpr(body.source, script, body.position), consts, fns

    def window_spec(self, stmt: ast.DefineWindow, env: dict[str, Any]) -> WindowSpec | None:
        return window_spec(self.diag, stmt, env)

    # --- pass 2: nodes -------------------------------------------------------------------------

    def _create(self, ctx: _Pipeline, stmt: ast.CreateStmt) -> None:
        alias = stmt.alias
        if alias.value in ctx.graph.nodes:
            existing = ctx.graph.nodes[alias.value]
            self.diag.error(
                f"duplicate name '{alias.value}'",
                alias.pos,
                f"'{alias.value}' is already the {existing.kind} "
                + ("port" if existing.kind in ("input", "output") else "node")
                + " of this pipeline",
            )
            return
        node: Node | None
        if stmt.kind == "stream":
            node = Node(alias.value, "stream", outputs=["out"], position=alias.pos)
        elif stmt.kind == "connector":
            self.diag.error(
                "connectors are created in a flow, not in a pipeline",
                stmt.pos,
                "move `create connector` into `define flow ... end`",
            )
            return
        else:
            node = self.create_node(ctx, stmt)
        if node is not None:
            ctx.graph.nodes[alias.value] = node

    def _definition(self, ctx: _Pipeline, stmt: ast.CreateStmt, kind: DefKind) -> Definition | None:
        path = stmt.target or ast.ModPath((stmt.alias,), stmt.alias.pos)
        found = ctx.scope.lookup(kind, path)
        if found is None and not ctx.scope.in_broken_module(path):
            self.diag.unknown(f"{kind} definition", path.text, path.pos, ctx.scope.names(kind))
        return found

    def create_node(self, ctx: _Pipeline, stmt: ast.CreateStmt) -> Node | None:
        kind: DefKind = stmt.kind  # type: ignore[assignment]
        found = self._definition(ctx, stmt, kind)
        if found is None:
            return None
        if kind == "operator":
            return self._operator(ctx, stmt, found)
        if kind == "script":
            return self._script(ctx, stmt, found)
        return self._subpipeline(ctx, stmt, found)

    def _created_args(
        self,
        ctx: _Pipeline,
        stmt: ast.CreateStmt,
        what: str,
        defn: ast.DefineOperator | ast.DefineScript | ast.DefinePipeline,
    ) -> BoundArgs:
        """The arguments of a `create` bound to its definition's parameters (errors reported)."""
        return bind_args(
            self.diag, f"{what} '{defn.name.value}'", defn.args, stmt.params, ctx.env(), stmt.alias
        )

    def _operator(self, ctx: _Pipeline, stmt: ast.CreateStmt, found: Definition) -> Node | None:
        defn: ast.DefineOperator = found.stmt
        kind = OPERATORS.get(defn.kind.text)
        if kind is None:
            return None  # reported at the definition
        env = found.scope.env(ctx.args)
        args = self._created_args(ctx, stmt, "operator", defn)
        params = evaluate_params(self.diag, defn.params, {**env, "args": args})
        for key, (assign, _) in params.items():
            name = assign.name
            if key not in kind.params:
                hint = did_you_mean(key, kind.params) if kind.params else f"{kind.name} takes no parameters"
                self.diag.error(f"unknown parameter '{key}' for operator {kind.name}", name.pos, hint)
            elif key in kind.string_params and not isinstance(params[key][1], str):
                self.diag.error(
                    f"`{key}` of operator {kind.name} must be a string, got {params[key][1]!r}",
                    _value_pos(assign),
                )
        misspelt = {hint for key in params if key not in kind.params for hint in _close(key, kind.params)}
        for key in sorted(kind.required - params.keys() - misspelt):  # a typo is reported once
            self.diag.error(
                f"operator {kind.name} requires '{key}'",
                defn.name.pos,
                f"add `with {key} = ... end` to `define operator {defn.name.value}`",
            )
        config = {k: v for k, (_, v) in params.items()}
        outputs = list(kind.outputs)
        if kind.port_param and kind.port_param in config:
            ports = config[kind.port_param]
            if isinstance(ports, list) and ports and all(isinstance(p, str) for p in ports):
                outputs = [*ports, "err"]
            else:
                self.diag.error(
                    f"`{kind.port_param}` of {kind.name} must be a non-empty array of port names",
                    _value_pos(params[kind.port_param][0]),
                    f'e.g. `{kind.port_param} = ["a", "b"]`',
                )
        spec = OperatorSpec(defn.name.value, kind.name, config)
        if kind.name in PYTHON_KINDS:
            spec.search_path = python_search_path(defn.kind.pos.file)
            spec.positions = {key: _value_pos(params[key][0]) for key in PYTHON_REQUIRED if key in params}
        return _created(stmt, "operator", spec, outputs=outputs, stateful=kind.stateful)

    def _script(self, ctx: _Pipeline, stmt: ast.CreateStmt, found: Definition) -> Node:
        defn: ast.DefineScript = found.stmt
        args = self._created_args(ctx, stmt, "script", defn)
        bodies = [defn.body.ast, *(b.ast for _, b in defn.port_bodies)]
        stateful_body = any(uses_state(b) for b in bodies)
        body, consts, fns = self.script_body(found.scope, defn.body)
        ports: dict[str, SourceExpr] = {}
        for port, port_body in defn.port_bodies:
            ports[port.value], port_consts, port_fns = self.script_body(found.scope, port_body)
            consts.update(port_consts)
            fns.update(port_fns)
        spec = ScriptSpec(
            defn.name.value,
            body,
            args,
            defn.state,
            stateful_body,
            constants=consts,
            functions=fns,
            port_bodies=ports,
        )
        outputs = _unique([*DEFAULT_OUTPUTS, *(p for b in bodies for p in emit_ports(b))])
        stateful = defn.state is not None or stateful_body
        return _created(stmt, "script", spec, inputs=["in", *ports], outputs=outputs, stateful=stateful)

    def _subpipeline(self, ctx: _Pipeline, stmt: ast.CreateStmt, found: Definition) -> Node:
        defn: ast.DefinePipeline = found.stmt
        args = self._created_args(ctx, stmt, "pipeline", defn)
        graph = self.build_definition(found, args)
        inputs, outputs = list(graph.inputs), list(graph.outputs)
        return _created(stmt, "pipeline", graph, inputs=inputs, outputs=outputs, stateful=graph.stateful)

    # --- pass 3: selects -----------------------------------------------------------------------

    def _select(self, ctx: _Pipeline, stmt: ast.SelectStmt) -> None:
        stmt = self._qualified_select(ctx.scope, stmt)
        ctx.selects += 1
        name = f"select_{ctx.selects}"
        source = self._endpoint(ctx, stmt.source, reading=True)
        target = self._endpoint(ctx, stmt.into, reading=False)
        windows = self._windows(ctx, stmt.windows)
        aggregates = self._check_expr(
            ctx.scope, stmt.target, allow_aggregates=True, windowed=bool(stmt.windows)
        )
        for clause in (stmt.where, stmt.having):
            if clause is not None:
                self._check_expr(ctx.scope, clause, allow_aggregates=False)
        group = self._group(ctx, stmt.group_by) if stmt.group_by else None
        spec = SelectSpec(stmt.target, stmt.where, stmt.having, group, windows, aggregates)
        ctx.graph.nodes[name] = Node(
            name, "select", outputs=["out"], stateful=bool(windows), spec=spec, position=stmt.pos
        )
        if source is not None:
            ctx.graph.edges.append(Edge(source[0], source[1], name, "in"))
        if target is not None:
            ctx.graph.edges.append(Edge(name, "out", target[0], target[1]))

    def _join(self, ctx: _Pipeline, stmt: ast.JoinStmt) -> None:
        """A windowed stream-stream join: a node with inputs `left` and `right` (see `trickle.joins`)."""
        ctx.selects += 1
        name = f"select_{ctx.selects}"
        sources = [self._endpoint(ctx, side.stream, reading=True) for side in (stmt.left, stmt.right)]
        target = self._endpoint(ctx, stmt.into, reading=False)
        exprs = [stmt.target, stmt.on, stmt.where, stmt.having, stmt.left.time, stmt.right.time]
        for expr in exprs:
            if expr is not None:
                self._check_expr(ctx.scope, expr, allow_aggregates=False)
        within = evaluate_expr(self.diag, stmt.within, ctx.env())
        if within is not None and (isinstance(within, bool) or not isinstance(within, int) or within < 0):
            self.diag.error(
                f"a join's `within` must be a non-negative integer (nanoseconds), got {within!r}",
                stmt.within.position or stmt.pos,
            )
        left_keys, right_keys = side_keys(self.diag, stmt.on)
        spec = JoinSpec(
            pair_expr(stmt.target) or stmt.target,
            left_keys,
            right_keys,
            within if isinstance(within, int) else 0,
            stmt.left.time,
            stmt.right.time,
            pair_expr(stmt.where),
            pair_expr(stmt.having),
            stmt.left_outer,
        )
        ctx.graph.nodes[name] = Node(
            name, "join", inputs=list(SIDES), outputs=["out"], stateful=True, spec=spec, position=stmt.pos
        )
        for source, port in zip(sources, SIDES, strict=True):
            if source is not None:
                ctx.graph.edges.append(Edge(source[0], source[1], name, port))
        if target is not None:
            ctx.graph.edges.append(Edge(name, "out", target[0], target[1]))

    def _endpoint(self, ctx: _Pipeline, ref: ast.StreamRef, reading: bool) -> tuple[str, str] | None:
        """Resolve `node[/port]` of a select; reading from outputs or writing to inputs is an error."""
        nodes = ctx.graph.nodes
        node = nodes.get(ref.node.value)
        wrong = "output" if reading else "input"
        if node is None:
            candidates = [n for n, v in nodes.items() if v.kind != wrong and not n.startswith("select_")]
            self.diag.unknown("stream", ref.node.value, ref.node.pos, candidates)
            return None
        if node.kind == wrong:
            verb, prep = ("select from", "out of") if reading else ("select into", "into")
            self.diag.error(
                f"cannot {verb} {wrong} port '{ref.node.value}'",
                ref.node.pos,
                f"events flow {prep} a pipeline's {'input' if reading else 'output'} ports"
                + (f" ({', '.join(ctx.graph.inputs if reading else ctx.graph.outputs)})"),
            )
            return None
        if not reading and node.kind == "output" and ref.port:
            if ref.port.value in ctx.graph.outputs:
                return ref.port.value, "in"  # Tremor's `into out/exit`: the pipeline's output port `exit`
            # A port the pipeline does not declare: Tremor makes it an output nothing can connect to,
            # so its events are dropped (and acknowledged). The select gets no successor.
            return None
        ports = node.outputs if reading else node.inputs
        port = ref.port.value if ref.port else ("out" if reading else "in")
        if port not in ports:
            where = ref.port.pos if ref.port else ref.node.pos
            self.diag.error(
                f"unknown port '{port}' of {node.kind} '{node.name}'",
                where,
                did_you_mean(port, ports),
            )
            return None
        return node.name, port

    def _windows(self, ctx: _Pipeline, paths: Sequence[ast.ModPath]) -> list[WindowSpec]:
        frames: list[tuple[ast.ModPath, WindowSpec]] = []
        seen: set[str] = set()
        for path in paths:
            if path.text in seen:
                self.diag.error(f"window '{path.text}' listed twice", path.pos)
                continue
            seen.add(path.text)
            spec = ctx.window_defs.get(path.text) or self._window_from_scope(ctx, path)
            if spec is not None:
                frames.append((path, spec))
        check_tilt_frames(self.diag, frames)
        return [spec for _, spec in frames]

    def _window_from_scope(self, ctx: _Pipeline, path: ast.ModPath) -> WindowSpec | None:
        """A window defined outside this pipeline, possibly in a module (`from in[mod::win]`)."""
        found = ctx.scope.lookup("window", path)
        if found is None:
            if not ctx.scope.in_broken_module(path):
                self.diag.unknown("window", path.text, path.pos, ctx.scope.names("window"))
            return None
        spec = self.window_spec(found.stmt, found.scope.env({}))
        if spec is not None:
            spec.name = path.text
            ctx.graph.windows[path.text] = spec
        return spec

    @staticmethod
    def _qualified_select(scope: Scope, stmt: ast.SelectStmt) -> ast.SelectStmt:
        """The select with calls through `use std::x as y;` aliases spelled out in full."""
        aliases = _function_modules(scope)
        if not aliases:
            return stmt
        return dataclasses.replace(
            stmt,
            target=qualified_expr(stmt.target, aliases),
            where=qualified_expr(stmt.where, aliases),
            having=qualified_expr(stmt.having, aliases),
            group_by=_qualified_group(stmt.group_by, aliases),
        )

    def _group(self, ctx: _Pipeline, clause: ast.GroupClause) -> GroupBy:
        if clause.expr is not None:
            self._check_expr(ctx.scope, clause.expr, allow_aggregates=False)
        return GroupBy(clause.mode, clause.expr, [self._group(ctx, c) for c in clause.items])

    def _check_expr(
        self, scope: Scope, expr: SourceExpr, allow_aggregates: bool, windowed: bool = False
    ) -> list[str]:
        """Report unknown functions, wrong arity, and aggregates outside a windowed select target."""
        aggregates: list[str] = []
        fns = [*scope.module_functions(), *(item.name for item in scope.all_items() if item.kind == "fn")]
        for problem in check_calls(expr.ast, _function_modules(scope), fns):
            position = problem.position or expr.position
            if problem.aggregate is not None:
                if not allow_aggregates:
                    self.diag.error(
                        f"aggregate function '{problem.aggregate}' is only allowed in a select's target",
                        position or _nowhere(),
                        "aggregates are computed per window, in `select <target> from in[window]`",
                    )
                elif not windowed:
                    self.diag.error(
                        f"aggregate function '{problem.aggregate}' needs a window",
                        position or _nowhere(),
                        "select from a windowed stream, e.g. `from in[my_window]`",
                    )
                else:
                    aggregates.append(problem.aggregate)
            if problem.message:
                self.diag.error(problem.message, position or _nowhere(), problem.hint)
        return _unique(aggregates)


def visible_functions(scope: Scope, uses: Sequence[Any]) -> dict[str, Any]:
    """`fn` definitions in scope (module ones as `alias::name`), plus the time helpers when `uses` call them."""
    functions = scope.module_functions()
    functions.update({item.name: item.ast for item in scope.all_items() if item.kind == "fn"})
    for node in uses:
        functions.update(time_functions_for(node))
    return functions


def qualified_expr(expr: Any, aliases: dict[str, str]) -> Any:
    """A SourceExpr whose calls through library aliases use the full function names."""
    if expr is None:
        return None
    return SourceExpr(expr.source, qualify_calls(expr.ast, aliases), expr.position)


def _qualified_group(clause: ast.GroupClause | None, aliases: dict[str, str]) -> ast.GroupClause | None:
    if clause is None:
        return None
    return dataclasses.replace(
        clause,
        expr=qualified_expr(clause.expr, aliases),
        items=[g for g in (_qualified_group(c, aliases) for c in clause.items) if g is not None],
    )


def _close(name: str, candidates: frozenset[str]) -> list[str]:
    return difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)


def python_search_path(defined_in: str) -> list[str]:
    """Where a Python operator's module is looked for before `sys.path`: the directory of the file
    defining it (the working directory for source given as text), then $CONTRAFLOW_PATH. Only
    directories are named here; nothing is imported until the flow is deployed."""
    source = Path(defined_in)
    first = source.resolve().parent if source.is_file() else Path.cwd()
    return [str(first), *(str(p.resolve()) for p in search_path_from_env())]


def _value_pos(assign: ast.Assignment) -> Position:
    return assign.value.position or assign.name.pos


def _function_modules(scope: Scope) -> dict[str, str]:
    return scope.function_aliases()


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _nowhere() -> Position:
    return Position("<unknown>", 1, 1)


def _with_err(outputs: list[str]) -> list[str]:
    return outputs if "err" in outputs else [*outputs, "err"]


def _created(stmt: ast.CreateStmt, kind: NodeKind, spec: NodeSpec | PipelineGraph, **ports: Any) -> Node:
    """The node a `create` statement makes, named and placed by its alias."""
    return Node(stmt.alias.value, kind, spec=spec, position=stmt.alias.pos, **ports)
