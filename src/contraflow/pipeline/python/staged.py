"""A stateless graph holding `python::batch` nodes as columnar plans with the user's functions between.

`ColumnarPlan` runs selects and scripts over a whole Arrow batch; a `python::batch` is not one of
them, and a graph holding one would otherwise run on the per-event executor throughout (each
event pushed to the batch node and back out). Here the graph is cut at its batch nodes: each
one's input becomes an output port (`BATCH_IN` + name) and its `out` port an input port
(`BATCH_OUT` + name) of one *staged graph*. The plan from the pipeline's port runs up to the batch
nodes; each batch node's function is called on what reached it, as one table
(`contraflow.pipeline.python.runners.call_batch`); the plan from its out port runs over the rows it
returned; and so on in graph order. Rows a plan cannot answer exactly run on the staged graph's
per-event executor, as in `ColumnarPlan`.

Outputs leave as the per-event executor emits them: the first plan's outputs in its order, then,
batch node by batch node, its err events and what its outputs made downstream. Each output is
traced to the input row it came from, and `StagedTraced.text_column` evaluates a later stage's
expressions with the plan that made the output. A batch node's `err` port, when something is
connected to it, is one more input port (`BATCH_ERR` + name): its err events (built per failed
row, as the executor builds them) run through the plan from there, before its outputs do, as the
executor pushes them on before the outputs; otherwise they go to the pipeline's `err` output.
Only batch nodes without state (see `contraflow.pipeline.python.state_use`) are staged; a graph
holding one with state keeps the executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from contraflow.events import encode_value
from contraflow.lang.graph import Edge, Node, OperatorSpec, PipelineGraph
from contraflow.pipeline.base import Context, error_item
from contraflow.pipeline.columnar import ColumnarPlan, ColumnarTraced
from contraflow.pipeline.columnar.plan import OUTPUT_SCHEMA, PER_EVENT
from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.item import UNDECODED, Item
from contraflow.pipeline.python.runners import NOT_A_RECORD, BatchOutcome, PythonBatch, call_batch

BATCH_IN = "python::batch in:"
BATCH_OUT = "python::batch out:"
BATCH_ERR = "python::batch err:"
# Where each output row of a `StagedTraced` was made: the stage's number and its row there.
STAGE_COLUMN = "stage"
LOCAL_COLUMN = "local"
STAGED_SCHEMA = OUTPUT_SCHEMA.append(pa.field(STAGE_COLUMN, pa.int32())).append(
    pa.field(LOCAL_COLUMN, pa.int64())
)
# The stage number of err events made by a batch node (no plan evaluates on them).
NO_STAGE = -1
_NO_ROUTE = -2


def batch_nodes(graph: PipelineGraph) -> list[str]:
    """The `python::batch` nodes of `graph`, in graph order."""
    return [name for name in graph.topological_order() if _is_batch(graph.nodes[name])]


def _is_batch(node: Node) -> bool:
    return isinstance(node.spec, OperatorSpec) and node.spec.kind == "python::batch"


def staged_graph(graph: PipelineGraph, names: list[str]) -> PipelineGraph:
    """`graph` with each batch node `name` replaced by output port `BATCH_IN + name` (what enters
    it), input port `BATCH_OUT + name` (what leaves it on `out`) and, if its `err` port is
    connected, input port `BATCH_ERR + name` (what leaves it there)."""
    nodes = {name: node for name, node in graph.nodes.items() if name not in names}
    edges = []
    for edge in graph.edges:
        from_node, from_port, to_node = edge.from_node, edge.from_port, edge.to_node
        if from_node in names:
            from_node = (BATCH_ERR if from_port == "err" else BATCH_OUT) + from_node
            from_port = "out"
        if to_node in names:
            edges.append(Edge(from_node, from_port, BATCH_IN + to_node, "in"))
        else:
            edges.append(Edge(from_node, from_port, to_node, edge.to_port))
    for name in names:
        nodes[BATCH_IN + name] = Node(BATCH_IN + name, "output", inputs=["in"], outputs=[])
        nodes[BATCH_OUT + name] = Node(BATCH_OUT + name, "input", inputs=[], outputs=["out"])
    erring = err_connected(graph, names)
    for name in erring:
        nodes[BATCH_ERR + name] = Node(BATCH_ERR + name, "input", inputs=[], outputs=["out"])
    return replace(
        graph,
        name=f"{graph.name}/staged",
        inputs=[*graph.inputs, *(BATCH_OUT + n for n in names), *(BATCH_ERR + n for n in erring)],
        outputs=[*graph.outputs, *(BATCH_IN + n for n in names)],
        nodes=nodes,
        edges=list(dict.fromkeys(edges)),
    )


def err_connected(graph: PipelineGraph, names: list[str]) -> list[str]:
    """The batch nodes among `names` with something connected to their `err` port."""
    return [name for name in names if any(e.from_node == name and e.from_port == "err" for e in graph.edges)]


def columnar_plan(
    graph: PipelineGraph, port: str, also_read: Sequence[Any] = ()
) -> ColumnarPlan | StagedPlan | None:
    """The columnar plan for events entering `port` of a stateless `graph`: staged around its
    `python::batch` nodes if it has any (None: some part does not vectorize)."""
    if not batch_nodes(graph):
        return ColumnarPlan.compile(graph, port, also_read)
    return StagedPlan.compile(graph, port, also_read)


@dataclass
class StagedTraced(ColumnarTraced):
    """`ColumnarTraced` over several plans: `outputs` has `STAGED_SCHEMA`'s columns, and `stages`
    holds what each stage's plan returned (its evaluator answers `text_column` for its rows)."""

    stages: list[ColumnarTraced] = field(default_factory=list)

    def text_column(self, expr: Any) -> pa.Array | None:
        if self.outputs is None:
            return None
        stage_of = self.outputs.column(STAGE_COLUMN)
        found: pa.Array | None = None
        for number, stage in enumerate(self.stages):
            mine = pc.equal(stage_of, number)
            if stage.outputs is None or not pc.any(mine).as_py():
                continue
            # The stage's own outputs view: its rows as it numbered them, the others on no route.
            view = self.outputs.set_column(
                self.outputs.schema.get_field_index("source"),
                "source",
                pc.if_else(mine, self.outputs.column(LOCAL_COLUMN), 0),
            ).set_column(
                self.outputs.schema.get_field_index("route"),
                "route",
                pc.if_else(mine, self.outputs.column("route"), pa.scalar(_NO_ROUTE, pa.int32())),
            )
            column = ColumnarTraced.text_column(stage.with_outputs(view), expr)
            if column is not None:
                found = column if found is None else pc.coalesce(found, column)
        return found


