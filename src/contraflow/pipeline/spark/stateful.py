"""Stateful pipelines: the node graph inside one `transformWithState`.

Layout of the state, as the pipeline-state RFC describes it: one value state
per stateful node, named after the node, holding the node's state as JSON
text and absent (null) until the node first stores something. Each call
restores the executor from those values, runs the group's rows, and writes
back only what changed. The executor's next deadline becomes a
processing-time timer, so windows and batches close on time without input
(the Tremor "tick").

Rows arrive as envelopes (see `contraflow.pipeline.spark.envelopes`): each
holds the events of one input batch, already through the pipeline's stateless
prefix when it splits. Each call puts its events back in arrival order
(`arrival_order`) and outputs leave as one envelope per call.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from functools import cached_property
from itertools import groupby
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues, ValueState

from contraflow.events import META_HEADER
from contraflow.pipeline.analysis import follows_watermarks
from contraflow.pipeline.executor import no_cyclic_gc
from contraflow.pipeline.spark.columns import OutputColumns, make_event
from contraflow.pipeline.spark.envelopes import FINAL_OUTPUT, REST_INPUT, from_ipc, late_column, to_ipc
from contraflow.pipeline.spark.partial import (
    ENVELOPE_COLUMN,
    PARTIAL_COLUMN,
    PLACE_COLUMN,
    merge_partials,
    partial_select,
)
from contraflow.pipeline.spark.plan import PipelinePlan, failure_event

STATE_DDL = "json string"
KEY_COLUMN = "key"
INITIAL_STATE_DDL = f"{KEY_COLUMN} string, snapshot string"
NS_PER_MS = 1_000_000

# (plan fingerprint, key) -> an executor kept in this worker process, the state texts it holds
# and the key's timer as last set (ms, None for no timer, UNKNOWN).
RESIDENT_EXECUTORS = 64
UNKNOWN = "unknown"
_resident: OrderedDict[tuple[str, Any], tuple[Any, dict[str, str] | None, Any]] = OrderedDict()


class PipelineProcessor(StatefulProcessor):
    """Runs one key's event envelopes through the (rest of the) pipeline with the key's node states."""

    def __init__(self, plan: PipelinePlan, nodes: list[str], late_nodes: list[str] | None = None) -> None:
        self.plan = plan
        self.nodes = nodes
        self.late_nodes = late_nodes or []  # their late counts leave with each call's outputs

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the value states. Spark also calls this on the driver, only to learn the
        state schemas, so the executor is built on first use, not here."""
        self.handle = handle
        self.states: dict[str, ValueState] = {n: handle.getValueState(n, STATE_DDL) for n in self.nodes}
        self.loaded: dict[str, str] = {}
        self.executor: Any = None
        self.timer: Any = UNKNOWN

    @cached_property
    def _metas_read_only(self) -> bool:
        """Whether no node can change an event's metadata (selects only read it): events with the
        same metadata bytes may then share one decoded dict."""
        return all(node.kind in ("input", "output", "select") for node in self.plan.graph.nodes.values())

    @cached_property
    def _follows_watermarks(self) -> bool:
        """Whether nodes need each event's input partition (only watermarks ask)."""
        return follows_watermarks(self.plan.graph)

    @cached_property
    def _partial_select(self) -> str | None:
        """The select the read tasks fold events for, if any (see `partial_select`)."""
        return partial_select(self.plan.graph)

    @cached_property
    def fresh(self) -> dict[str, str]:
        """Each node's state text before any event."""
        return {node: _json(value) for node, value in self.plan.initial_state().items()}

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:
        self._restore(key)
        late_before = self._late_counts()
        events = arrival_order(rows)
        out = OutputColumns(self.plan.outputs)
        try:
            self._run(events, out, self._run_events)
        except Exception:  # the executor keeps bad events off this path; redo the events one by one
            self._restore(key)
            out = OutputColumns(self.plan.outputs)
            self._run(events, out, self._one_by_one)
        late = [now - before for now, before in zip(self._late_counts(), late_before, strict=True)]
        self._finish(key)
        return _envelope(out, late)

    def _late_counts(self) -> list[int]:
        return self.executor.late_counts(self.late_nodes) if self.late_nodes else []

    def _run(
        self, events: pa.Table, out: OutputColumns, plain: Callable[[pa.Table, OutputColumns], None]
    ) -> None:
        """`plain` over the events, or, where the read tasks folded them (see
        `contraflow.pipeline.spark.partial`), over what the folded segments leave to it."""
        if PARTIAL_COLUMN not in events.column_names:
            plain(events, out)
            return
        select = self._partial_select
        assert select is not None, "only a pipeline partial_select accepts gets folded events"
        partials = events.column(PARTIAL_COLUMN).combine_chunks()
        runner = self.executor.node(select)

        def close(key: Any, time: int, now_ns: int, meta: dict[str, Any]) -> None:
            results = self.executor.outputs_of(lambda: runner.step_group(key, time, now_ns, meta))
            for port, (out_values, out_metas) in results.items():
                out.add_columns(port, out_values, out_metas)

        with no_cyclic_gc():  # as in `process_values`: rescans of the node state would be all it found
            merge_partials(runner.windows, events, lambda part: plain(part, out), partials, close)

    def _run_events(self, events: pa.Table, out: OutputColumns) -> None:
        """An envelope's events, each run of one target through the executor's batch entry point."""
        targets = events.column("target").to_pylist()
        values = events.column("value").to_pylist()
        raw_metas = events.column("meta").to_pylist()
        metas = _decode_metas(raw_metas, self._metas_read_only) if any(raw_metas) else None
        ingest = events.column("ingest_ns").to_pylist()
        sources = _sources(events) if self._follows_watermarks else None
        for target, start, end in _runs(targets):
            if target.startswith(FINAL_OUTPUT):
                out.add_columns(target[len(FINAL_OUTPUT) :], values[start:end], raw_metas[start:end])
                continue
            results = self.executor.process_values(
                target[len(REST_INPUT) :],
                values[start:end],
                metas[start:end] if metas is not None else None,
                ingest[start:end],
                sources[start:end] if sources is not None else None,
            )
            for port, (out_values, out_metas) in results.items():
                out.add_columns(port, out_values, out_metas)

    def _one_by_one(self, events: pa.Table, out: OutputColumns) -> None:
        """The events as single events, an exception becoming that event's `err` record."""
        columns = events.to_pydict()
        for topic, partition, target, offset, ingest_ns, value, meta in zip(
            columns["topic"],
            columns["partition"],
            columns["target"],
            columns["offset"],
            columns["ingest_ns"],
            columns["value"],
            columns["meta"],
            strict=True,
        ):
            event = make_event(value, [(META_HEADER, meta)] if meta else [], (topic, partition, offset))
            if target.startswith(FINAL_OUTPUT):
                out.add(target[len(FINAL_OUTPUT) :], event)
                continue
            try:
                outputs = self.executor.process(
                    target[len(REST_INPUT) :], event, ingest_ns, source_name(topic, partition)
                )
            except Exception as error:
                outputs = [("err", failure_event(error, event))]
            out.extend(outputs, event.origin)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        self._restore(key)
        self.timer = UNKNOWN  # the timer that fired is gone
        out = OutputColumns(self.plan.outputs)
        out.extend(self.executor.tick(timerValues.getCurrentProcessingTimeInMs() * NS_PER_MS))
        self._finish(key)
        return _envelope(out, [0] * len(self.late_nodes))

    def handleInitialState(self, key: Any, initialState: Row, timerValues: TimerValues) -> None:
        """Seed a fresh query with an imported snapshot ({node: state}) for this key."""
        snapshot = orjson.loads(initialState.snapshot)
        self.loaded = {}
        _resident.pop((self.plan.fingerprint, key), None)
        self.executor = self.plan.new_executor()
        self.timer = UNKNOWN
        self.executor.restore({**self._fresh_values(), **snapshot})
        self._finish(key)

    def close(self) -> None:
        pass

    # -- state round trip ------------------------------------------------------------------------

    def _fresh_values(self) -> dict[str, Any]:
        return {node: orjson.loads(text) for node, text in self.fresh.items()}

    def _restore(self, key: Any) -> None:
        """Load the key's stored state of every node (or its initial value) into an executor.

        Executors stay in the worker process between calls, one per key (the
        most recent RESIDENT_EXECUTORS); when the key's executor still holds
        exactly the stored state (it wrote it last), decoding it again is
        skipped: with many groups that is most of a call.
        """
        self.loaded = {}
        for node, state in self.states.items():
            stored = state.get()
            if stored is not None and stored[0] is not None:
                self.loaded[node] = stored[0]
        effective = {node: self.loaded.get(node, fresh) for node, fresh in self.fresh.items()}
        executor, held, timer = _resident.pop((self.plan.fingerprint, key), (None, None, UNKNOWN))
        self.executor = executor if executor is not None else self.plan.new_executor()
        self.timer = timer  # the key's registered timer, trusted only with the state it went with
        if held != effective:
            self.timer = UNKNOWN
            with no_cyclic_gc():
                self.executor.restore({node: orjson.loads(text) for node, text in effective.items()})
        self.plan.apply_signals(self.executor)

    def _finish(self, key: Any) -> None:
        """Store the states that changed and move the timer to the executor's next deadline."""
        effective = {}
        for node, value in self.executor.snapshot().items():
            text = effective[node] = _json(value)
            if text != self.loaded.get(node, self.fresh.get(node)) and node in self.states:
                self.states[node].update((text,))
        if self.plan.ticks:
            self._schedule(self.executor.next_deadline_ns())
        _resident[(self.plan.fingerprint, key)] = (self.executor, effective, self.timer)
        while len(_resident) > RESIDENT_EXECUTORS:
            _resident.popitem(last=False)

    def _schedule(self, deadline_ns: int | None) -> None:
        """Make the key's one timer the executor's next deadline; each timer call is a round trip
        to the JVM, so nothing is asked when the timer known to be registered is already right."""
        wanted = None if deadline_ns is None else -(-deadline_ns // NS_PER_MS)
        if self.timer == wanted:
            return
        current = list(self.handle.listTimers())
        for timer in current:
            if timer != wanted:
                self.handle.deleteTimer(timer)
        if wanted is not None and wanted not in current:
            self.handle.registerTimer(wanted)
        self.timer = wanted


def _decode_metas(raw: list[bytes | None], share: bool) -> list[Any]:
    """Each event's metadata dict (None for none); with `share`, one dict per distinct value:
    a group key set by the prefix (`$region`) repeats across a whole batch."""
    if not share:
        return [orjson.loads(m) if m else None for m in raw]
    decoded: dict[bytes, Any] = {}
    metas: list[Any] = []
    append = metas.append
    for packed in raw:
        if not packed:
            append(None)
            continue
        meta = decoded.get(packed)
        if meta is None:
            meta = decoded[packed] = orjson.loads(packed)
        append(meta)
    return metas


def arrival_order(envelopes: Iterable[Row]) -> pa.Table:
    """Every envelope's events in one table, in the order they arrived, as Tremor feeds a pipeline.

    Spark does not keep row order through the shuffle: each input partition's
    events are put back in offset order, then the partitions (and input
    ports) are merged by ingest time. A merge never reorders the events of one
    partition, even where producer-set timestamps go back; ties go to the
    lower (port, topic, partition).
    """
    runs: dict[tuple[str, str, int], list[pa.Table]] = {}
    ordered = sorted(envelopes, key=lambda r: (r.port, r.topic, r.partition, r.first_offset))
    for number, row in enumerate(ordered):
        events = from_ipc(row.events)
        count = events.num_rows
        events = events.append_column("topic", pa.array([row.topic] * count, pa.string()))
        events = events.append_column("partition", pa.array([row.partition] * count, pa.int32()))
        if PLACE_COLUMN in events.column_names:  # folded: later steps find their places by envelope
            events = events.append_column(ENVELOPE_COLUMN, pa.array([number] * count, pa.int32()))
        runs.setdefault((row.port, row.topic, row.partition), []).append(events)
    tables = [pa.concat_tables(parts) for parts in runs.values()]
    if len(tables) == 1:
        return tables[0]
    whole = pa.concat_tables(tables)
    starts = [0]
    for table in tables:
        starts.append(starts[-1] + table.num_rows)
    merged = heapq.merge(
        *(
            zip(table.column("ingest_ns").to_pylist(), range(start, start + table.num_rows), strict=True)
            for table, start in zip(tables, starts, strict=False)
        )
    )
    return whole.take(pa.array([index for _, index in merged], pa.int64()))


def source_name(topic: str, partition: int) -> str:
    """How a watermark names an input partition (see `contraflow.pipeline.watermark`)."""
    return f"{topic}/{partition}"


def _sources(events: pa.Table) -> list[str]:
    """Each event's input partition, named as `source_name` does."""
    names: dict[tuple[str, int], str] = {}
    sources = []
    for topic, partition in zip(
        events.column("topic").to_pylist(), events.column("partition").to_pylist(), strict=True
    ):
        name = names.get((topic, partition))
        if name is None:
            name = names[(topic, partition)] = source_name(topic, partition)
        sources.append(name)
    return sources


def _runs(targets: list[str]) -> Iterator[tuple[str, int, int]]:
    """(target, start, end) of each stretch of equal targets."""
    start = 0
    for target, group in groupby(targets):
        count = sum(1 for _ in group)
        yield target, start, start + count
        start += count


def _envelope(out: OutputColumns, late: list[int]) -> Iterator[Row]:
    """The collected outputs as one output envelope row, with the call's late events per
    late-calling node (none when there is neither)."""
    if not len(out) and not any(late):
        return iter(())
    counts = {late_column(i): count for i, count in enumerate(late)}
    return iter([Row(events=to_ipc(out.to_arrow()) if len(out) else None, **counts)])


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
