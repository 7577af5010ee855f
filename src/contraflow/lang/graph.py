"""The flow graph: what the Troy/Trickle front end hands to the runtime and the Spark executor.

A `Deployment` is every flow instance a Troy file deploys, each a `FlowGraph`
with its arguments already resolved to plain values: connectors (kind, config,
codec, processors), pipelines (`PipelineGraph`: nodes, edges, ports) and the
connections between them. Everything here is a plain dataclass; `to_dict()`
gives JSON-ready data (expression ASTs are replaced by their source text), so
the graph can be logged, diffed in tests, or shipped to another process.

Conventions consumers can rely on:
- every pipeline port is a node: kind `input` for each name in
  `PipelineGraph.inputs`, kind `output` for each name in `outputs`;
- an `Edge` goes from a node's output port to a node's input port; selects,
  streams, inputs and outputs use the port names `in`/`out` (plus `err`);
- windows are not dataflow nodes: a windowed select carries its `WindowSpec`s
  (in tilt-frame order) in `SelectSpec.windows`, and `PipelineGraph.windows`
  lists every defined window;
- `stateful` is computed once here so the Spark executor can choose between
  a function over Arrow batches (stateless) and `transformWithState` (stateful).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from contraflow.lang.errors import Position

NodeKind = Literal["input", "output", "select", "join", "script", "operator", "stream", "pipeline"]
EndpointKind = Literal["connector", "pipeline"]

# Marks fields holding compiler objects (ASTs) that `to_dict` leaves out.
_AST = {"ast": True}

# Operators that keep state between events (counters, batches, buckets, QoS bookkeeping).
STATEFUL_OPERATORS = frozenset(
    {
        "generic::counter",
        "generic::batch",
        "grouper::bucket",
        "qos::roundrobin",
        "qos::backpressure",
        "qos::percentile",
        "python::map",
        "python::batch",
    }
)


def to_jsonable(value: Any) -> Any:
    """Recursively turn graph dataclasses into dicts/lists of JSON values, dropping AST fields."""
    if isinstance(value, Position):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            if f.metadata.get("ast"):
                continue
            out[f.name] = to_jsonable(getattr(value, f.name))
        extra = getattr(value, "_extra_json", None)
        if extra is not None:
            out.update(extra())
        return out
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


class _ToDict:
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form of this object (ASTs replaced by source text)."""
        result = to_jsonable(self)
        assert isinstance(result, dict)
        return result


@dataclass
class SourceExpr(_ToDict):
    """A tremor-script expression (or script body) as parsed: AST for compilers, text for humans."""

    source: str
    ast: Any = field(default=None, metadata=_AST, repr=False, compare=False)
    position: Position | None = field(default=None, compare=False)


@dataclass
class PluginRef(_ToDict):
    """A codec, preprocessor or postprocessor by name, with its optional config."""

    name: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class WindowSpec(_ToDict):
    """A window by event count (`size`) or by time (`interval_ns`).

    `kind` "tumbling": windows follow each other. "sliding": each window covers the
    last `size` events (or `interval_ns`) and one is emitted every `slide` events (or ns).
    """

    name: str
    kind: str = "tumbling"
    size: int | None = None
    interval_ns: int | None = None
    max_groups: int | None = None
    emit_empty_windows: bool = False
    script: SourceExpr | None = None
    slide: int | None = None
    # A state window (Tremor 0.13): its `script` updates `state` (this initial value, per group)
    # and answers `emit` (bool) or `[emit, include]` for each event.
    has_state: bool = False
    state: Any = None
    # Event time (beyond Tremor, see `contraflow.pipeline.event_time`): how far behind the highest
    # event time the watermark trails (`lateness`), and a session window's `gap`/`max_duration`.
    lateness_ns: int | None = None
    gap_ns: int | None = None
    max_duration_ns: int | None = None

    @property
    def watermarked(self) -> bool:
        """True for a window closed by the watermark (one with `lateness`, or a session window)."""
        return self.lateness_ns is not None or self.kind == "session"


