"""The windowed stream-stream inner join (beyond Tremor): `select ... from a join b on ... within ...`.

Each side keeps its events by key. An event arriving on one side is paired,
in arrival order, with every kept event of the other side with an equal key
whose time lies within `within_ns` of its own; each pair gives one output,
once, when its second event arrives. Then the event is kept for later
arrivals on the other side.

State is bounded by a watermark, the smaller of the two sides' highest event
times (both streams must move on): a kept event older than the watermark minus
`within_ns` can meet no event that is not itself late, so it is dropped. An
arriving event that old is late: it goes to `err` (see `LateEvent`) and is
counted. A side's time is its `with time = EXPR` value, else the ingest time.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import orjson

from contraflow.lang.graph import JoinSpec, Node, PipelineGraph, SourceExpr
from contraflow.lang.script.compiler import CompiledExpr, compile_expr
from contraflow.pipeline.base import Context, NodeRunner, error_item
from contraflow.pipeline.event_time import LateEvent
from contraflow.pipeline.item import Item, opened
from contraflow.pipeline.select import check_bool

# One kept event: (time, arrival number, value).
Kept = tuple[int, int, Any]


class JoinSide:
    """One side of a join: how it computes key and time, and the events it keeps by key."""

    def __init__(self, keys: list[Callable[..., Any]], time: Callable[..., Any] | None) -> None:
        self.keys = keys
        self.time = time
        self.kept: dict[Any, list[Kept]] = {}
        self.expiry: list[tuple[int, int, Any]] = []  # (time, arrival, key): a heap, oldest first
        self.max_seen: int | None = None

    def keep(self, key: Any, kept: Kept) -> None:
        self.kept.setdefault(key, []).append(kept)
        heapq.heappush(self.expiry, (kept[0], kept[1], key))
        if self.max_seen is None or kept[0] > self.max_seen:
            self.max_seen = kept[0]

    def drop_before(self, cutoff: int) -> None:
        """Forget the events older than `cutoff`."""
        expiry = self.expiry
        while expiry and expiry[0][0] < cutoff:
            _, arrival, key = heapq.heappop(expiry)
            rest = [k for k in self.kept[key] if k[1] != arrival]
            if rest:
                self.kept[key] = rest
            else:
                del self.kept[key]

    def snapshot(self) -> Any:
        return {
            "max_seen": self.max_seen,
            "kept": [[key, [list(k) for k in kept]] for key, kept in self.kept.items()],
        }

    def restore(self, state: Any) -> None:
        self.kept, self.expiry, self.max_seen = {}, [], None
        if state is None:
            return
        for key, kept in state["kept"]:
            for time, arrival, value in kept:
                self.keep(key, (time, arrival, value))
        self.max_seen = state["max_seen"]


class JoinRunner(NodeRunner):
    """A join node: inputs `left` and `right`, pairs on `out`, late events on `err`."""

    stateful = True

    def __init__(self, node: Node, ctx: Context, path: str, graph: PipelineGraph) -> None:
        super().__init__(node, ctx, path)
        spec = node.spec
        assert isinstance(spec, JoinSpec)
        self.args = graph.args
        self.within = spec.within_ns
        compiled: list[CompiledExpr] = []

        def expr(source: SourceExpr | None) -> Callable[..., Any] | None:
            if source is None:
                return None
            done = compile_expr(source.ast, name=node.name, consts=graph.constants, fns=graph.functions)
            compiled.append(done)
            return done.fn

        self.target = expr(spec.target)
        self.where = expr(spec.where)
        self.having = expr(spec.having)
        self.sides = {
            "left": JoinSide([expr(k) for k in spec.left_keys], expr(spec.left_time)),  # type: ignore[misc]
            "right": JoinSide([expr(k) for k in spec.right_keys], expr(spec.right_time)),  # type: ignore[misc]
        }
        self.arrivals = 0
        self.late = 0
        self.locators = tuple(c.locator for c in compiled)

    def input(self, port: str) -> Callable[[Item], None]:
        side, other = ("left", "right") if port == "left" else ("right", "left")
        return lambda item: self._arrive(item, side, other)

    def watermark(self) -> int | None:
        seen = [s.max_seen for s in self.sides.values()]
        return None if None in seen else min(seen)  # type: ignore[type-var]

    def _arrive(self, item: Item, side_name: str, other_name: str) -> None:
        try:
            outputs = self._pairs(item, side_name, other_name)
        except Exception as exc:  # noqa: BLE001 - a bad event becomes an error event
            self.fail(item, exc)
            return
        for out in outputs:
            self.out(out)

    def _pairs(self, item: Item, side_name: str, other_name: str) -> list[Item]:
        event, meta = opened(item)
        side, other = self.sides[side_name], self.sides[other_name]
        args = self.args
        time = self.ctx.now_ns if side.time is None else side.time(event, meta, None, args, None, None)
        if isinstance(time, bool) or not isinstance(time, int):
            raise ValueError(f"a join side's time must be an integer (nanoseconds), got {time!r}")
        watermark = self.watermark()
        if watermark is not None and time < watermark - self.within:
            self.late += 1
            raise LateEvent(self.name, time, watermark - self.within, "join")
        values = [key(event, meta, None, args, None, None) for key in side.keys]
        key = orjson.dumps(values, option=orjson.OPT_SORT_KEYS).decode()  # JSON text: kept in the state
        outputs = []
        for other_time, _, other_event in other.kept.get(key, ()):
            if abs(time - other_time) > self.within:
                continue
            pair = {side_name: event, other_name: other_event}
            output = self._output(pair, meta)
            if output is not None:
                outputs.append(output)
        self.arrivals += 1
        side.keep(key, (time, self.arrivals, event))
        watermark = self.watermark()
        if watermark is not None:
            for kept in self.sides.values():
                kept.drop_before(watermark - self.within)
        return outputs

    def _output(self, pair: dict[str, Any], meta: dict[str, Any]) -> Item | None:
        """The select's target over the pair, if it passes `where` and `having`."""
        args = self.args
        if self.where is not None and not check_bool(self.where(pair, meta, None, args, None, None), "where"):
            return None
        assert self.target is not None
        value = self.target(pair, meta, None, args, None, None)
        if self.having is not None and not check_bool(
            self.having(value, meta, None, args, None, None), "having"
        ):
            return None
        return [value, dict(meta) if meta else None, None]

    def fail(self, item: Item, exc: BaseException) -> None:
        error = error_item(self.name, item, exc, self.locators)
        if isinstance(exc, LateEvent):
            error[0].update(exc.fields())
        self.err(error)

    def snapshot(self) -> Any:
        if self.arrivals == 0 and not self.late:
            return None
        return {
            "arrivals": self.arrivals,
            "late": self.late,
            "sides": {name: side.snapshot() for name, side in self.sides.items()},
        }

    def restore(self, state: Any) -> None:
        self.arrivals = state["arrivals"] if state else 0
        self.late = state["late"] if state else 0
        for name, side in self.sides.items():
            side.restore(state["sides"][name] if state else None)
