"""Stateful pipelines: the whole node graph inside one `transformWithState`.

Layout of the state, as the pipeline-state RFC describes it: one value state
per stateful node, named after the node, holding the node's state as JSON
text and absent (null) until the node first stores something. Each call
restores the executor from those values, runs the group's rows, and writes
back only what changed. The executor's next deadline becomes a
processing-time timer, so windows and batches close on time without input
(the Tremor "tick").

Spark does not keep row order through the shuffle into this operator, so each
call sorts its rows by (port, partition, offset) first: the order of every
input partition is the order the graph sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import groupby
from typing import Any

import orjson
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues, ValueState

from contraflow.events import META_HEADER
from contraflow.pipeline.spark_columns import OutputColumns, make_event
from contraflow.pipeline.spark_plan import PipelinePlan, failure_event
from contraflow.spu.storage.batch import pack_headers

STATE_DDL = "json string"
KEY_COLUMN = "key"
INITIAL_STATE_DDL = f"{KEY_COLUMN} string, snapshot string"
NS_PER_MS = 1_000_000


class PipelineProcessor(StatefulProcessor):
    """Runs one key's events through the pipeline with the key's node states."""

    def __init__(self, plan: PipelinePlan, nodes: list[str]) -> None:
        self.plan = plan
        self.nodes = nodes

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.states: dict[str, ValueState] = {n: handle.getValueState(n, STATE_DDL) for n in self.nodes}
        self.executor = self.plan.executor()
        self.fresh = {node: _json(value) for node, value in self.plan.initial_state().items()}
        self.loaded: dict[str, str] = {}

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:
        self._restore()
        ordered = sorted(rows, key=lambda r: (r.port, r.partition, r.offset))
        try:
            results = [self._run_port(port, list(group)) for port, group in groupby(ordered, key=_port)]
        except Exception:  # the executor keeps bad events off this path; redo the rows one by one
            self._restore()
            results = [self._one_by_one(ordered)]
        self._finish()
        return (row for result in results for row in result)

    def _run_port(self, port: str, rows: list[Row]) -> list[Row]:
        """One port's rows through the executor's batch entry point."""
        values = [row.value for row in rows]
        metas = [_meta(row.headers) for row in rows] if any(row.headers for row in rows) else None
        ingest = [row.ingest_ns for row in rows]
        out: list[Row] = []
        for out_port, (out_values, out_metas) in self.executor.process_values(
            port, values, metas, ingest
        ).items():
            topic = self.plan.outputs.get(out_port)
            if topic is not None:
                out += [
                    Row(topic=topic, value=value, headers=_meta_header(meta))
                    for value, meta in zip(out_values, out_metas, strict=True)
                ]
        return out

    def _one_by_one(self, rows: list[Row]) -> list[Row]:
        """Rows as single events, an exception becoming that event's `err` record."""
        out = OutputColumns(self.plan.outputs)
        for row in rows:
            headers = [_header(h) for h in row.headers or ()]
            event = make_event(row.value, headers, (row.topic, row.partition, row.offset))
            origin = event.origin
            try:
                outputs = self.executor.process(row.port, event, row.ingest_ns)
            except Exception as error:
                outputs = [("err", failure_event(error, event))]
            out.extend(outputs, origin)
        return list(_rows(out))

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        self._restore()
        out = OutputColumns(self.plan.outputs)
        out.extend(self.executor.tick(timerValues.getCurrentProcessingTimeInMs() * NS_PER_MS))
        self._finish()
        return _rows(out)

    def handleInitialState(self, key: Any, initialState: Row, timerValues: TimerValues) -> None:
        """Seed a fresh query with an imported snapshot ({node: state}) for this key."""
        snapshot = orjson.loads(initialState.snapshot)
        self.loaded = {}
        self.executor.restore({**self._fresh_values(), **snapshot})
        self._finish()

    def close(self) -> None:
        pass

    # -- state round trip ------------------------------------------------------------------------

    def _fresh_values(self) -> dict[str, Any]:
        return {node: orjson.loads(text) for node, text in self.fresh.items()}

    def _restore(self) -> None:
        """Load every node's stored state (or its initial value) into the executor."""
        self.loaded = {}
        for node, state in self.states.items():
            stored = state.get()
            if stored is not None and stored[0] is not None:
                self.loaded[node] = stored[0]
        self.executor.restore(
            {node: orjson.loads(self.loaded.get(node, fresh)) for node, fresh in self.fresh.items()}
        )

    def _finish(self) -> None:
        """Store the states that changed and move the timer to the executor's next deadline."""
        for node, value in self.executor.snapshot().items():
            text = _json(value)
            if text != self.loaded.get(node, self.fresh.get(node)) and node in self.states:
                self.states[node].update((text,))
        if self.plan.ticks:
            self._schedule(self.executor.next_deadline_ns())

    def _schedule(self, deadline_ns: int | None) -> None:
        wanted = None if deadline_ns is None else -(-deadline_ns // NS_PER_MS)
        current = list(self.handle.listTimers())
        for timer in current:
            if timer != wanted:
                self.handle.deleteTimer(timer)
        if wanted is not None and wanted not in current:
            self.handle.registerTimer(wanted)


def _port(row: Row) -> str:
    return str(row.port)


def _meta(headers: Any) -> dict[str, Any] | None:
    for name, value in (_header(h) for h in headers or ()):
        if name == META_HEADER:
            meta = orjson.loads(value)
            return meta if isinstance(meta, dict) and meta else None
    return None


def _meta_header(meta: bytes | None) -> bytes | None:
    return pack_headers([(META_HEADER, meta)]) if meta else None


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _rows(out: OutputColumns) -> Iterator[Row]:
    rows: Iterable[tuple[str, bytes, bytes | None]] = out.rows()
    return (Row(topic=topic, value=value, headers=headers) for topic, value, headers in rows)


def _header(header: Any) -> tuple[str, bytes]:
    """A header struct as `transformWithState` hands it over: a Row, or a dict in some PySpark paths."""
    if isinstance(header, dict):
        return header["key"], header["value"]
    return header.key, header.value
