"""Facts read off a pipeline graph before it runs: timers, late events, QoS nodes, identity nodes,
pure routing, outputs that are an input unchanged.

Several places decide how to run a pipeline from its shape (the runtime's
trigger, the Spark plan, the stateless/stateful split, the QoS feed); they
ask here, so each fact has one definition.
"""

from __future__ import annotations

from collections.abc import Callable

from contraflow.lang.graph import JoinSpec, Node, OperatorSpec, PipelineGraph, SelectSpec

QOS_KINDS = frozenset({"qos::roundrobin", "qos::backpressure", "qos::percentile"})


def any_node(graph: PipelineGraph, test: Callable[[Node], bool]) -> bool:
    """True if `test` holds for a node of `graph` or of a pipeline nested in it."""
    for node in graph.nodes.values():
        if isinstance(node.spec, PipelineGraph) and any_node(node.spec, test):
            return True
        if test(node):
            return True
    return False


def has_timers(graph: PipelineGraph) -> bool:
    """True if a node acts on time passing without events (interval windows, batch timeouts)."""
    return any_node(graph, _has_timer)


def _has_timer(node: Node) -> bool:
    spec = node.spec
    if isinstance(spec, SelectSpec):
        # Ticks move only a first window that follows ingest time (`Windows.ticking`): one whose
        # time comes from a `script` (the event's own time, as in Tremor) closes on events alone,
        # one closed by the watermark follows event time, and tilt frames close with the first.
        first = spec.windows[0] if spec.windows else None
        return (
            first is not None
            and first.interval_ns is not None
            and first.script is None
            and not first.watermarked
        )
    return (
        isinstance(spec, OperatorSpec) and spec.kind == "generic::batch" and bool(spec.config.get("timeout"))
    )


def late_nodes(graph: PipelineGraph) -> list[str]:
    """The nodes of `graph` (not of pipelines nested in it) that may call an event late: selects
    with a window closed by the watermark, and joins. In name order."""
    return sorted(name for name, node in graph.nodes.items() if _calls_late(node))


def follows_watermarks(graph: PipelineGraph) -> bool:
    """True if a node of `graph` (nested pipelines included) follows a watermark: it then needs
    each event's input partition (see `contraflow.pipeline.watermark`)."""
    return any_node(graph, _calls_late)


def _calls_late(node: Node) -> bool:
    spec = node.spec
    if isinstance(spec, SelectSpec):
        return any(w.watermarked for w in spec.windows)
    return isinstance(spec, JoinSpec)


def has_qos(graph: PipelineGraph) -> bool:
    """True if a node routes by signals the runtime publishes (the `qos::*` operators)."""
    return any_node(graph, lambda node: isinstance(node.spec, OperatorSpec) and node.spec.kind in QOS_KINDS)


def is_identity(node: Node) -> bool:
    """A node that never reads or changes an event: a stream, `passthrough`, a plain `select event`."""
    spec = node.spec
    if node.kind == "stream":
        return True
    if isinstance(spec, OperatorSpec):
        return spec.kind == "passthrough"
    if isinstance(spec, SelectSpec):
        plain = spec.where is None and spec.having is None and spec.group_by is None and not spec.windows
        return plain and spec.target.source.strip() == "event"
    return False


def routing_only(graph: PipelineGraph) -> dict[str, str] | None:
    """Input port -> output port when every input reaches one output through identity nodes only.

    Such a pipeline never reads or changes an event (`select event` without
    filters, `passthrough`, streams), so Spark can move the rows itself.
    """
    routes: dict[str, str] = {}
    for port in graph.inputs:
        name = port
        while True:
            edges = [e for e in graph.successors(name) if e.from_port == "out"]
            if len(edges) != 1:
                return None
            name = edges[0].to_node
            node = graph.nodes[name]
            if node.kind == "output":
                routes[port] = name
                break
            if not is_identity(node):
                return None
    return routes


def output_sources(graph: PipelineGraph) -> dict[str, str] | None:
    """Output port -> the one input port whose events it carries unchanged and in order, when the
    pipeline is routing-only and no output merges several inputs: each such output is its input's
    stream as it is, so readers of the output may read the input instead (`runtime.aliases`)."""
    routes = routing_only(graph)
    if routes is None:
        return None
    sources: dict[str, str] = {}
    for port, output in routes.items():
        if output in sources:
            return None  # two inputs interleave into one output: only a query orders that merge
        sources[output] = port
    return sources
