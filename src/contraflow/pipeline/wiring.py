"""Building node runners for a pipeline graph and wiring their ports into push functions.

Wiring happens once per executor, from the outputs backwards (reverse
topological order), so every port is bound to the already-built push
function of what it feeds:
- identity nodes (streams, passthrough, `select event from ...`) are skipped:
  their input is bound straight to whatever their output feeds;
- a port with several successors copies the event for each successor that may
  change it in place, itself or anywhere downstream (nested pipelines
  included), so branches never see each other's changes;
- a node's `err` port without edges feeds the pipeline's `err` output, so
  runtime errors always surface there.
"""

from __future__ import annotations

from typing import Any

from contraflow.lang.graph import Node, OperatorSpec, PipelineGraph
from contraflow.pipeline.base import Context, NodeRunner, Push, drop
from contraflow.pipeline.item import Item, copy_item
from contraflow.pipeline.join import JoinRunner
from contraflow.pipeline.operators import OPERATORS
from contraflow.pipeline.python.runners import PYTHON_OPERATORS
from contraflow.pipeline.script import ScriptRunner
from contraflow.pipeline.select import SelectRunner


class Stream(NodeRunner):
    """`create stream`: a named junction, events pass untouched."""

    identity = True


class NestedPipeline(NodeRunner):
    """A `create pipeline` node: the inner graph is wired into this node's ports and runs in place."""

    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        super().__init__(node, ctx, path)
        assert isinstance(node.spec, PipelineGraph)
        self.graph = node.spec
        self.stateful = node.stateful
        self.wired: WiredGraph | None = None
        # Output ports whose events are changed in place further down the outer pipeline (set before `connect`).
        self.outputs_mutate: dict[str, bool] = {}

    def connect(self, outs: dict[str, Push]) -> None:
        super().connect(outs)
        self.wired = WiredGraph(self.graph, self.ctx, outs, f"{self.path}/", self.outputs_mutate)
        self.mutates = self.wired.mutates
        self.batching = bool(self.wired.batching)

    def input(self, port: str) -> Push:
        assert self.wired is not None
        return self.wired.inputs.get(port, drop)

    def tick(self, now_ns: int) -> None:
        assert self.wired is not None
        self.wired.tick(now_ns)

    def deadline(self, latest: bool = False) -> int | None:
        assert self.wired is not None
        return self.wired.deadline(latest)

    def flush(self) -> None:
        assert self.wired is not None
        self.wired.flush()

    def snapshot(self) -> Any:
        assert self.wired is not None
        state = self.wired.snapshot()
        return state if any(v is not None for v in state.values()) else None

    def restore(self, state: Any) -> None:
        assert self.wired is not None
        self.wired.restore(state or {})


def make_runner(node: Node, ctx: Context, path: str, graph: PipelineGraph) -> NodeRunner:
    if node.kind == "select":
        return SelectRunner(node, ctx, path, graph)
    if node.kind == "join":
        return JoinRunner(node, ctx, path, graph)
    if node.kind == "script":
        return ScriptRunner(node, ctx, path)
    if node.kind == "stream":
        return Stream(node, ctx, path)
    if node.kind == "pipeline":
        return NestedPipeline(node, ctx, path)
    if node.kind == "operator":
        assert isinstance(node.spec, OperatorSpec)
        return (OPERATORS.get(node.spec.kind) or PYTHON_OPERATORS[node.spec.kind])(node, ctx, path)
    raise ValueError(f"cannot run node kind {node.kind!r}")


def fan_out(targets: list[tuple[Push, bool]]) -> Push:
    """One port feeding several nodes: each node that may change events in place gets its own copy."""
    pushes = [push for push, _ in targets]
    if not any(mutates for _, mutates in targets):

        def share(item: Item) -> None:
            for push in pushes:
                push(item)

        return share
    plan = [(push, mutates) for push, mutates in targets]

    def copying(item: Item) -> None:
        for push, mutates in plan:
            push(copy_item(item) if mutates else item)

    return copying


