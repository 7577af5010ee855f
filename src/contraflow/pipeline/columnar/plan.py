"""`ColumnarPlan`: one input port of a stateless pipeline (or prefix) run over a whole batch.

`compile` accepts a graph only if every node an event can reach from the port
vectorizes (`routes`); otherwise the caller keeps the per-event executor for
it. `run` then parses the batch (`parse`), evaluates the routes
(`evaluate`), and sends every row the columns cannot answer exactly (parse
failures, other types, values that are not records, metadata on input, an
expression that would fail there) through the per-event executor, merging
both in the executor's emission order: by input row, then route. The result
is the executor's `Traced`, plus the outputs as Arrow columns and the parsed
batch for whoever comes next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from contraflow.lang.graph import PipelineGraph
from contraflow.pipeline.columnar.evaluate import Evaluator
from contraflow.pipeline.columnar.fields import FieldTypes, readable
from contraflow.pipeline.columnar.ir import Expr, Field, NotVectorizable
from contraflow.pipeline.columnar.lowering import Scope, lower
from contraflow.pipeline.columnar.parse import Parsed, parse_values, parsed_from_table
from contraflow.pipeline.columnar.routes import Route, Routes, trace
from contraflow.pipeline.executor import Traced

# The `route` of outputs the per-event executor made (a row's outputs all come from one side, and
# the sort by (source, route) is stable, so they keep the executor's order).
PER_EVENT = -1
OUTPUT_SCHEMA = pa.schema(
    [
        ("source", pa.int64()),
        ("route", pa.int32()),
        ("port", pa.string()),
        ("value", pa.binary()),
        ("meta", pa.binary()),
    ]
)
# `Traced`'s lists and the output columns they come from (see `ColumnarTraced.of`).
_LISTS = {"ports": "port", "values": "value", "metas": "meta", "sources": "source"}
_GIVEN_ANEW = frozenset({*_LISTS, "items", "outputs"})  # what `with_outputs` does not carry over


@dataclass
class ColumnarTraced(Traced):
    """`Traced` as the columnar plan made it: also its outputs as one Arrow batch (`OUTPUT_SCHEMA`
    columns, emission order) and the batch it parsed (`parsed.table`: the fields the plan reads, one
    row per input value; `parsed.fallback`: the rows the per-event executor ran instead)."""

    outputs: pa.RecordBatch | None = None
    parsed: Parsed | None = None
    columnar_rows: int = 0
    evaluator: Evaluator | None = None
    routes: list[Route] = field(default_factory=list)

    @classmethod
    def of(cls, outputs: pa.RecordBatch, **found: Any) -> ColumnarTraced:
        """`outputs` as a `ColumnarTraced` whose lists are only built from its columns when first
        read: the fold and the envelopes read the columns, and building the lists cost 0.15
        µs/event on w1."""
        traced = cls([], [], [], [], outputs=outputs, **found)
        for name in _LISTS:
            delattr(traced, name)
        return traced

    def with_outputs(self, outputs: pa.RecordBatch) -> ColumnarTraced:
        """This trace (of whatever kind, e.g. `contraflow.pipeline.python.staged`'s) with other
        outputs; like `of`, its lists are built from them only when read."""
        kept = {f.name: getattr(self, f.name) for f in fields(self) if f.init and f.name not in _GIVEN_ANEW}
        return type(self).of(outputs, **kept)

    def __getattr__(self, name: str) -> Any:
        """A list `of` left out, built now (only called for attributes not set)."""
        outputs = self.__dict__.get("outputs")
        if name not in _LISTS or outputs is None:
            raise AttributeError(name)
        found = outputs.column(_LISTS[name]).to_pylist()
        setattr(self, name, found)
        return found

    def texts_of(self, expr: Any) -> list[str | None]:
        """The JSON text of tremor-script expression `expr` (an AST) on each output, evaluated on the
        event and metadata that output leaves with; None where the columns do not answer it exactly
        (outputs of the per-event executor, routes where it does not vectorize, inexact rows)."""
        column = self.text_column(expr)
        return [None] * self.count if column is None else column.to_pylist()

    @property
    def count(self) -> int:
        """How many outputs there are."""
        return self.outputs.num_rows if self.outputs is not None else len(self.ports)

    def text_column(self, expr: Any) -> pa.Array | None:
        """`texts_of` as an Arrow string column (null where not answered); None when no output is."""
        evaluator = self.evaluator
        if evaluator is None:
            return None
        return self._answered(expr, lambda lowered: evaluator.text(lowered), pa.string())

    def int_column(self, expr: Any) -> pa.Array | None:
        """The value of `expr` on each output where it is an integer field of the parsed batch (an
        int64 column), null where not answered: what `text_column` spells, without the text (the
        fold reads window times as numbers). None when no output is answered."""
        evaluator = self.evaluator
        if evaluator is None:
            return None

        def values(lowered: Expr) -> pa.Array | None:
            if not isinstance(lowered, Field):  # `_answered` checked that the batch has it
                return None
            column = evaluator.column(lowered)
            return column if column.type == pa.int64() else None

        return self._answered(expr, values, pa.int64())

    def _answered(
        self, expr: Any, evaluate: Callable[[Expr], pa.Array | None], kind: pa.DataType
    ) -> pa.Array | None:
        """`evaluate` of `expr` as lowered on each route, per output row, null where it is not
        exact, the route does not lower it, or `evaluate` gives None; None when no output is."""
        if self.outputs is None or self.evaluator is None or self.parsed is None:
            return None
        route_column = self.outputs.column("route")
        sources = self.outputs.column("source")
        found: pa.Array | None = None
        for number, route in enumerate(self.routes):
            meta = dict(route.meta.fields) if route.meta is not None else {}
            try:
                lowered = lower(expr, Scope(route.value, meta))
                if not readable(FieldTypes.of([lowered]), self.parsed.table.schema):
                    continue
            except NotVectorizable:
                continue
            on_route = pc.equal(route_column, number)
            if not pc.any(on_route).as_py():
                continue
            column = evaluate(lowered)
            if column is None:
                continue
            exact = pc.and_(on_route, self.evaluator.exact(lowered).take(sources))
            found = pc.if_else(
                exact, column.take(sources), found if found is not None else pa.nulls(len(sources), kind)
            )
        return found

    def by_port(self) -> dict[str, tuple[pa.Array, list[bytes | None]]]:
        """Output port -> (channel values, packed metas), each port's rows in order (what
        `PipelineExecutor.process_values` returns, with the values as an Arrow column)."""
        if self.outputs is None:
            return _lists_by_port(self)
        ports = self.outputs.column("port")
        names = pc.unique(ports).to_pylist()  # in order of first appearance
        found: dict[str, tuple[pa.Array, list[bytes | None]]] = {}
        for port in names:
            rows = self.outputs if len(names) == 1 else self.outputs.filter(pc.equal(ports, port))
            found[port] = (rows.column("value"), rows.column("meta").to_pylist())
        return found


@dataclass
class ColumnarPlan:
    """`fields` are what the routes read; `wider` adds the fields of expressions a later stage
    evaluates on the outputs (`ColumnarTraced.text_column`), parsed when the batch types them."""

    port: str
    routes: Routes
    fields: FieldTypes
    wider: FieldTypes | None = None

    @classmethod
    def compile(
        cls, graph: PipelineGraph, port: str, also_read: Sequence[Any] = (), unread: bool = False
    ) -> ColumnarPlan | None:
        """The plan for events entering `port`, or None when some node they reach does not vectorize
        (or none reads them, unless `unread`: a caller with the rows in Arrow anyway).
        `also_read`: tremor-script ASTs evaluated on the outputs afterwards."""
        if port not in graph.inputs:
            return None
        try:
            routes = trace(graph, port)
            if not routes.checks and not unread:
                return None  # nothing reads the events: the executor passes them on without parsing
            exprs = [c.expr for c in routes.checks] + [
                e for r in routes.routes for e in (r.value, r.meta) if e is not None
            ]
            return cls(port, routes, FieldTypes.of(exprs), _wider(exprs, routes, also_read))
        except NotVectorizable:
            return None

    def run(
        self,
        executor: Any,
        values: pa.Array,
        metas: Sequence[dict[str, Any] | None] | None,
        ingest: Sequence[int],
        table: pa.Table | None = None,
    ) -> ColumnarTraced:
        """The batch through the pipeline: what `executor.process_values_traced` would return.
        `table`: the values' fields as columns already (a `python::batch`'s result), used instead of
        parsing the values where its columns convert exactly."""
        count = len(values)
        sample = [values[i].as_py() for i in range(min(count, 8))]
        schema = self.wider.schema(sample) if self.wider is not None else None
        if schema is None:  # the later stage's fields are left out where the sample leaves them open
            schema = self.fields.schema(sample)
        if schema is None:  # the first events leave a field's type open: this batch runs per event
            return _per_event(
                executor.process_values_traced(self.port, values.to_pylist(), _list(metas), list(ingest))
            )
        with_meta = pa.array([bool(m) for m in metas] if metas is not None else [False] * count, pa.bool_())
        parsed = parsed_from_table(table, schema, with_meta) if table is not None else None
        if parsed is None:
            parsed = parse_values(values, schema, with_meta)
        evaluator = Evaluator(parsed.table)
        fallback = self._fallback(evaluator, parsed.fallback)
        parsed.fallback = fallback
        pieces = self._route_outputs(evaluator, values, pc.invert(fallback))
        rows = pc.indices_nonzero(fallback).to_pylist()
        if rows:
            pieces.append(self._per_event_rows(executor, values, metas, ingest, rows))
        outputs = _in_emission_order(pieces)
        return ColumnarTraced.of(
            outputs,
            parsed=parsed,
            columnar_rows=count - len(rows),
            evaluator=evaluator,
            routes=self.routes.routes,
        )

    def _fallback(self, evaluator: Evaluator, fallback: pa.Array) -> pa.Array:
        """Add every row on which a check it reaches is not exact."""
        for check in self.routes.checks:
            inexact = pc.invert(evaluator.exact(check.expr))
            reached = _all(evaluator, check.conditions)
            fallback = pc.or_(fallback, inexact if reached is None else pc.and_(reached, inexact))
        return fallback

    def _route_outputs(
        self, evaluator: Evaluator, values: pa.Array, columnar: pa.Array
    ) -> list[pa.RecordBatch]:
        pieces = []
        for number, route in enumerate(self.routes.routes):
            reached = _all(evaluator, route.conditions)
            rows = pc.indices_nonzero(columnar if reached is None else pc.and_(reached, columnar))
            if len(rows):
                pieces.append(_route_piece(evaluator, route, number, values, rows))
        return pieces

    def _per_event_rows(
        self,
        executor: Any,
        values: pa.Array,
        metas: Sequence[dict[str, Any] | None] | None,
        ingest: Sequence[int],
        rows: list[int],
    ) -> pa.RecordBatch:
        """The fallback rows through the per-event executor, as output rows in their order."""
        traced = executor.process_values_traced(
            self.port,
            values.take(pa.array(rows, pa.int64())).to_pylist(),
            [metas[r] for r in rows] if metas is not None else None,
            [ingest[r] for r in rows],
        )
        sources = [rows[s] for s in traced.sources]
        return pa.RecordBatch.from_arrays(
            [
                pa.array(sources, pa.int64()),
                pa.repeat(pa.scalar(PER_EVENT, pa.int32()), len(sources)),  # stable sort keeps their order
                pa.array(traced.ports, pa.string()),
                pa.array(traced.values, pa.binary()),
                pa.array(traced.metas, pa.binary()),
            ],
            schema=OUTPUT_SCHEMA,
        )


def _wider(exprs: list[Expr], routes: Routes, also_read: Sequence[Any]) -> FieldTypes | None:
    """The fields of `exprs` and of `also_read` as lowered on each route (None: nothing more)."""
    extra = []
    for node in also_read:
        for route in routes.routes:
            meta = dict(route.meta.fields) if route.meta is not None else {}
            try:
                extra.append(lower(node, Scope(route.value, meta)))
            except NotVectorizable:
                continue
    if not extra:
        return None
    try:
        wider = FieldTypes.of(exprs + extra)
    except NotVectorizable:
        return None
    return wider if wider.uses != FieldTypes.of(exprs).uses else None


def _all(evaluator: Evaluator, conditions: tuple[Expr, ...]) -> pa.Array | None:
    """Rows meeting every condition (None: no condition)."""
    reached = None
    for condition in conditions:
        value = evaluator.value(condition)
        reached = value if reached is None else pc.and_(reached, value)
    return reached


def _route_piece(
    evaluator: Evaluator, route: Route, number: int, values: pa.Array, rows: pa.Array
) -> pa.RecordBatch:
    count = len(rows)
    value = (
        values.take(rows) if route.value is None else evaluator.text(route.value).take(rows).cast(pa.binary())
    )
    meta = (
        evaluator.text(route.meta).take(rows).cast(pa.binary())
        if route.meta is not None
        else pa.nulls(count, pa.binary())
    )
    return pa.RecordBatch.from_arrays(
        [
            rows.cast(pa.int64()),
            pa.repeat(pa.scalar(number, pa.int32()), count),
            pa.repeat(pa.scalar(route.port, pa.string()), count),
            value.cast(pa.binary()),
            meta,
        ],
        schema=OUTPUT_SCHEMA,
    )


def _in_emission_order(pieces: list[pa.RecordBatch]) -> pa.RecordBatch:
    """All outputs by input row, then route (a row's outputs all come from one side)."""
    if not pieces:
        return pa.RecordBatch.from_pylist([], schema=OUTPUT_SCHEMA)
    if len(pieces) == 1:
        return pieces[0]
    table = pa.Table.from_batches(pieces)
    order = pc.sort_indices(table, [("source", "ascending"), ("route", "ascending")])
    return table.take(order).combine_chunks().to_batches()[0]


def _per_event(traced: Traced) -> ColumnarTraced:
    return ColumnarTraced(traced.ports, traced.values, traced.metas, traced.sources, traced.items)


def _lists_by_port(traced: Traced) -> dict[str, tuple[pa.Array, list[bytes | None]]]:
    columns: dict[str, tuple[list[bytes], list[bytes | None]]] = {}
    for port, value, meta in zip(traced.ports, traced.values, traced.metas, strict=True):
        values, metas = columns.setdefault(port, ([], []))
        values.append(value)
        metas.append(meta)
    return {port: (pa.array(values, pa.binary()), metas) for port, (values, metas) in columns.items()}


def _list(metas: Sequence[dict[str, Any] | None] | None) -> list[dict[str, Any] | None] | None:
    return list(metas) if metas is not None else None