@dataclass
class StagedPlan:
    """The plan of each stage (by its input port of `graph`, the staged graph) and the batch nodes."""

    graph: PipelineGraph
    port: str
    plans: dict[str, ColumnarPlan]
    batches: dict[str, PythonBatch]  # in graph order
    err_port: str | None  # where batch nodes' err events go (None: dropped)
    executor: PipelineExecutor | None = None

    @classmethod
    def compile(cls, graph: PipelineGraph, port: str, also_read: Sequence[Any] = ()) -> StagedPlan | None:
        names = batch_nodes(graph)
        if graph.stateful:
            return None
        staged = staged_graph(graph, names)
        plans = {}
        starts = (
            port,
            *(BATCH_OUT + name for name in names),
            *(BATCH_ERR + n for n in err_connected(graph, names)),
        )
        for start in starts:
            plan = ColumnarPlan.compile(staged, start, also_read, unread=True)
            if plan is None:
                return None
            plans[start] = plan
        batches = {name: PythonBatch(graph.nodes[name], Context(), name) for name in names}
        return cls(staged, port, plans, batches, "err" if "err" in graph.outputs else None)

    def run(
        self,
        executor: Any,
        values: pa.Array,
        metas: Sequence[dict[str, Any] | None] | None,
        ingest: Sequence[int],
    ) -> StagedTraced:
        """What `ColumnarPlan.run` returns, over the stages. `executor` (the whole graph's) is not
        used: rows a plan cannot answer run on the staged graph's executor."""
        if self.executor is None:
            self.executor = PipelineExecutor(self.graph)
        times = pa.array(ingest, pa.int64())
        run = _Run(self, times)
        run.stage(self.plans[self.port].run(self.executor, values, metas, ingest), None)
        for name, batch in self.batches.items():
            run.batch(name, batch)
        return run.traced()


