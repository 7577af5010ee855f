"""`python::map` and `python::batch` as node runners of the pipeline executor.

Both call a user function with a context (`OperatorContext`: `meta`, `state`, `args`). An exception
in user code never stops the query: it becomes an `err` event carrying the exception's type and
message, the operator and the original event (each event of the batch, for `python::batch`).
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from contraflow.events import decode_value, encode_value
from contraflow.lang.graph import Node, OperatorSpec
from contraflow.pipeline.base import Context, NodeRunner, error_item
from contraflow.pipeline.item import BYTES_MARK, UNDECODED, Item, decode, loads
from contraflow.pipeline.python.modules import UserFunction, load_function
from contraflow.pipeline.python.tables import record_rows, records_table, result_table, table_values


class OperatorContext:
    """The `ctx` a user function gets: the event's metadata (`$`, writable; None for a batch), the
    operator's state (starts None, any JSON value) and the operator's `args` record."""

    __slots__ = ("meta", "state", "args")

    def __init__(self, args: dict[str, Any]) -> None:
        self.meta: dict[str, Any] | None = None
        self.state: Any = None
        self.args = args


class PythonOperator(NodeRunner):
    """What both kinds share: the imported function, its context, and errors as events."""

    mutates = True  # the function gets the event itself and may change it

    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        super().__init__(node, ctx, path)
        assert isinstance(node.spec, OperatorSpec)
        self.spec = node.spec
        self.function = load_function(node.spec)
        self.context = OperatorContext(dict(node.spec.config.get("args") or {}))

    def user_error(self, item: Item, exc: BaseException) -> Item:
        """The `err` event for an exception of the user's function on `item`."""
        error = error_item(self.name, item, exc)
        error[0].update(
            {
                "error": str(exc) or type(exc).__name__,
                "type": type(exc).__name__,
                "operator": self.spec.kind,
                "function": f"{self.spec.config['module']}:{self.spec.config['function']}",
                "position": _user_frame(exc),
            }
        )
        return error

    def snapshot(self) -> Any:
        state = self.context.state
        try:
            orjson.dumps(state)
        except TypeError as exc:
            raise TypeError(f"the state of {self.spec.kind} '{self.name}' is not JSON: {exc}") from exc
        return state

    def restore(self, state: Any) -> None:
        self.context.state = state


class PythonMap(PythonOperator):
    """`python::map`: `function(event, ctx)` per event; its result is the event going on (None
    drops it), `ctx.meta` the metadata it leaves with, `ctx.state` kept per instance."""

    stateful = True

    def push(self, item: Item) -> None:
        value = item[0]
        if value is UNDECODED:
            try:
                value = decode(item)
            except ValueError as exc:
                self.fail(item, exc)
                return
        context = self.context
        meta = item[1]
        if meta is None:
            meta = item[1] = {}
        context.meta = meta
        try:
            result = self.function(value, context)
            if result is None:
                return
            # Encoded now, while the result is fresh in the cache (encoding a call's outputs
            # together later cost three times as much), and a value that is not JSON is this
            # operator's error, not the query's.
            encoded = encode_value(result)
        except Exception as exc:
            self.err(self.user_error([value, meta, item[2]], exc))
            return
        self.out([result, context.meta or None, encoded])

    def map_values(
        self,
        values: Sequence[bytes],
        metas: Sequence[dict[str, Any] | None] | None,
        out: tuple[list[bytes], list[bytes | None]],
    ) -> None:
        """`push` for a whole batch of channel values, its outputs appended to `out` (bytes and
        packed metadata) rather than pushed on: one loop, no item built per event. For a map whose
        `out` is an output port of the pipeline and whose errors go to one or nowhere (see
        `PipelineExecutor.process_values`); errors are pushed to `err` as `push` does."""
        function, context = self.function, self.context
        out_values, out_metas = out
        add_value, add_meta = out_values.append, out_metas.append
        for row, raw in enumerate(values):
            meta = metas[row] if metas is not None else None
            if meta is None:
                meta = {}
            try:
                value = loads(raw) if BYTES_MARK not in raw else decode_value(raw)
            except ValueError as exc:
                self.fail([UNDECODED, meta, raw], exc)
                continue
            context.meta = meta
            try:
                result = function(value, context)
                if result is None:
                    continue
                encoded = encode_value(result)
            except Exception as exc:
                self.err(self.user_error([value, meta, raw], exc))
                continue
            add_value(encoded)
            meta = context.meta
            add_meta(encode_value(meta) if meta else None)