class WiredGraph:
    """A pipeline graph as runners plus push functions: `inputs[port](item)` runs an event through."""

    def __init__(
        self,
        graph: PipelineGraph,
        ctx: Context,
        outputs: dict[str, Push],
        prefix: str = "",
        outputs_mutate: dict[str, bool] | None = None,
    ) -> None:
        self.graph = graph
        self.ctx = ctx
        self.runners: dict[str, NodeRunner] = {
            name: make_runner(node, ctx, prefix + name, graph)
            for name, node in graph.nodes.items()
            if node.kind not in ("input", "output")
        }
        # What each node input resolves to: (push, whether events entering there may be changed in
        # place, by that node or anything after it).
        entry: dict[tuple[str, str], tuple[Push, bool]] = {}
        for name, node in graph.nodes.items():
            if node.kind == "output":
                entry[(name, "in")] = (outputs.get(name, drop), (outputs_mutate or {}).get(name, False))
        err_sink = outputs.get("err", drop)
        for name in reversed(graph.topological_order()):
            node = graph.nodes[name]
            if node.kind == "output":
                continue
            ports = self._ports(name, node, entry, err_sink)
            if node.kind == "input":
                entry[(name, "out")] = ports.get("out", (drop, False))
                continue
            runner = self.runners[name]
            if runner.identity:
                entry[(name, "in")] = ports.get("out", (drop, False))
                continue
            if isinstance(runner, NestedPipeline):
                runner.outputs_mutate = {port: mutates for port, (_, mutates) in ports.items()}
            runner.connect({port: push for port, (push, _) in ports.items()})
            # Nodes may hand the event they got (or parts of it) on: what happens after them counts.
            mutates = runner.mutates or any(m for _, m in ports.values())
            for port in node.inputs:
                entry[(name, port)] = (runner.input(port), mutates)
        self.inputs: dict[str, Push] = {port: entry[(port, "out")][0] for port in graph.inputs}
        self.mutates = any(r.mutates for r in self.runners.values())
        self.stateful_nodes = [name for name, r in self.runners.items() if r.stateful]
        self.timed = [r for r in self.runners.values() if type(r).deadline is not NodeRunner.deadline]
        # Nodes that emit on `flush`, upstream first: one flushing feeds the next its outputs.
        order = graph.topological_order()
        self.batching = [self.runners[n] for n in order if n in self.runners and self.runners[n].batching]

    def _ports(
        self,
        name: str,
        node: Node,
        entry: dict[tuple[str, str], tuple[Push, bool]],
        err_sink: Push,
    ) -> dict[str, tuple[Push, bool]]:
        by_port: dict[str, list[tuple[Push, bool]]] = {}
        for edge in self.graph.successors(name):
            by_port.setdefault(edge.from_port, []).append(entry[(edge.to_node, edge.to_port)])
        ports: dict[str, tuple[Push, bool]] = {}
        for port in {*node.outputs, "err", *by_port}:
            targets = by_port.get(port, [])
            if not targets:
                ports[port] = (err_sink if port == "err" else drop, False)
            elif len(targets) == 1:
                ports[port] = targets[0]
            else:
                ports[port] = (fan_out(targets), any(m for _, m in targets))
        return ports

    def tick(self, now_ns: int) -> None:
        for runner in self.timed:
            runner.tick(now_ns)

    def deadline(self, latest: bool = False) -> int | None:
        times = [t for r in self.timed if (t := r.deadline(latest)) is not None]
        if not times:
            return None
        return max(times) if latest else min(times)

    def flush(self) -> None:
        for runner in self.batching:
            runner.flush()

    def snapshot(self) -> dict[str, Any]:
        return {name: self.runners[name].snapshot() for name in self.stateful_nodes}

    def restore(self, state: dict[str, Any]) -> None:
        for name in self.stateful_nodes:
            runner = self.runners[name]
            if name in state:
                runner.restore(state[name])
            else:
                runner.reset()
