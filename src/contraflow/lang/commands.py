"""`contraflow check FILE...`: compile Troy/Trickle files and print what they deploy, or the errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from contraflow.errors import UserError
from contraflow.lang.graph import (
    ConnectorSpec,
    Deployment,
    FlowGraph,
    JoinSpec,
    Node,
    OperatorSpec,
    PipelineGraph,
    ScriptSpec,
    SelectSpec,
)

TRICKLE_SUFFIXES = (".trickle",)


def compile_path(path: Path) -> Deployment | PipelineGraph:
    """A Troy file compiles to a Deployment, a `.trickle` file to one PipelineGraph."""
    from contraflow.lang.troy.compiler import compile_file, compile_trickle_file

    if not path.is_file():
        raise UserError(f"{path}: no such file")
    if path.suffix in TRICKLE_SUFFIXES:
        return compile_trickle_file(path)
    return compile_file(path)


def summarize(result: Deployment | PipelineGraph) -> str:
    """The human-readable outline `contraflow check` prints (stable: tests compare it)."""
    if isinstance(result, PipelineGraph):
        return "\n".join(_pipeline_lines(result.name, result, ""))
    if not result.flows:
        return "no flows deployed (definitions only)"
    return "\n\n".join("\n".join(_flow_lines(flow)) for flow in result.flows.values())


def _flow_lines(flow: FlowGraph) -> list[str]:
    lines = [f"flow {flow.name}" + (f" (from {flow.definition})" if flow.definition != flow.name else "")]
    if flow.args:
        lines.append(f"  args: {_values(flow.args)}")
    lines.append("  connectors:")
    lines += [f"    {_connector(c)}" for c in flow.connectors.values()] or ["    (none)"]
    lines.append("  pipelines:")
    for alias, pipeline in flow.pipelines.items():
        lines += _pipeline_lines(alias, pipeline, "    ")
    if not flow.pipelines:
        lines.append("    (none)")
    lines.append("  connections:")
    lines += [f"    {c}" for c in flow.connections] or ["    (none)"]
    return lines


def _connector(spec: ConnectorSpec) -> str:
    parts = [f"{spec.alias}: {spec.kind}"]
    if spec.definition != spec.alias:
        parts.append(f"(from {spec.definition})")
    if spec.codec:
        parts.append(f"codec={spec.codec.name}")
    if spec.preprocessors:
        parts.append("pre=" + ",".join(p.name for p in spec.preprocessors))
    if spec.postprocessors:
        parts.append("post=" + ",".join(p.name for p in spec.postprocessors))
    if spec.config:
        parts.append(f"config={_json(spec.config)}")
    if spec.reconnect:
        parts.append(f"reconnect={_json(spec.reconnect)}")
    if spec.metrics_interval_s is not None:
        parts.append(f"metrics_interval_s={spec.metrics_interval_s:g}")
    return " ".join(parts)


def _pipeline_lines(alias: str, graph: PipelineGraph, indent: str, prefix: str = "") -> list[str]:
    state = "stateful" if graph.stateful else "stateless"
    head = f"{indent}{prefix}{alias}" + (f" (from {graph.name})" if graph.name != alias else "")
    lines = [f"{head}: {state}, {', '.join(graph.inputs)} -> {', '.join(graph.outputs)}"]
    if graph.args:
        lines.append(f"{indent}  args: {_values(graph.args)}")
    for node in graph.nodes.values():
        if node.kind in ("input", "output"):
            continue
        if isinstance(node.spec, PipelineGraph):
            lines += _pipeline_lines(node.name, node.spec, indent + "  ", prefix="pipeline ")
        else:
            lines.append(f"{indent}  {_node(node, graph)}")
    lines += [f"{indent}  edge {edge}" for edge in graph.edges]
    return lines


def _node(node: Node, graph: PipelineGraph) -> str:
    text = f"{node.kind} {node.name}"
    if node.kind in ("select", "join"):
        sources = [f"{e.from_node}/{e.from_port}" for e in graph.predecessors(node.name)]
        targets = [f"{e.to_node}/{e.to_port}" for e in graph.successors(node.name)]
        text += f" {','.join(sources) or '?'} -> {','.join(targets) or '?'}"
    if node.stateful:
        text += " [stateful]"
    spec = node.spec
    if isinstance(spec, SelectSpec):
        if spec.windows:
            text += " windows=" + ",".join(_window(w) for w in spec.windows)
        if spec.group_by:
            text += f" group_by={spec.group_by.mode}"
        if spec.aggregates:
            text += " aggregates=" + ",".join(spec.aggregates)
        if spec.where:
            text += f" where {_one_line(spec.where.source)}"
        if spec.having:
            text += f" having {_one_line(spec.having.source)}"
    elif isinstance(spec, JoinSpec):
        text += (
            f"{' left' if spec.left_outer else ''} within={spec.within_ns}ns on {len(spec.left_keys)} key(s)"
        )
    elif isinstance(spec, OperatorSpec):
        text += f" {spec.kind}" + (f" {_json(spec.config)}" if spec.config else "")
    elif isinstance(spec, ScriptSpec):
        if spec.definition != node.name:
            text += f" (from {spec.definition})"
        if spec.args:
            text += f" args: {_values(spec.args)}"
    if node.kind in ("script", "operator"):
        text += f" ports {','.join(node.inputs)} -> {','.join(node.outputs)}"
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _window(window: Any) -> str:
    measure = f"size={window.size}" if window.size is not None else f"interval={window.interval_ns}ns"
    if window.kind == "sliding":
        unit = "" if window.size is not None else "ns"
        measure = f"sliding {measure} slide={window.slide}{unit}"
    if window.kind == "session":
        measure = f"session gap={window.gap_ns}ns"
        if window.max_duration_ns is not None:
            measure += f" max_duration={window.max_duration_ns}ns"
    if window.lateness_ns is not None:
        measure += f" lateness={window.lateness_ns}ns"
    return f"{window.name}({measure})"


def _values(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {_json(v)}" for k, v in values.items())


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=False, separators=(", ", ": "))


@click.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the flow graph as JSON instead of a summary.")
def check(files: tuple[Path, ...], as_json: bool) -> None:
    """Validate Troy (.troy) and Trickle (.trickle) FILES and print what they deploy.

    Exits 1 and prints every error found (file:line:column, the source line, a
    caret and a hint) when a file does not compile.
    """
    failures: list[str] = []
    for path in files:
        try:
            result = compile_path(path)
        except UserError as err:
            failures.append(str(err))
            continue
        if as_json:
            click.echo(json.dumps(result.to_dict(), indent=2))
        else:
            if len(files) > 1:
                click.echo(f"== {path}")
            click.echo(summarize(result))
    if failures:
        raise UserError("\n\n".join(failures), exit_code=1)