class PythonBatch(PythonOperator):
    """`python::batch`: `function(table, ctx)` once per batch the executor is handed, the batch's
    record events as a `pyarrow.Table`; the rows of the table or polars DataFrame it returns are
    the events going on (see `call_batch`).

    Stateful (its `ctx.state` kept as node state) only when its function may reach the state
    (`contraflow.pipeline.python.state_use`); otherwise it runs where the batches are, in the read
    tasks of every input partition at once, and `ctx.state` starts None on every call."""

    batching = True

    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        super().__init__(node, ctx, path)
        self.stateful = node.stateful
        self.pending: list[Item] = []
        self.sources: list[int] = []

    def push(self, item: Item) -> None:
        self.pending.append(item)
        self.sources.append(self.ctx.source)

    def flush(self) -> None:
        if not self.pending:
            return
        items, sources = self.pending, self.sources
        self.pending, self.sources = [], []
        if not self.stateful:
            self.context.state = None
        outcome = call_batch(
            self.function, self.context, pa.array([_channel_bytes(i) for i in items], pa.binary())
        )
        for row in outcome.not_records:
            self.ctx.emit_from(sources[row])
            self.fail(items[row], TypeError(NOT_A_RECORD))
        for row in outcome.failed:
            self.ctx.emit_from(sources[row])
            assert outcome.error is not None
            self.err(self.user_error(items[row], outcome.error))
        for row, value in zip(outcome.rows.to_pylist(), outcome.values.to_pylist(), strict=True):
            self.ctx.emit_from(sources[row])
            self.out([UNDECODED, items[row][1] if outcome.keeps_meta else None, value])


NOT_A_RECORD = "python::batch takes record events only"


@dataclass
class BatchOutcome:
    """What one call of a `python::batch` function made of a batch of channel values.

    `values`: the output events (JSON records); `rows`: the input row each came from (when the
    function returned another number of rows than it got, every output counts as coming from the
    last record, and `keeps_meta` is False: no input's metadata belongs to it); `not_records`:
    the input rows that were not records; `failed`: the rows of a call that raised `error`."""

    values: pa.Array
    rows: pa.Array
    keeps_meta: bool
    not_records: list[int]
    failed: list[int]
    error: Exception | None = None
    table: pa.Table | None = None  # what the function returned, as a table (`values` are its rows)


def call_batch(function: UserFunction, context: OperatorContext, values: pa.Array) -> BatchOutcome:
    """Call `function(table, context)` on the records among `values` (no Python per event unless
    some are not records or the call raises)."""
    records = record_rows(values)
    not_records = pc.indices_nonzero(pc.invert(records)).to_pylist()
    kept = pc.indices_nonzero(records)
    no_output = pa.array([], pa.binary())
    if not len(kept):
        return BatchOutcome(no_output, pa.array([], pa.uint64()), True, not_records, [])
    try:
        result = result_table(function(records_table(values.take(kept) if not_records else values), context))
        outputs = table_values(result)
    except Exception as exc:
        return BatchOutcome(no_output, pa.array([], pa.uint64()), True, not_records, kept.to_pylist(), exc)
    if len(outputs) == len(kept):
        return BatchOutcome(outputs, kept, True, not_records, [], table=result)
    last = pa.repeat(kept[len(kept) - 1], len(outputs))
    return BatchOutcome(outputs, last, False, not_records, [], table=result)


def _channel_bytes(item: Item) -> bytes:
    raw = item[2]
    return raw if raw is not None else encode_value(item[0])


def _user_frame(exc: BaseException) -> str | None:
    """`file:line` of the innermost frame of the traceback (in the user's code, as it raised)."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


PYTHON_OPERATORS: dict[str, type[NodeRunner]] = {"python::map": PythonMap, "python::batch": PythonBatch}
