"""`PipelineExecutor`: runs a compiled Trickle pipeline on events, one at a time, as Tremor does.

The same executor runs inside Spark (in the sources' read tasks for stateless
pipelines, `transformWithState` for stateful ones) and in `run_local`. Everything it
remembers between events is per node and exported by `snapshot()` as plain
JSON values (node name -> state, null for a node that holds nothing, as in the
pipeline-state RFC), so a state store can keep one value per node and a fresh
executor continues exactly where another stopped after `restore()`.

Events are `contraflow.events.Event`s (or, in the batch entry point, channel
bytes plus metadata). A value is parsed only when a node reads it, and an
event that no node changed leaves with its original bytes in `raw`.
A bad event never raises: it becomes an error record on the `err` output.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orjson import dumps

from contraflow.events import Event, encode_value
from contraflow.lang.graph import PipelineGraph
from contraflow.lang.script.stdlib.system_ import INGEST_CLOCK
from contraflow.pipeline.base import Context, Push, drop
from contraflow.pipeline.item import UNDECODED, Item
from contraflow.pipeline.python.runners import PythonMap
from contraflow.pipeline.wiring import WiredGraph

# Events per step of the batch loop: emitted items are turned into bytes after each step,
# so at most this many live items wait at a time.
_CHUNK = 4096

Columns = tuple[list[bytes], list[bytes | None]]


@dataclass
class Traced:
    """Outputs in emission order (see `PipelineExecutor.process_values_traced`)."""

    ports: list[str]
    values: list[bytes]
    metas: list[bytes | None]
    sources: list[int]
    # The items themselves (their values stay decoded where a node read them): what comes
    # next may read the events without parsing their bytes again. Empty when not kept.
    items: list[Item] = field(default_factory=list)


_T = TypeVar("_T")


def _reading_ingest_time(method: Callable[..., _T]) -> Callable[..., _T]:
    """Run an executor method with `system::ingest_ns()` reading this executor's context, whose
    `now_ns` is the ingest time of the event being processed; the previous source comes back
    after, so a standalone script run later on this thread reads the wall clock again."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> _T:
        previous = INGEST_CLOCK.source
        INGEST_CLOCK.source = self.ctx
        try:
            return method(self, *args, **kwargs)
        finally:
            INGEST_CLOCK.source = previous

    return run