@dataclass
class _Run:
    """One batch through the stages: the outputs so far, each stage's result, and the rows waiting
    for each batch node."""

    plan: StagedPlan
    ingest: pa.Array
    pieces: list[pa.RecordBatch] = field(default_factory=list)
    stages: list[ColumnarTraced] = field(default_factory=list)
    waiting: dict[str, list[pa.RecordBatch]] = field(default_factory=dict)

    def stage(self, traced: ColumnarTraced, sources: pa.Array | None) -> None:
        """Take a stage's outputs: rows for a batch node wait for it, the others are outputs.
        `sources`: the input row of each of the stage's input rows (None: the stage's own)."""
        outputs = _output_rows(traced)
        local = outputs.column("source")
        number = len(self.stages)
        self.stages.append(traced)
        rows = outputs if sources is None else outputs.set_column(0, "source", sources.take(local))
        ports = rows.column("port")
        to_batch = pc.starts_with(ports, BATCH_IN)
        if pc.any(to_batch).as_py():
            for port in pc.unique(ports.filter(to_batch)).to_pylist():
                self.waiting.setdefault(port[len(BATCH_IN) :], []).append(rows.filter(pc.equal(ports, port)))
            final = pc.invert(to_batch)
            rows, local = rows.filter(final), local.filter(final)
        if rows.num_rows:
            self.pieces.append(_with_stage(rows, number, local))

    def batch(self, name: str, batch: PythonBatch) -> None:
        """Call batch node `name` on the rows that reached it, then run the stage after it."""
        parts = self.waiting.pop(name, [])
        if not parts:
            return
        arrived = pa.Table.from_batches(parts).combine_chunks()
        values, metas, sources = (arrived.column(c).combine_chunks() for c in ("value", "meta", "source"))
        batch.context.state = None
        outcome = call_batch(batch.function, batch.context, values)
        self._errors(batch, outcome, values, metas, sources)
        if not len(outcome.values):
            return
        origins = sources.take(outcome.rows)
        out_metas = metas.take(outcome.rows) if outcome.keeps_meta else pa.nulls(len(origins), pa.binary())
        plan = self.plan.plans[BATCH_OUT + name]
        times = self.ingest.take(origins).to_pylist()
        traced = plan.run(self.plan.executor, outcome.values, _decoded(out_metas), times, outcome.table)
        self.stage(traced, origins)

    def _errors(
        self, batch: PythonBatch, outcome: BatchOutcome, values: pa.Array, metas: pa.Array, sources: pa.Array
    ) -> None:
        """The batch node's err events (rows that are not records, then a failed call's rows): run
        through the plan after its `err` port if one is connected, else to the pipeline's err."""
        failures: list[tuple[int, BaseException, bool]] = [
            (row, TypeError(NOT_A_RECORD), False) for row in outcome.not_records
        ]
        if outcome.error is not None:
            failures += [(row, outcome.error, True) for row in outcome.failed]
        plan = self.plan.plans.get(BATCH_ERR + batch.name)
        if not failures or (plan is None and self.plan.err_port is None):
            return
        errors = []
        for row, exc, raised in failures:
            packed = metas[row].as_py()
            item: Item = [UNDECODED, orjson.loads(packed) if packed else None, values[row].as_py()]
            errors.append(batch.user_error(item, exc) if raised else error_item(batch.name, item, exc))
        rows = pa.array([row for row, _, _ in failures], pa.int64())
        if plan is not None:
            origins = sources.take(rows)
            encoded = pa.array([encode_value(e[0]) for e in errors], pa.binary())
            times = self.ingest.take(origins).to_pylist()
            error_metas = [e[1] for e in errors]
            traced = plan.run(self.plan.executor, encoded, error_metas if any(error_metas) else None, times)
            self.stage(traced, origins)
            return
        count = len(rows)
        piece = pa.RecordBatch.from_arrays(
            [
                sources.take(rows),
                pa.repeat(pa.scalar(PER_EVENT, pa.int32()), count),
                pa.repeat(pa.scalar(self.plan.err_port, pa.string()), count),
                pa.array([encode_value(e[0]) for e in errors], pa.binary()),
                pa.array([encode_value(e[1]) if e[1] else None for e in errors], pa.binary()),
            ],
            schema=OUTPUT_SCHEMA,
        )
        self.pieces.append(_with_stage(piece, NO_STAGE, rows))

    def traced(self) -> StagedTraced:
        outputs = (
            pa.Table.from_batches(self.pieces, STAGED_SCHEMA).combine_chunks().to_batches()[0]
            if self.pieces
            else pa.RecordBatch.from_pylist([], schema=STAGED_SCHEMA)
        )
        return StagedTraced(
            outputs.column("port").to_pylist(),
            outputs.column("value").to_pylist(),
            outputs.column("meta").to_pylist(),
            outputs.column("source").to_pylist(),
            outputs=outputs,
            columnar_rows=sum(s.columnar_rows for s in self.stages),
            stages=self.stages,
        )


def _output_rows(traced: ColumnarTraced) -> pa.RecordBatch:
    """A stage's outputs as `OUTPUT_SCHEMA` rows (a batch its plan ran per event has no columns)."""
    if traced.outputs is not None:
        return traced.outputs
    count = len(traced.ports)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(traced.sources, pa.int64()),
            pa.repeat(pa.scalar(PER_EVENT, pa.int32()), count),
            pa.array(traced.ports, pa.string()),
            pa.array(traced.values, pa.binary()),
            pa.array(traced.metas, pa.binary()),
        ],
        schema=OUTPUT_SCHEMA,
    )


def _with_stage(rows: pa.RecordBatch, number: int, local: pa.Array) -> pa.RecordBatch:
    count = rows.num_rows
    return pa.RecordBatch.from_arrays(
        [*rows.columns, pa.repeat(pa.scalar(number, pa.int32()), count), local.cast(pa.int64())],
        schema=STAGED_SCHEMA,
    )


def _decoded(metas: pa.Array) -> list[dict[str, Any] | None] | None:
    """Packed metadata as the executor takes it (None: no row has any)."""
    if metas.null_count == len(metas):
        return None
    return [orjson.loads(m) if m else None for m in metas.to_pylist()]
