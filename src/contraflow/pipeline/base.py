"""What every node runner shares: the push-function wiring, the executor context, error events.

Nodes are wired once into plain closures: a node's output port is a function
that pushes an `Item` into the next node (or appends it to the executor's
output), so running a pipeline is a chain of direct calls with no graph walk
and no queue per event. Events leave depth first, in the order they are made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from contraflow.lang.errors import ScriptRuntimeError
from contraflow.lang.graph import Node
from contraflow.lang.script.locate import Locator
from contraflow.pipeline.item import Item, original

Push = Callable[[Item], None]


def drop(item: Item) -> None:
    """The push of a port nothing is connected to."""


class Context:
    """State shared by every node of one executor (nested pipelines included).

    `now_ns` is the ingest time of the event being processed (or the tick time);
    `signals` holds what the runtime publishes for QoS operators, keyed by node path.
    `source` is the input position the event being pushed came from, where the caller traces
    outputs to inputs (`process_values_traced`); `on_emit` is then told whenever a batching node
    pushes an output of another input (see `emit_from`).
    `partition` names the input partition the event being processed was read from (on Spark
    topic/partition, else the input port): watermarks follow each one's progress
    (see `contraflow.pipeline.watermark`).
    """

    __slots__ = ("now_ns", "signals", "source", "on_emit", "partition")

    def __init__(self) -> None:
        self.now_ns = 0
        self.signals: dict[str, Any] = {}
        self.source = -1
        self.on_emit: Callable[[int], None] | None = None
        self.partition = ""

    def emit_from(self, source: int) -> None:
        """A batching node is about to push an output that came from input position `source`."""
        self.source = source
        if self.on_emit is not None:
            self.on_emit(source)


class NodeRunner:
    """One pipeline node at run time. Subclasses override `push` (or `input`) and the state hooks."""

    stateful = False
    # True when every event leaves on `out` untouched: the wiring then skips the node entirely.
    identity = False
    # True when the node may change an event's value or metadata in place (fan-out then copies).
    mutates = False
    # True when the node collects what is pushed and emits only on `flush` (python::batch): the
    # executor flushes such nodes, in graph order, after each call's events.
    batching = False

    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        self.name = node.name
        self.path = path
        self.ctx = ctx
        self.outs: dict[str, Push] = {}
        self.out: Push = drop
        self.err: Push = drop

    def connect(self, outs: dict[str, Push]) -> None:
        """Receive the push function of each output port (ports without edges get `drop`)."""
        self.outs = outs
        self.out = outs.get("out", drop)
        self.err = outs.get("err", drop)

    def input(self, port: str) -> Push:
        """The push function for input `port` (single-input nodes have just `push`)."""
        return self.push

    def push(self, item: Item) -> None:
        self.out(item)

    def tick(self, now_ns: int) -> None:
        """Processing time advanced to `now_ns` (interval windows, batch timeouts)."""

    def deadline(self, latest: bool = False) -> int | None:
        """The earliest (or with `latest`, the last) pending timer of this node, if any."""
        return None

    def flush(self) -> None:
        """Emit what a batching node collected (the end of the executor's call)."""

    def snapshot(self) -> Any:
        """The node's whole state as JSON-ready values; None when it holds nothing (the RFC's null)."""
        return None

    def restore(self, state: Any) -> None:
        """Replace the node's state with a `snapshot()` result."""

    def reset(self) -> None:
        """Back to the state of a node that has seen no event."""
        self.restore(None)

    @property
    def late_events(self) -> int:
        """Events this node has called late (behind a watermark) so far; part of its state."""
        return 0

    # The compiled expressions of this node, to map an exception back to its source position.
    locators: tuple[Locator, ...] = ()

    def fail(self, item: Item, exc: BaseException) -> None:
        """Turn a failure on `item` into an event on this node's `err` port; never raises."""
        self.err(error_item(self.name, item, exc, self.locators))


def locate(exc: BaseException, locators: tuple[Locator, ...]) -> BaseException:
    """The located ScriptRuntimeError for an exception raised in one of `locators`' generated code."""
    if isinstance(exc, ScriptRuntimeError) and exc.position is not None:
        if exc.source is None:  # located by a window or an operator: quote the line if we have it
            exc.source = next(
                (loc.source for loc in locators if loc.source and loc.source.name == exc.position.file), None
            )
        return exc
    files = set()
    tb = exc.__traceback__
    while tb is not None:
        files.add(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    for locator in locators:
        if locator.filename in files:
            return locator.error(exc)
    return exc


def error_item(node: str, item: Item, exc: BaseException, locators: tuple[Locator, ...] = ()) -> Item:
    """`{"error", "node", "position", "event"}` for a failed event, metadata kept.

    Tremor's `err` shape is `{"error", "event"}`, `error` being the rendered message (for a
    script error: `file:line:col: message`, the source line and a caret); `node` and
    `position` are contraflow's additions. Every `err` event of a pipeline is built here."""
    if isinstance(exc, orjson.JSONDecodeError):
        message, position = f"invalid JSON: {exc}", None
    else:
        err = locate(exc, locators)
        if isinstance(err, ScriptRuntimeError):
            message, position = err.render(), (str(err.position) if err.position else None)
        else:
            message, position = str(err) or type(err).__name__, None
    value = {"error": message, "node": node, "position": position, "event": original(item)}
    return [value, item[1], None]


class NodeError(Exception):
    """A run-time failure of an operator (bad configuration for an event, missing metadata)."""