class PipelineExecutor:
    """One running instance of a pipeline graph (see the module docstring)."""

    def __init__(self, graph: PipelineGraph, *, flow: str = "", name: str | None = None) -> None:
        self.graph = graph
        self.flow = flow
        self.name = name or graph.name
        self.stateful = graph.stateful
        self.ctx = Context()
        self._emitted: list[tuple[str, Item]] = []
        emitted = self._emitted
        outputs: dict[str, Push] = {port: _sink(emitted, port) for port in graph.outputs}
        self._outputs = outputs
        self._wired = WiredGraph(graph, self.ctx, outputs)
        self._inputs = self._wired.inputs
        self._passthrough = self._pure_routing()
        self._direct_maps = self._direct_python_maps()

    @property
    def signals(self) -> dict[str, Any]:
        """What the runtime published for QoS operators, by node name (nested: `outer/inner`)."""
        return self.ctx.signals

    def signal(self, node: str, value: Any) -> None:
        """Publish runtime state for a QoS node (see `contraflow.pipeline.operators`)."""
        self.ctx.signals[node] = value

    # --- events ---------------------------------------------------------------------------------

    @_reading_ingest_time
    def process(
        self, port: str, event: Event, ingest_ns: int, partition: str | None = None
    ) -> list[tuple[str, Event]]:
        """Feed one event into input `port`; returns the (output port, event) pairs emitted, in order.

        `partition` names the input partition it was read from (default: the port)."""
        push = self._input(port)
        self.ctx.now_ns = ingest_ns
        self.ctx.partition = partition or port
        self._emitted.clear()  # nothing left over from a call that failed half way
        value = UNDECODED if event.raw is not None and event.value is None else event.value
        push([value, event.meta or None, event.raw])
        self._wired.flush()
        return self._drain(event.origin)

    @_reading_ingest_time
    def tick(self, now_ns: int) -> list[tuple[str, Event]]:
        """Processing time reached `now_ns`: close interval windows, flush timed-out batches."""
        self.ctx.now_ns = now_ns
        self._wired.tick(now_ns)
        self._wired.flush()
        return self._drain(None)

    def next_deadline_ns(self) -> int | None:
        """The earliest time a `tick` would emit something (register a timer for it), or None."""
        return self._wired.deadline()

    def last_deadline_ns(self) -> int | None:
        """The latest pending timer: one tick at this time fires every timer pending now."""
        return self._wired.deadline(latest=True)

    def node(self, name: str) -> Any:
        """The runner of node `name`: for a caller that folds events into a node's state itself
        (see `contraflow.pipeline.spark.partial`)."""
        return self._wired.runners[name]

    def late_counts(self, nodes: list[str]) -> list[int]:
        """How many events each of `nodes` has called late so far (see `analysis.late_nodes`)."""
        runners = self._wired.runners
        return [runners[name].late_events for name in nodes]

    def outputs_of(self, action: Callable[[], None]) -> dict[str, Columns]:
        """What `action` (a call into a node, see `node`) emits, collected as `process_values`
        returns it."""
        emitted = self._emitted
        emitted.clear()
        action()
        columns: dict[str, Columns] = {}
        _collect(emitted, columns)
        return columns

    def _input(self, port: str) -> Push:
        push = self._inputs.get(port)
        if push is None:
            raise KeyError(
                f"pipeline '{self.name}' has no input port '{port}' (it has {', '.join(self._inputs)})"
            )
        return push

    def _drain(self, origin: tuple[str, int, int] | None) -> list[tuple[str, Event]]:
        emitted = self._emitted
        out = [(port, _to_event(item, origin)) for port, item in emitted]
        emitted.clear()
        return out

    # --- batches (Arrow) ------------------------------------------------------------------------

    @_reading_ingest_time
    def process_values(
        self,
        port: str,
        values: list[bytes],
        metas: list[dict[str, Any] | None] | None,
        ingest_ns: list[int] | int,
        partitions: list[str] | None = None,
    ) -> dict[str, Columns]:
        """Run a batch of channel values through input `port`; returns output port -> (values, packed metas).

        `metas` may be None (no metadata), `ingest_ns` one time for the whole
        batch or one per value, `partitions` the input partition each value was
        read from (default: all from the port). Output values are channel bytes (the input
        bytes themselves for unchanged events), metas are JSON bytes or None.
        """
        push = self._input(port)
        if self._passthrough is not None and port in self._passthrough:
            return self._route_only(port, values, metas)
        ctx = self.ctx
        ctx.partition = port
        emitted = self._emitted
        emitted.clear()
        columns: dict[str, Columns] = {}
        direct = self._direct_maps.get(port)
        if direct is not None:
            return self._map_only(direct, values, metas, ingest_ns)
        chunk = _CHUNK
        # Every event allocates containers that refcounting frees at once (values are trees, never
        # cycles); the cyclic collector would only keep rescanning the long-lived node state.
        with no_cyclic_gc():
            for start in range(0, len(values), chunk):
                end = start + chunk
                part = values[start:end]
                part_metas = metas[start:end] if metas is not None else [None] * len(part)
                if partitions is not None:
                    times = ingest_ns[start:end] if isinstance(ingest_ns, list) else [ingest_ns] * len(part)
                    for raw, meta, now, partition in zip(
                        part, part_metas, times, partitions[start:end], strict=True
                    ):
                        ctx.now_ns = now
                        ctx.partition = partition
                        push([UNDECODED, meta, raw])
                elif isinstance(ingest_ns, list):
                    for raw, meta, now in zip(part, part_metas, ingest_ns[start:end], strict=True):
                        ctx.now_ns = now
                        push([UNDECODED, meta, raw])
                else:
                    ctx.now_ns = ingest_ns
                    for raw, meta in zip(part, part_metas, strict=True):
                        push([UNDECODED, meta, raw])
                _collect(emitted, columns)
            if self._wired.batching:
                self._wired.flush()
                _collect(emitted, columns)
        return columns

    @_reading_ingest_time
    def process_values_traced(
        self, port: str, values: list[bytes], metas: list[dict[str, Any] | None] | None, ingest_ns: list[int]
    ) -> Traced:
        """`process_values` keeping the order of emission across ports and each output's source.

        Returns one flat list per column, in the order events were emitted:
        output port, channel bytes, packed meta, and the index of the input
        value the output came from (a split pipeline's prefix hands its outputs
        on with their input's position and ingest time).
        """
        push = self._input(port)
        ctx = self.ctx
        ctx.partition = port
        emitted = self._emitted
        emitted.clear()
        traced = Traced([], [], [], [])
        with no_cyclic_gc():
            for start in range(0, len(values), _CHUNK):
                end = start + _CHUNK
                part_metas = metas[start:end] if metas is not None else [None] * len(values[start:end])
                owners: list[int] = []
                for index, raw, meta, now in zip(
                    range(start, end), values[start:end], part_metas, ingest_ns[start:end], strict=False
                ):
                    ctx.now_ns = now
                    ctx.source = index
                    push([UNDECODED, meta, raw])
                    owners.extend([index] * (len(emitted) - len(owners)))
                traced.sources.extend(owners)
                traced.items.extend(item for _, item in emitted)
                _flatten(emitted, traced)
            if self._wired.batching:
                self._flush_traced(traced)
        return traced

    def _flush_traced(self, traced: Traced) -> None:
        """Flush the batching nodes, each output traced to the input its node says it came from."""
        emitted = self._emitted
        owners: list[int] = []
        current = -1

        def on_emit(source: int) -> None:
            nonlocal current
            owners.extend([current] * (len(emitted) - len(owners)))
            current = source

        self.ctx.on_emit = on_emit
        try:
            self._wired.flush()
        finally:
            self.ctx.on_emit = None
        on_emit(-1)
        traced.sources.extend(owners)
        traced.items.extend(item for _, item in emitted)
        _flatten(emitted, traced)

    def _pure_routing(self) -> dict[str, str] | None:
        """Input port -> output port when the graph only forwards events (identity nodes all the way)."""
        routes: dict[str, str] = {}
        for port in self.graph.inputs:
            push = self._inputs[port]
            target = next((out for out, sink in self._outputs.items() if push is sink), None)
            if target is None:
                return None
            routes[port] = target
        return routes

    def _direct_python_maps(self) -> dict[str, tuple[PythonMap, str]]:
        """Input port -> (its python::map, the output port it emits to) where the map is all there
        is between the two (identity nodes aside) and its errors go to an output port or nowhere:
        a batch entering there runs in the map's own loop (`PythonMap.map_values`)."""
        sinks = {push: port for port, push in self._outputs.items()}
        direct: dict[str, tuple[PythonMap, str]] = {}
        for port, push in self._inputs.items():
            runner = getattr(push, "__self__", None)
            if (
                isinstance(runner, PythonMap)
                and runner.out in sinks
                and (runner.err is drop or (runner.err in sinks and runner.err is not runner.out))
            ):
                direct[port] = (runner, sinks[runner.out])
        return direct

    def _map_only(
        self,
        direct: tuple[PythonMap, str],
        values: list[bytes],
        metas: list[dict[str, Any] | None] | None,
        ingest_ns: list[int] | int,
    ) -> dict[str, Columns]:
        """`process_values` through a lone python::map (see `_direct_python_maps`); its errors
        reach `emitted` through its `err` push as in the per-event path."""
        runner, out_port = direct
        columns: dict[str, Columns] = {}
        out: Columns = ([], [])
        if values:
            self.ctx.now_ns = ingest_ns[-1] if isinstance(ingest_ns, list) else ingest_ns
        with no_cyclic_gc():
            runner.map_values(values, metas, out)
            _collect(self._emitted, columns)
        if out[0]:
            columns[out_port] = out
        return columns

    def _route_only(
        self, port: str, values: list[bytes], metas: list[dict[str, Any] | None] | None
    ) -> dict[str, Columns]:
        assert self._passthrough is not None
        packed: list[bytes | None] = (
            [_pack_meta(m) for m in metas] if metas is not None else [None] * len(values)
        )
        return {self._passthrough[port]: (values, packed)}

    # --- state ------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Every stateful node's state by node name (None for a node holding nothing yet)."""
        with no_cyclic_gc():  # thousands of small containers: the collector would rescan the heap
            return self._wired.snapshot()

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Continue from `snapshot`; stateful nodes missing from it start empty."""
        with no_cyclic_gc():
            self._wired.restore(snapshot)

    @property
    def stateful_nodes(self) -> list[str]:
        """The nodes `snapshot()` reports, one value state each."""
        return list(self._wired.stateful_nodes)


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic collector: event values are trees that refcounting frees at once, and
    each collection would rescan the long-lived node state for nothing."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _sink(emitted: list[tuple[str, Item]], port: str) -> Push:
    """The push of output `port`: events wait in `emitted` until the caller collects them."""
    append = emitted.append

    def sink(item: Item) -> None:
        append((port, item))

    return sink


def _to_event(item: Item, origin: tuple[str, int, int] | None) -> Event:
    """An output event; an unchanged one carries only its raw bytes, so `channel_bytes()` reuses them."""
    raw = item[2]
    if raw is not None:
        return Event(None, item[1] or {}, raw, origin)
    return Event(item[0], item[1] or {}, None, origin)


def _pack_meta(meta: dict[str, Any] | None) -> bytes | None:
    return encode_value(meta) if meta else None


def _channel_bytes(item: Item) -> bytes:
    raw = item[2]
    if raw is not None:
        return raw
    try:
        return dumps(item[0])
    except TypeError:  # bytes inside: the channel's {"$bytes": ...} form
        return encode_value(item[0])


def _flatten(emitted: list[tuple[str, Item]], traced: Traced) -> None:
    """Move emitted items into `traced`'s port, value and meta columns, in order."""
    for port, item in emitted:
        traced.ports.append(port)
        traced.values.append(_channel_bytes(item))
        meta = item[1]
        traced.metas.append(_pack_meta(meta) if meta else None)
    emitted.clear()


def _collect(emitted: list[tuple[str, Item]], columns: dict[str, Columns]) -> None:
    """Move emitted items into per-port output columns (bytes and packed metadata)."""
    last_port = None
    out_values: list[bytes] = []
    out_metas: list[bytes | None] = []
    for port, item in emitted:
        if port is not last_port:
            cols = columns.get(port)
            if cols is None:
                cols = columns[port] = ([], [])
            out_values, out_metas = cols
            last_port = port
        out_values.append(_channel_bytes(item))
        meta = item[1]
        out_metas.append(_pack_meta(meta) if meta else None)
    emitted.clear()
