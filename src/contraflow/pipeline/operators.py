"""The built-in operators: passthrough, debug::history, generic::counter/batch, grouper::bucket, qos::*.

The QoS operators route by what the runtime publishes for them with
`PipelineExecutor.signal(node, value)` (the contraflow-driven half lives in
the runtime): the executor only reads those values, so a pipeline behaves the
same on every Spark worker that got the same signals.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import orjson

from contraflow.lang.graph import Node, OperatorSpec
from contraflow.pipeline.base import Context, NodeError, NodeRunner, Push, drop
from contraflow.pipeline.item import Item, decode, meta_dict


class Passthrough(NodeRunner):
    """Forwards every event untouched (the wiring skips it)."""

    identity = True


class History(NodeRunner):
    """`debug::history`: appends `"evt: <op>(<ids>)"` to the metadata array `$[name]`, as Tremor does.

    A tracepoint for following events through a pipeline. `<ids>` has the shape
    of Tremor's event id, `source:stream:event`; contraflow events carry no
    Tremor id, so it is `0:0:<ingest time in ns>` (with `contraflow query
    --ingest-ns index` exactly Tremor's `0:0:0`, `0:0:1`...). A `$[name]` that is
    not an array is replaced by a new one, as in Tremor.
    """

    mutates = True

    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        super().__init__(node, ctx, path)
        config = _config(node)
        self.field = str(config["name"])
        self.prefix = f"evt: {config['op']}(0:0:"

    def push(self, item: Item) -> None:
        meta = meta_dict(item)
        entry = f"{self.prefix}{self.ctx.now_ns})"
        history = meta.get(self.field)
        if isinstance(history, list):
            history.append(entry)
        else:
            meta[self.field] = [entry]
        self.out(item)


class ValueNode(NodeRunner):
    """A node that works on decoded values: bytes that are not JSON become an error event instead."""

    def push(self, item: Item) -> None:
        try:
            value = decode(item)
        except ValueError as exc:
            self.fail(item, exc)
            return
        self.take(value, item)

    def take(self, value: Any, item: Item) -> None:
        """Handle one event's decoded `value` (`item` is the event itself)."""
        raise NotImplementedError


class Counter(ValueNode):
    """`generic::counter`: wraps each event as `{"count": n, "event": e}`, n counting from 1."""

    stateful = True

    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        super().__init__(node, ctx, path)
        self.count = 0

    def take(self, value: Any, item: Item) -> None:
        event = value
        self.count += 1
        self.out([{"count": self.count, "event": event}, item[1], None])

    def snapshot(self) -> Any:
        return {"count": self.count} if self.count else None

    def restore(self, state: Any) -> None:
        self.count = state["count"] if state else 0


class Batch(ValueNode):
    """`generic::batch`: collects `count` events into one array event; `timeout` (ns) flushes early.

    The timeout runs from the first event of a batch, checked on each event and on ticks.
    """

    stateful = True

    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        super().__init__(node, ctx, path)
        config = _config(node)
        self.size = int(config["count"])
        timeout = config.get("timeout")
        self.timeout_ns = int(timeout) if timeout is not None else None
        self.values: list[Any] = []
        self.first_ns: int | None = None

    def take(self, value: Any, item: Item) -> None:
        if not self.values:
            self.first_ns = self.ctx.now_ns
        self.values.append(value)
        if len(self.values) >= self.size or self._timed_out(self.ctx.now_ns):
            self._flush()

    def _timed_out(self, now_ns: int) -> bool:
        return (
            self.timeout_ns is not None
            and self.first_ns is not None
            and now_ns - self.first_ns >= self.timeout_ns
        )

    def _flush(self) -> None:
        values, self.values, self.first_ns = self.values, [], None
        self.out([values, None, None])

    def tick(self, now_ns: int) -> None:
        if self.values and self._timed_out(now_ns):
            self._flush()

    def deadline(self, latest: bool = False) -> int | None:
        if self.values and self.timeout_ns is not None and self.first_ns is not None:
            return self.first_ns + self.timeout_ns
        return None

    def snapshot(self) -> Any:
        return {"events": self.values, "first_ns": self.first_ns} if self.values else None

    def restore(self, state: Any) -> None:
        self.values = list(state["events"]) if state else []
        self.first_ns = state["first_ns"] if state else None


class RateWindow:
    """A sliding window of `slots` buckets over `range_ns`: at most `rate` events in any range."""

    __slots__ = ("rate", "slot_ns", "counts", "slot", "total")

    def __init__(self, rate: int, range_ns: int, slots: int) -> None:
        self.rate = rate
        self.slot_ns = max(1, range_ns // slots)
        self.counts = [0] * slots
        self.slot = 0
        self.total = 0

    def admit(self, now_ns: int) -> bool:
        """Count an event at `now_ns` if the window has room; False when the rate is exhausted."""
        slot = now_ns // self.slot_ns
        counts = self.counts
        if slot > self.slot:
            for s in range(self.slot + 1, min(slot, self.slot + len(counts)) + 1):
                i = s % len(counts)
                self.total -= counts[i]
                counts[i] = 0
            self.slot = slot
        if self.total >= self.rate:
            return False
        counts[slot % len(counts)] += 1
        self.total += 1
        return True

    def snapshot(self) -> list[Any]:
        return [self.rate, self.slot_ns, self.slot, self.counts]

    @classmethod
    def restore(cls, data: list[Any]) -> RateWindow:
        rate, slot_ns, slot, counts = data
        window = cls(rate, slot_ns * len(counts), len(counts))
        window.slot_ns, window.slot, window.counts, window.total = slot_ns, slot, list(counts), sum(counts)
        return window


class BucketClass:
    """One `$class` of grouper::bucket: an LRU of rate windows per `$dimensions`, pass/overflow counts."""

    __slots__ = ("cardinality", "windows", "passed", "overflowed")

    def __init__(self, cardinality: int) -> None:
        self.cardinality = cardinality
        self.windows: OrderedDict[str, RateWindow] = OrderedDict()
        self.passed = 0
        self.overflowed = 0


class Overflowing(NodeRunner):
    """A node with an `overflow` port besides `out` (dropped when nothing is connected to it)."""

    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        super().__init__(node, ctx, path)
        self.overflow: Push = drop

    def connect(self, outs: dict[str, Any]) -> None:
        super().connect(outs)
        self.overflow = outs.get("overflow", drop)


class _Unbucketed(Exception):
    """The event names no bucket (no `$class`) or no rate for a new one: it goes to `err` as it is."""


class Bucket(Overflowing):
    """`grouper::bucket`: per-class rate limiting by metadata, as Tremor's bucket grouper.

    `$class` names the bucket, `$rate` the events allowed per `$time_range` ms
    (default 1000, in `$windows` slots, default 100), `$dimensions` splits a
    class into independent limits, and `$cardinality` (default 1000) caps how
    many dimension values a class remembers (least recently used go first).
    Events over the limit leave on `overflow`. An event without a string
    `$class`, or without a `$rate` for a new dimension, leaves on `err` as it
    is (Tremor's bucket routes the event itself there, not an error record).
    """

    stateful = True

    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        super().__init__(node, ctx, path)
        self.classes: dict[str, BucketClass] = {}

    def push(self, item: Item) -> None:
        meta = item[1] or {}
        try:
            window = self._window(meta)
        except _Unbucketed:
            self.err(item)
            return
        except NodeError as exc:
            self.fail(item, exc)
            return
        bucket = self.classes[meta["class"]]
        if window.admit(self.ctx.now_ns):
            bucket.passed += 1
            self.out(item)
        else:
            bucket.overflowed += 1
            self.overflow(item)

    def _window(self, meta: dict[str, Any]) -> RateWindow:
        cls = meta.get("class")
        if not isinstance(cls, str):
            raise _Unbucketed
        bucket = self.classes.get(cls)
        if bucket is None:
            cardinality = meta.get("cardinality", 1000)
            bucket = self.classes[cls] = BucketClass(_positive(cardinality, "$cardinality"))
        key = orjson.dumps(meta.get("dimensions"), option=orjson.OPT_SORT_KEYS).decode()
        window = bucket.windows.get(key)
        if window is None:
            rate = meta.get("rate")
            if isinstance(rate, bool) or not isinstance(rate, int) or rate < 0:
                raise _Unbucketed
            time_range = _positive(meta.get("time_range", 1000), "$time_range")
            slots = _positive(meta.get("windows", 100), "$windows")
            window = RateWindow(rate, time_range * 1_000_000, slots)
            bucket.windows[key] = window
            if len(bucket.windows) > bucket.cardinality:
                bucket.windows.popitem(last=False)
        else:
            bucket.windows.move_to_end(key)
        return window

    def snapshot(self) -> Any:
        if not self.classes:
            return None
        return {
            name: {
                "cardinality": b.cardinality,
                "pass": b.passed,
                "overflow": b.overflowed,
                "windows": [[key, w.snapshot()] for key, w in b.windows.items()],
            }
            for name, b in self.classes.items()
        }

    def restore(self, state: Any) -> None:
        self.classes = {}
        for name, data in (state or {}).items():
            bucket = BucketClass(data["cardinality"])
            bucket.passed, bucket.overflowed = data["pass"], data["overflow"]
            for key, window in data["windows"]:
                bucket.windows[key] = RateWindow.restore(window)
            self.classes[name] = bucket


class RoundRobin(NodeRunner):
    """`qos::roundrobin`: each event goes to the next of `outputs`, skipping unavailable ones.

    The runtime marks outputs unavailable with `signal(node, {"unavailable": [port, ...]})`
    (a sink behind them opened its circuit breaker); when none is left the event is an error.
    """

    stateful = True

    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        super().__init__(node, ctx, path)
        self.ports = [p for p in node.outputs if p != "err"]
        self.next = 0
        self.pushes: list[Any] = []

    def connect(self, outs: dict[str, Any]) -> None:
        super().connect(outs)
        self.pushes = [outs.get(p, drop) for p in self.ports]

    def push(self, item: Item) -> None:
        signal = self.ctx.signals.get(self.path)
        if not signal:  # every output available: plain rotation
            i = self.next
            self.next = (i + 1) % len(self.pushes)
            self.pushes[i](item)
            return
        down = set(signal.get("unavailable", ())) if isinstance(signal, dict) else set()
        n = len(self.ports)
        for step in range(n):
            i = (self.next + step) % n
            if self.ports[i] not in down:
                self.next = (i + 1) % n
                self.pushes[i](item)
                return
        self.fail(item, NodeError("qos::roundrobin has no available output"))

    def snapshot(self) -> Any:
        return {"next": self.next} if self.next else None

    def restore(self, state: Any) -> None:
        self.next = state["next"] if state else 0


class Backpressure(Overflowing):
    """`qos::backpressure`: while the runtime reports a back-off, events go to `overflow`.

    The runtime publishes `signal(node, {"backoff_until_ns": t})` from downstream
    latency and failures (Tremor's steps and timeout); events ingested before `t`
    overflow with method "discard" (default) and pass with method "pause", where
    the runtime pauses the sources instead.
    """

    stateful = True

    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        super().__init__(node, ctx, path)
        self.discard = _config(node).get("method", "discard") != "pause"

    def push(self, item: Item) -> None:
        signal = self.ctx.signals.get(self.path)
        until = signal.get("backoff_until_ns", 0) if isinstance(signal, dict) else 0
        if self.discard and self.ctx.now_ns < until:
            self.overflow(item)
        else:
            self.out(item)


class Percentile(Overflowing):
    """`qos::percentile`: passes the fraction `perc` the runtime publishes, the rest overflows.

    `signal(node, {"perc": p})` (0..1, default 1). The split is deterministic
    (error diffusion instead of Tremor's random draw): of every run of events,
    exactly round(p * n) pass, evenly spread.
    """

    stateful = True

    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        super().__init__(node, ctx, path)
        self.credit = 0.0

    def push(self, item: Item) -> None:
        signal = self.ctx.signals.get(self.path)
        perc = float(signal.get("perc", 1.0)) if isinstance(signal, dict) else 1.0
        self.credit += perc
        if self.credit >= 1.0 - 1e-9:
            self.credit -= 1.0
            self.out(item)
        else:
            self.overflow(item)

    def snapshot(self) -> Any:
        return {"credit": self.credit} if self.credit else None

    def restore(self, state: Any) -> None:
        self.credit = state["credit"] if state else 0.0


OPERATORS: dict[str, type[NodeRunner]] = {
    "passthrough": Passthrough,
    "debug::history": History,
    "generic::counter": Counter,
    "generic::batch": Batch,
    "grouper::bucket": Bucket,
    "qos::roundrobin": RoundRobin,
    "qos::backpressure": Backpressure,
    "qos::percentile": Percentile,
}


def _config(node: Node) -> dict[str, Any]:
    assert isinstance(node.spec, OperatorSpec)
    return node.spec.config


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise NodeError(f"grouper::bucket needs a positive integer `{name}`, got {value!r}")
    return value
