"""Compiling a Troy file into a checked `Deployment` (one `FlowGraph` per `deploy flow`).

Each flow is instantiated per deploy with its arguments bound, so one
definition deployed twice with different `with` values yields two independent
graphs. Errors from every flow and pipeline are collected and raised together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contraflow.lang.errors import LangError, SourceText
from contraflow.lang.graph import Connection, ConnectorSpec, Deployment, FlowGraph, PipelineGraph
from contraflow.lang.trickle import ast as tast
from contraflow.lang.trickle.binding import bind_args, evaluate_params
from contraflow.lang.trickle.builder import PipelineBuilder, add_constant, declare, use_module
from contraflow.lang.trickle.diagnostics import Diagnostics, did_you_mean
from contraflow.lang.trickle.parser import parse_trickle
from contraflow.lang.trickle.scope import Definition, ModuleLoader, Scope
from contraflow.lang.troy import ast
from contraflow.lang.troy.connectors import ConnectorSettings, check_connector_config
from contraflow.lang.troy.kinds import CONNECTORS, UNAVAILABLE
from contraflow.lang.troy.modules import Modules
from contraflow.lang.troy.parser import parse_troy
from contraflow.user_modules import search_path_from_env

_TOP_DEFINITIONS: dict[type, Any] = {
    ast.DefineFlow: "flow",
    ast.DefineConnector: "connector",
    tast.DefinePipeline: "pipeline",
    tast.DefineWindow: "window",
    tast.DefineOperator: "operator",
    tast.DefineScript: "script",
}


def compile_file(path: Path, search_path: list[Path] | None = None) -> Deployment:
    """Compile the Troy file at `path`; raises LangError/LangErrors listing every problem found."""
    text = path.read_text(encoding="utf-8")
    return TroyCompiler(search_path).compile(SourceText(str(path), text), path.resolve().parent)


def compile_trickle_file(path: Path, search_path: list[Path] | None = None) -> PipelineGraph:
    """Compile a standalone `.trickle` query into its pipeline graph."""
    text = path.read_text(encoding="utf-8")
    return TroyCompiler(search_path).compile_query(SourceText(str(path), text), path.resolve().parent)


def compile_source(text: str, name: str = "<troy>", directory: Path | None = None) -> Deployment:
    """Compile Troy source given as a string (modules resolve relative to `directory`)."""
    return TroyCompiler().compile(SourceText(name, text), directory or Path.cwd())


class TroyCompiler:
    """One compilation: diagnostics, the module cache, and the pipeline builder share its lifetime."""

    def __init__(self, search_path: list[Path] | None = None) -> None:
        self.diag = Diagnostics()
        self.used_pipelines: set[int] = set()
        self.deployed_flows: set[int] = set()
        self.directory: Path | None = None  # the compiled file's, where Python modules are looked up first
        self.modules = Modules(
            search_path if search_path is not None else search_path_from_env(), self._compile_module
        )

    def compile(self, source: SourceText, directory: Path) -> Deployment:
        self.diag.add_source(source)
        self.directory = directory
        parsed = parse_troy(source)
        loader = self.modules.loader_for(directory)
        scope = self._declare_all(parsed.statements, Scope(), loader)
        deployment = Deployment()
        for stmt in parsed.statements:
            if isinstance(stmt, ast.DeployStmt):
                self._deploy(deployment, stmt, scope, loader)
        self._check_unused(scope, loader)
        self.diag.raise_if_any()
        return deployment

    def _check_unused(self, scope: Scope, loader: ModuleLoader) -> None:
        """Check the flows and pipelines of this file that nothing deployed or created.

        A definitions-only file (a module) is then checked as deeply as a deployment;
        errors already found through a deploy are not repeated (Diagnostics dedups).
        """
        for found in list(scope.definitions.get("flow", {}).values()):
            defn: ast.DefineFlow = found.stmt
            if id(defn) in self.deployed_flows or any(a.default is None for a in defn.args):
                continue
            args = bind_args(self.diag, f"flow '{defn.name.value}'", defn.args, [], {"args": {}}, defn.name)
            FlowBuilder(self, found, args, loader).build(defn.name.value)
        self._builder(loader).check_unused(scope)

    def compile_query(self, source: SourceText, directory: Path) -> PipelineGraph:
        """A `.trickle` file: one pipeline, ports `in` -> `out`, `err`, named after the file."""
        self.diag.add_source(source)
        query = parse_trickle(source)
        loader = self.modules.loader_for(directory)
        name = Path(source.name).stem or "query"
        graph = self._builder(loader).build(name, None, None, query.statements, Scope(), {})
        self.diag.raise_if_any()
        return graph

    # --- modules and declarations --------------------------------------------------------------

    def _compile_module(self, source: SourceText, loader: ModuleLoader) -> Scope:
        self.diag.add_source(source)
        try:
            parsed = parse_troy(source)
        except LangError as err:
            self.diag.extend([err])
            return Scope()
        for stmt in parsed.statements:
            if isinstance(stmt, ast.DeployStmt):
                self.diag.error(
                    "a module cannot deploy flows",
                    stmt.pos,
                    "keep `deploy flow` in the file you pass to contraflow",
                )
        return self._declare_all(parsed.statements, Scope(), loader)

    def _declare_all(self, statements: list[Any], scope: Scope, loader: ModuleLoader) -> Scope:
        builder = self._builder(loader)
        for stmt in statements:
            if isinstance(stmt, tast.UseStmt):
                use_module(self.diag, scope, stmt, loader)
            elif isinstance(stmt, tast.ScriptItem):
                add_constant(self.diag, scope, stmt, {"args": {}})
            elif type(stmt) in _TOP_DEFINITIONS and declare(
                self.diag, scope, stmt, _TOP_DEFINITIONS[type(stmt)]
            ):
                self._validate(stmt, scope, builder)
        return scope

    def _validate(self, stmt: Any, scope: Scope, builder: PipelineBuilder) -> None:
        """Checks a definition supports on its own, so unused definitions are checked too."""
        if isinstance(stmt, ast.DefineConnector):
            self.check_connector_definition(stmt)
        else:
            builder.validate_definition(stmt, scope, scope.env({}))

    def check_connector_definition(self, stmt: ast.DefineConnector) -> None:
        kind = stmt.kind.text
        if kind not in CONNECTORS and kind in UNAVAILABLE:
            available = ", ".join(sorted(CONNECTORS))
            self.diag.error(
                f"connector kind '{kind}' is not available in this build ({UNAVAILABLE[kind]})",
                stmt.kind.pos,
                f"the kinds available are: {available}",
            )
        elif kind not in CONNECTORS:
            self.diag.unknown("connector kind", kind, stmt.kind.pos, CONNECTORS)

    def _builder(self, loader: ModuleLoader) -> PipelineBuilder:
        return PipelineBuilder(self.diag, loader, self.used_pipelines)

    # --- deploy --------------------------------------------------------------------------------

    def _deploy(
        self, deployment: Deployment, stmt: ast.DeployStmt, scope: Scope, loader: ModuleLoader
    ) -> None:
        alias = stmt.alias
        if alias.value in deployment.flows:
            self.diag.error(
                f"duplicate deployment '{alias.value}'",
                alias.pos,
                "give each `deploy flow` its own alias: `deploy flow other from main;`",
            )
            return
        path = stmt.target or tast.ModPath((alias,), alias.pos)
        found = scope.lookup("flow", path)
        if found is None:
            if scope.in_broken_module(path):
                return
            self.diag.unknown("flow", path.text, path.pos, scope.names("flow"))
            return
        defn: ast.DefineFlow = found.stmt
        env = scope.env({})
        args = bind_args(self.diag, f"flow '{defn.name.value}'", defn.args, stmt.params, env, alias)
        self.deployed_flows.add(id(defn))
        deployment.flows[alias.value] = FlowBuilder(self, found, args, loader).build(alias.value)


class FlowBuilder:
    """Instantiates one flow definition: creates its connectors and pipelines, checks connections."""

    def __init__(self, compiler: TroyCompiler, found: Definition, args: dict[str, Any], loader: ModuleLoader):
        self.compiler = compiler
        self.diag = compiler.diag
        self.defn: ast.DefineFlow = found.stmt
        self.scope = found.scope.child()
        self.args = args
        self.loader = loader
        self.pipelines = compiler._builder(loader)
        # (kind, alias) of creates that failed (already reported): connects to them stay silent.
        self.failed: set[tuple[str, str]] = set()

    def env(self) -> dict[str, Any]:
        return self.scope.env(self.args)

    def build(self, alias: str) -> FlowGraph:
        flow = FlowGraph(alias, self.defn.name.value, self.args)
        body = self.defn.body
        for stmt in body:
            if isinstance(stmt, tast.UseStmt):
                use_module(self.diag, self.scope, stmt, self.loader)
            elif isinstance(stmt, tast.ScriptItem):
                add_constant(self.diag, self.scope, stmt, {"args": self.args})
            elif isinstance(stmt, ast.DefineConnector):
                if declare(self.diag, self.scope, stmt, "connector"):
                    self.compiler.check_connector_definition(stmt)
            elif isinstance(stmt, tast.DefinePipeline):
                declare(self.diag, self.scope, stmt, "pipeline")
        for stmt in body:
            if isinstance(stmt, tast.CreateStmt):
                self._create(flow, stmt)
        for stmt in body:
            if isinstance(stmt, ast.ConnectStmt):
                connection = self._connect(flow, stmt)
                if connection is not None:
                    flow.connections.append(connection)
        self.pipelines.check_unused(self.scope)
        return flow

    # --- create --------------------------------------------------------------------------------

    def _create(self, flow: FlowGraph, stmt: tast.CreateStmt) -> None:
        if stmt.kind not in ("connector", "pipeline"):
            self.diag.error(
                f"`create {stmt.kind}` belongs in a pipeline, not in a flow",
                stmt.pos,
                "a flow creates connectors and pipelines; define the "
                f"{stmt.kind} inside `define pipeline ... pipeline ... end`",
            )
            return
        # A second create of an alias replaces the first, as Tremor's flow deploy does (its instances
        # are a map by alias, and its compiler does not check for repeats): Tremor's own http
        # integration test creates `exit` twice, from two modules' definitions of the same connector.
        table: dict[str, Any] = flow.connectors if stmt.kind == "connector" else flow.pipelines
        table.pop(stmt.alias.value, None)
        self.failed.discard((stmt.kind, stmt.alias.value))
        path = stmt.target or tast.ModPath((stmt.alias,), stmt.alias.pos)
        found = self.scope.lookup(stmt.kind, path)
        if found is None:
            self.failed.add((stmt.kind, stmt.alias.value))
            if self.scope.in_broken_module(path):
                return
            self.diag.unknown(f"{stmt.kind} definition", path.text, path.pos, self.scope.names(stmt.kind))
            return
        if stmt.kind == "connector":
            spec = self._connector(stmt, found)
            if spec is not None:
                flow.connectors[stmt.alias.value] = spec
            else:
                self.failed.add((stmt.kind, stmt.alias.value))
        else:
            flow.pipelines[stmt.alias.value] = self._pipeline(stmt, found)

    def _pipeline(self, stmt: tast.CreateStmt, found: Definition) -> PipelineGraph:
        defn: tast.DefinePipeline = found.stmt
        args = bind_args(
            self.diag, f"pipeline '{defn.name.value}'", defn.args, stmt.params, self.env(), stmt.alias
        )
        return self.pipelines.build_definition(found, args)

    def _connector(self, stmt: tast.CreateStmt, found: Definition) -> ConnectorSpec | None:
        defn: ast.DefineConnector = found.stmt
        args = bind_args(
            self.diag, f"connector '{defn.name.value}'", defn.args, stmt.params, self.env(), stmt.alias
        )
        params = evaluate_params(self.diag, defn.params, found.scope.env(args))
        # An unknown kind was reported at the definition; keep the connector so that
        # its settings are still checked and connects to it do not cascade into errors.
        directory = str(self.compiler.directory) if self.compiler.directory else None
        spec = ConnectorSpec(stmt.alias.value, defn.name.value, defn.kind.text, directory=directory)
        settings = ConnectorSettings(self.diag)
        for key, (assign, value) in params.items():
            settings.apply(spec, key, assign, value)
        if defn.kind.text in CONNECTORS:
            config, value = params.get("config", (None, None))
            if config is None or isinstance(value, dict):  # a bad or failed `config` is reported already
                check_connector_config(self.diag, spec, config, defn.name.pos)
        return spec

    # --- connect -------------------------------------------------------------------------------

    def _connect(self, flow: FlowGraph, stmt: ast.ConnectStmt) -> Connection | None:
        source, target = stmt.source, stmt.target
        if source.kind == "connector" and target.kind == "connector":
            self.diag.error(
                "cannot connect a connector directly to a connector",
                stmt.pos,
                "put a pipeline in between, e.g. `tremor::pipelines::passthrough`",
            )
            return None
        from_port = self._port(flow, source, outgoing=True)
        to_port = self._port(flow, target, outgoing=False)
        if from_port is None or to_port is None:
            return None
        return Connection(
            source.kind, source.alias.value, from_port, target.kind, target.alias.value, to_port
        )

    def _port(self, flow: FlowGraph, end: ast.Endpoint, outgoing: bool) -> str | None:
        """The endpoint's port (defaulting to out/in), checked against the connector or pipeline."""
        table: dict[str, Any] = flow.connectors if end.kind == "connector" else flow.pipelines
        alias = end.alias.value
        if alias not in table:
            if (end.kind, alias) in self.failed:
                return None  # its create was reported
            other: dict[str, Any] = flow.pipelines if end.kind == "connector" else flow.connectors
            hint = (
                f"'{alias}' is a {'pipeline' if end.kind == 'connector' else 'connector'}: "
                f"write /{'pipeline' if end.kind == 'connector' else 'connector'}/{alias}"
                if alias in other
                else did_you_mean(alias, table)
            )
            self.diag.error(f"unknown {end.kind} '{alias}'", end.alias.pos, hint)
            return None
        port = end.port.value if end.port else ("out" if outgoing else "in")
        ports = self._ports(table[alias], outgoing)
        if port not in ports:
            direction = "send from" if outgoing else "receive on"
            hint = did_you_mean(port, ports) if ports else f"{end.kind} '{alias}' has no port to {direction}"
            self.diag.error(
                f"unknown port '{port}' of {end.kind} '{alias}' ({direction})",
                end.port.pos if end.port else end.alias.pos,
                hint,
            )
            return None
        return port

    @staticmethod
    def _ports(target: ConnectorSpec | PipelineGraph, outgoing: bool) -> tuple[str, ...]:
        if isinstance(target, PipelineGraph):
            return tuple(target.outputs if outgoing else target.inputs)
        kind = CONNECTORS.get(target.kind)
        if kind is None:
            return ("out", "err") if outgoing else ("in",)
        return kind.outputs if outgoing else kind.inputs
