"""Splitting a stateful pipeline at its first stateful nodes.

The nodes a stateful pipeline runs before any state is touched (parsing,
filters, enrichment scripts) look at one event at a time, so they may run on
every input partition in parallel; only what comes after them needs the one
ordered stream of `transformWithState`. `split_prefix` cuts the graph into
those two parts:

- the *prefix*: the input nodes and every stateless node all of whose
  predecessors are in the prefix. Its outputs are the pipeline's own output
  ports it feeds directly, plus one *cut port* per (node, port) whose events
  continue into the rest;
- the *rest*: every other node, fed through the cut ports (its input ports)
  and writing to the pipeline's outputs. Node names are kept, so the state of
  every stateful node keeps its name (and a checkpoint its layout).

Running the prefix, then the rest on the prefix's cut-port events in the
order the prefix emitted them, is the same computation as the whole graph.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from contraflow.lang.graph import Edge, Node, PipelineGraph
from contraflow.pipeline.analysis import is_identity

CUT_PREFIX = "cut:"


@dataclass(frozen=True)
class GraphSplit:
    """The two halves of a pipeline and the ports that join them."""

    prefix: PipelineGraph
    rest: PipelineGraph
    cut_ports: tuple[str, ...]


def split_prefix(graph: PipelineGraph) -> GraphSplit | None:
    """Cut `graph` after its stateless prefix, or None when the prefix does no work."""
    prefix = _prefix_nodes(graph)
    if all(is_identity(graph.nodes[name]) for name in prefix):
        return None  # nothing to do before the state: splitting would only add a hop
    front = set(prefix) | set(graph.inputs)
    cuts: dict[tuple[str, str], str] = {}
    for edge in graph.edges:
        if edge.from_node in front and edge.to_node not in front and not _is_output(graph, edge.to_node):
            cuts.setdefault(
                (edge.from_node, edge.from_port), f"{CUT_PREFIX}{edge.from_node}/{edge.from_port}"
            )
    if not cuts:
        return None
    return GraphSplit(
        _prefix_graph(graph, front, cuts), _rest_graph(graph, front, cuts), tuple(cuts.values())
    )


def _is_output(graph: PipelineGraph, name: str) -> bool:
    return graph.nodes[name].kind == "output"


def _prefix_nodes(graph: PipelineGraph) -> list[str]:
    """Stateless nodes reached only from inputs and other such nodes, in topological order."""
    inside = set(graph.inputs)
    order = []
    for name in graph.topological_order():
        node = graph.nodes[name]
        if node.kind in ("input", "output") or node.stateful:
            continue
        if all(edge.from_node in inside for edge in graph.predecessors(name)):
            inside.add(name)
            order.append(name)
    return order


def _port_node(name: str, kind: str) -> Node:
    if kind == "input":
        return Node(name, "input", inputs=[], outputs=["out"])
    return Node(name, "output", inputs=["in"], outputs=[])


def _prefix_graph(graph: PipelineGraph, front: set[str], cuts: dict[tuple[str, str], str]) -> PipelineGraph:
    nodes = {name: graph.nodes[name] for name in graph.nodes if name in front or _is_output(graph, name)}
    edges = []
    for edge in graph.edges:
        if edge.from_node not in front:
            continue
        if edge.to_node in front or _is_output(graph, edge.to_node):
            edges.append(edge)
        else:
            edges.append(Edge(edge.from_node, edge.from_port, cuts[(edge.from_node, edge.from_port)], "in"))
    for cut in dict.fromkeys(cuts.values()):
        nodes[cut] = _port_node(cut, "output")
    outputs = [*graph.outputs, *dict.fromkeys(cuts.values())]
    return replace(graph, name=f"{graph.name}/prefix", outputs=outputs, nodes=nodes, edges=_unique(edges))


def _rest_graph(graph: PipelineGraph, front: set[str], cuts: dict[tuple[str, str], str]) -> PipelineGraph:
    nodes = {name: node for name, node in graph.nodes.items() if name not in front}
    edges = []
    for edge in graph.edges:
        if edge.to_node in front:
            continue
        if edge.from_node in front:
            if _is_output(graph, edge.to_node):
                continue  # the prefix delivers these itself
            edge = Edge(cuts[(edge.from_node, edge.from_port)], "out", edge.to_node, edge.to_port)
        edges.append(edge)
    inputs = list(dict.fromkeys(cuts.values()))
    for cut in inputs:
        nodes[cut] = _port_node(cut, "input")
    return replace(graph, name=f"{graph.name}/rest", inputs=inputs, nodes=nodes, edges=edges)


def _unique(edges: list[Edge]) -> list[Edge]:
    return list(dict.fromkeys(edges))