@dataclass
class JoinSpec(_ToDict):
    """A windowed stream-stream join (beyond Tremor): the node's inputs are `left` and `right`.

    Each pair of events whose keys are equal and whose times lie within `within_ns` of each
    other gives one output when the second arrives. `left_keys`/`right_keys` (one per `==` of
    the `on` clause) and `*_time` read one side's `event`; `target`, `where` and `having` read
    the pair as `event.left`/`event.right` (written `left`/`right` in the source). With
    `left_outer` (`left join`), a left event no pair used comes out with `right` null once the
    watermark passes its time plus `within_ns`.
    """

    target: SourceExpr
    left_keys: list[SourceExpr]
    right_keys: list[SourceExpr]
    within_ns: int
    left_time: SourceExpr | None = None
    right_time: SourceExpr | None = None
    where: SourceExpr | None = None
    having: SourceExpr | None = None
    left_outer: bool = False


@dataclass
class GroupBy(_ToDict):
    """`group by` clause: `expr` (one key), `set` (a tuple of dimensions), `each` (one group per element)."""

    mode: Literal["expr", "set", "each"]
    expr: SourceExpr | None = None
    items: list[GroupBy] = field(default_factory=list)


@dataclass
class SelectSpec(_ToDict):
    """A `select`: target expression, optional filters, grouping and windows (tilt frames in order)."""

    target: SourceExpr
    where: SourceExpr | None = None
    having: SourceExpr | None = None
    group_by: GroupBy | None = None
    windows: list[WindowSpec] = field(default_factory=list)
    aggregates: list[str] = field(default_factory=list)


@dataclass
class ScriptSpec(_ToDict):
    """A created script: its body, resolved `args`, and the initial `state` expression if any.

    `constants` and `functions` are the `const` values and `fn` definitions
    visible where the script was defined: pass them to `compile_script`.
    """

    definition: str
    body: SourceExpr
    args: dict[str, Any] = field(default_factory=dict)
    state: SourceExpr | None = None
    uses_state: bool = False
    constants: dict[str, Any] = field(default_factory=dict)
    functions: dict[str, Any] = field(default_factory=dict, metadata=_AST, repr=False)
    # `script from <port>`: the body run for events arriving on that extra input port.
    port_bodies: dict[str, SourceExpr] = field(default_factory=dict)


@dataclass
class OperatorSpec(_ToDict):
    """A created operator: its kind (`generic::counter`...) and resolved config."""

    definition: str
    kind: str
    config: dict[str, Any] = field(default_factory=dict)
    # Python operators: where their module is looked for before `sys.path` (the defining file's
    # directory, then $CONTRAFLOW_PATH, as of compiling), and where `module`/`function` are
    # written, so a deploy that cannot import them points there.
    search_path: list[str] = field(default_factory=list)
    positions: dict[str, Position] = field(default_factory=dict, compare=False)


NodeSpec = SelectSpec | JoinSpec | ScriptSpec | OperatorSpec


@dataclass
class Node(_ToDict):
    """One vertex of a pipeline graph, with the ports it accepts and emits on."""

    name: str
    kind: NodeKind
    inputs: list[str] = field(default_factory=lambda: ["in"])
    outputs: list[str] = field(default_factory=lambda: ["out"])
    stateful: bool = False
    spec: NodeSpec | PipelineGraph | None = None
    position: Position | None = None


@dataclass(frozen=True)
class Edge(_ToDict):
    """Events leaving `from_node` on `from_port` enter `to_node` on `to_port`."""

    from_node: str
    from_port: str
    to_node: str
    to_port: str

    def __str__(self) -> str:
        return f"{self.from_node}/{self.from_port} -> {self.to_node}/{self.to_port}"


