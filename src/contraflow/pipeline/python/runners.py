"""`python::map` and `python::batch` as node runners of the pipeline executor.

Both call a user function with a context (`OperatorContext`: `meta`, `state`, `args`). An exception
in user code never stops the query: it becomes an `err` event carrying the exception's type and
message, the operator and the original event (each event of the batch, for `python::batch`).
"""

from __future__ import annotations

import traceback
from typing import Any

import orjson
import pyarrow as pa

from contraflow.events import encode_value
from contraflow.lang.graph import Node, OperatorSpec
from contraflow.pipeline.base import Context, NodeRunner, error_item
from contraflow.pipeline.item import UNDECODED, Item, decode
from contraflow.pipeline.python.modules import load_function
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

    def snapshot(self) -> Any:
        state = self.context.state
        try:
            orjson.dumps(state)
        except TypeError as exc:
            raise TypeError(f"the state of python::map '{self.name}' is not JSON: {exc}") from exc
        return state

    def restore(self, state: Any) -> None:
        self.context.state = state


class PythonBatch(PythonOperator):
    """`python::batch`: `function(table, ctx)` once per batch the executor is handed, the batch's
    record events as a `pyarrow.Table`; the rows of the table or polars DataFrame it returns are
    the events going on. When it returns as many rows as it got, row i keeps the metadata of event
    i; otherwise the outputs carry none and count as coming from the batch's last event.

    Not stateful: it runs where the batches are, in the read tasks of every input partition at once,
    so `ctx.state` lasts for one call (see docs/python.md)."""

    batching = True

    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        super().__init__(node, ctx, path)
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
        values = pa.array([_channel_bytes(item) for item in items], pa.binary())
        records = record_rows(values)
        rows = records.to_pylist()
        for index, is_record in enumerate(rows):
            if not is_record:
                self.ctx.emit_from(sources[index])
                self.fail(items[index], TypeError("python::batch takes record events only"))
        kept = [i for i, is_record in enumerate(rows) if is_record]
        if kept:
            self._call(values.filter(records), [items[i] for i in kept], [sources[i] for i in kept])

    def _call(self, values: pa.Array, items: list[Item], sources: list[int]) -> None:
        context = self.context
        context.state = None
        try:
            result = result_table(self.function(records_table(values), context))
            outputs = table_values(result).to_pylist()
        except Exception as exc:
            for item, source in zip(items, sources, strict=True):
                self.ctx.emit_from(source)
                self.err(self.user_error(item, exc))
            return
        same_rows = len(outputs) == len(items)
        for index, output in enumerate(outputs):
            self.ctx.emit_from(sources[index] if same_rows else sources[-1])
            meta = items[index][1] if same_rows else None
            self.out([UNDECODED, meta, output])


def _channel_bytes(item: Item) -> bytes:
    raw = item[2]
    return raw if raw is not None else encode_value(item[0])


def _user_frame(exc: BaseException) -> str | None:
    """`file:line` of the innermost frame of the traceback (in the user's code, as it raised)."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


PYTHON_OPERATORS: dict[str, type[NodeRunner]] = {"python::map": PythonMap, "python::batch": PythonBatch}