@dataclass
class PipelineGraph(_ToDict):
    """A pipeline: ports, nodes and edges, plus the resolved `args` its expressions can read.

    `constants` and `functions` are what the select expressions of this
    pipeline can reference: pass them to `compile_expr`.
    """

    name: str
    inputs: list[str] = field(default_factory=lambda: ["in"])
    outputs: list[str] = field(default_factory=lambda: ["out", "err"])
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    windows: dict[str, WindowSpec] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    constants: dict[str, Any] = field(default_factory=dict)
    functions: dict[str, Any] = field(default_factory=dict, metadata=_AST, repr=False)

    @property
    def stateful(self) -> bool:
        """True when any node keeps state: the executor then needs `transformWithState`."""
        return any(node.stateful for node in self.nodes.values())

    def _extra_json(self) -> dict[str, Any]:
        return {"stateful": self.stateful}

    def successors(self, node: str) -> list[Edge]:
        """Edges leaving `node`, in declaration order."""
        return [e for e in self.edges if e.from_node == node]

    def predecessors(self, node: str) -> list[Edge]:
        """Edges entering `node`, in declaration order."""
        return [e for e in self.edges if e.to_node == node]

    def find_cycle(self) -> list[str] | None:
        """A cycle as node names (first == last), or None: the checker rejects cyclic pipelines."""
        on_path: list[str] = []
        done: set[str] = set()

        def visit(name: str) -> list[str] | None:
            on_path.append(name)
            for edge in self.successors(name):
                if edge.to_node in on_path:
                    return [*on_path[on_path.index(edge.to_node) :], edge.to_node]
                if edge.to_node not in done and (cycle := visit(edge.to_node)):
                    return cycle
            on_path.pop()
            done.add(name)
            return None

        for name in self.nodes:
            if name not in done and (cycle := visit(name)):
                return cycle
        return None

    def topological_order(self) -> list[str]:
        """Node names so that every edge goes forward (the checker guarantees there is no cycle).

        Ties keep declaration order, so the order is stable across compilations.
        """
        incoming = {name: 0 for name in self.nodes}
        for edge in self.edges:
            incoming[edge.to_node] += 1
        ready = [name for name, count in incoming.items() if count == 0]
        order: list[str] = []
        while ready:
            name = ready.pop(0)
            order.append(name)
            for edge in self.successors(name):
                incoming[edge.to_node] -= 1
                if incoming[edge.to_node] == 0:
                    ready.append(edge.to_node)
        if len(order) != len(self.nodes):
            raise ValueError(f"pipeline '{self.name}' has a cycle")
        return order


@dataclass
class ConnectorSpec(_ToDict):
    """A created connector: kind and everything from its `with` block, values resolved."""

    alias: str
    definition: str
    kind: str
    config: dict[str, Any] = field(default_factory=dict)
    # Python operators: where their module is looked for before `sys.path` (the defining file's
    # directory, then $CONTRAFLOW_PATH, as of compiling), and where `module`/`function` are
    # written, so a deploy that cannot import them points there.
    search_path: list[str] = field(default_factory=list)
    positions: dict[str, Position] = field(default_factory=dict, compare=False)
    codec: PluginRef | None = None
    preprocessors: list[PluginRef] = field(default_factory=list)
    postprocessors: list[PluginRef] = field(default_factory=list)
    reconnect: dict[str, Any] | None = None
    metrics_interval_s: float | None = None
    # The directory of the deployed flow file: a `python` connector's module is looked up there first.
    directory: str | None = None


@dataclass(frozen=True)
class Connection(_ToDict):
    """`connect /from_kind/from_alias/from_port to /to_kind/to_alias/to_port`."""

    from_kind: EndpointKind
    from_alias: str
    from_port: str
    to_kind: EndpointKind
    to_alias: str
    to_port: str

    def __str__(self) -> str:
        return (
            f"/{self.from_kind}/{self.from_alias}/{self.from_port} -> "
            f"/{self.to_kind}/{self.to_alias}/{self.to_port}"
        )


@dataclass
class FlowGraph(_ToDict):
    """One deployed flow instance: `name` is the deploy alias, `definition` the flow it came from."""

    name: str
    definition: str
    args: dict[str, Any] = field(default_factory=dict)
    connectors: dict[str, ConnectorSpec] = field(default_factory=dict)
    pipelines: dict[str, PipelineGraph] = field(default_factory=dict)
    connections: list[Connection] = field(default_factory=list)

    def sources(self) -> list[str]:
        """Connectors that feed something (they appear on the left of a connect)."""
        return _unique(c.from_alias for c in self.connections if c.from_kind == "connector")

    def sinks(self) -> list[str]:
        """Connectors that receive something (they appear on the right of a connect)."""
        return _unique(c.to_alias for c in self.connections if c.to_kind == "connector")


@dataclass
class Deployment(_ToDict):
    """Every `deploy flow` of a Troy file, in order, keyed by deploy alias."""

    flows: dict[str, FlowGraph] = field(default_factory=dict)


def _unique(items: Any) -> list[str]:
    return list(dict.fromkeys(items))
