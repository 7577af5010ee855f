"""The windowed stream-stream join (beyond Tremor): `select ... from a [left] join b on ... within ...`.

Each side keeps its events by key. An event arriving on one side is paired,
in arrival order, with every kept event of the other side with an equal key
whose time lies within `within_ns` of its own; each pair that passes `where`
gives one output, once, when its second event arrives. Then the event is kept
for later arrivals on the other side.

The join's watermark is the smallest, over both sides and the input partitions
feeding each, of the highest event time each partition delivered to that side,
minus `within_ns` (both streams must move on, and a partition read behind
another holds the watermark back rather than having its events called late:
see `contraflow.pipeline.watermark`; `within` is also the lateness allowed).
An arriving event older than the watermark is late: it goes to `err` (see
`LateEvent`) and is counted. Every event that is not late is at or after the
watermark, so a kept event more than `within_ns` before the watermark can meet
none of them: it leaves the state. In a `left join` a left event leaving
the state that no pair used comes out then, with `right` null (and no
metadata: the kept events hold only their values). A side's time is its
`with time = EXPR` value, else the ingest time.
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
from contraflow.pipeline.watermark import Watermark

# One kept event: (time, arrival number, value).
Kept = tuple[int, int, Any]
# What an arrival gives: (port, item) in emission order.
Emitted = list[tuple[str, Item]]


class JoinSide:
    """One side of a join: how it computes key and time, and the events it keeps by key.

    `matched` (the left side of a `left join` only) holds the arrival numbers of the kept
    events some pair used, so the others can come out unmatched when they leave."""

    def __init__(self, keys: list[Callable[..., Any]], time: Callable[..., Any] | None, outer: bool) -> None:
        self.keys = keys
        self.time = time
        self.kept: dict[Any, list[Kept]] = {}
        self.expiry: list[tuple[int, int, Any]] = []  # (time, arrival, key): a heap, oldest first
        self.matched: set[int] | None = set() if outer else None

    def keep(self, key: Any, kept: Kept) -> None:
        self.kept.setdefault(key, []).append(kept)
        heapq.heappush(self.expiry, (kept[0], kept[1], key))

    def drop_before(self, cutoff: int) -> list[Any]:
        """Forget the events older than `cutoff`; the values of those no pair used, oldest first,
        when this side tracks matches (else nothing)."""
        expiry, matched = self.expiry, self.matched
        unmatched = []
        while expiry and expiry[0][0] < cutoff:
            _, arrival, key = heapq.heappop(expiry)
            kept = self.kept[key]
            rest = [k for k in kept if k[1] != arrival]
            if rest:
                self.kept[key] = rest
            else:
                del self.kept[key]
            if matched is not None:
                if arrival in matched:
                    matched.discard(arrival)
                else:
                    unmatched.append(next(k[2] for k in kept if k[1] == arrival))
        return unmatched

    def snapshot(self) -> Any:
        state: dict[str, Any] = {
            "kept": [[key, [list(k) for k in kept]] for key, kept in self.kept.items()],
        }
        if self.matched is not None:
            state["matched"] = sorted(self.matched)
        return state

    def restore(self, state: Any) -> None:
        self.kept, self.expiry = {}, []
        self.matched = None if self.matched is None else set()
        if state is None:
            return
        for key, kept in state["kept"]:
            for time, arrival, value in kept:
                self.keep(key, (time, arrival, value))
        if self.matched is not None:
            self.matched.update(state.get("matched", ()))


class JoinRunner(NodeRunner):
    """A join node: inputs `left` and `right`, pairs (and a left join's unmatched left events) on
    `out`, late events on `err`."""

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
        left_keys = [expr(k) for k in spec.left_keys]
        right_keys = [expr(k) for k in spec.right_keys]
        self.sides = {
            "left": JoinSide(left_keys, expr(spec.left_time), spec.left_outer),  # type: ignore[arg-type]
            "right": JoinSide(right_keys, expr(spec.right_time), False),  # type: ignore[arg-type]
        }
        self.progress = Watermark(self.within, sides=2)  # side 0 left, 1 right
        self.arrivals = 0
        self.late = 0
        self.locators = tuple(c.locator for c in compiled)

    def input(self, port: str) -> Callable[[Item], None]:
        side, other = ("left", "right") if port == "left" else ("right", "left")
        return lambda item: self._arrive(item, side, other)

    def watermark(self) -> int | None:
        """See the module docstring; None until both sides had events."""
        return self.progress.mark

    def _arrive(self, item: Item, side_name: str, other_name: str) -> None:
        try:
            emitted = self._pairs(item, side_name, other_name)
        except Exception as exc:  # noqa: BLE001 - a bad event becomes an error event
            self.fail(item, exc)
            return
        for port, out in emitted:
            if port == "out":
                self.out(out)
            else:
                self.err(out)

    def _pairs(self, item: Item, side_name: str, other_name: str) -> Emitted:
        event, meta = opened(item)
        side, other = self.sides[side_name], self.sides[other_name]
        args = self.args
        time = self.ctx.now_ns if side.time is None else side.time(event, meta, None, args, None, None)
        if isinstance(time, bool) or not isinstance(time, int):
            raise ValueError(f"a join side's time must be an integer (nanoseconds), got {time!r}")
        watermark = self.watermark()
        if watermark is not None and time < watermark:
            self.late += 1
            self.progress.observe(self._side_number(side_name), self.ctx, time)
            raise LateEvent(self.name, time, watermark, "join")
        values = [key(event, meta, None, args, None, None) for key in side.keys]
        key = orjson.dumps(values, option=orjson.OPT_SORT_KEYS).decode()  # JSON text: kept in the state
        emitted: Emitted = []
        arrival = self.arrivals + 1
        used = []  # the kept events of the other side that met this one
        for other_time, other_arrival, other_event in other.kept.get(key, ()):
            if abs(time - other_time) > self.within:
                continue
            pair = {side_name: event, other_name: other_event}
            if not self._matches(pair, meta):
                continue
            used.append(other_arrival)
            output = self._output(pair, meta)
            if output is not None:
                emitted.append(("out", output))
        self.arrivals = arrival
        side.keep(key, (time, arrival, event))
        self.progress.observe(self._side_number(side_name), self.ctx, time)
        for matched, arrivals in ((side.matched, [arrival] if used else []), (other.matched, used)):
            if matched is not None:
                matched.update(arrivals)
        return emitted + self._leave()

    @staticmethod
    def _side_number(name: str) -> int:
        return 0 if name == "left" else 1

    def _leave(self) -> Emitted:
        """Drop the kept events no event on time can meet any more; a left join's unmatched left
        events among them come out."""
        watermark = self.watermark()
        if watermark is None:
            return []
        emitted: Emitted = []
        for side in self.sides.values():
            for unmatched in side.drop_before(watermark - self.within):
                emitted += self._unmatched(unmatched)
        return emitted

    def _matches(self, pair: dict[str, Any], meta: dict[str, Any]) -> bool:
        """Whether the pair passes `where` (part of the join's condition: a left join's left event
        is unmatched when no pair of it passes)."""
        where = self.where
        return where is None or check_bool(where(pair, meta, None, self.args, None, None), "where")

    def _output(self, pair: dict[str, Any], meta: dict[str, Any] | None) -> Item | None:
        """The select's target over the pair, if it passes `having`."""
        args = self.args
        meta = meta if meta is not None else {}
        assert self.target is not None
        value = self.target(pair, meta, None, args, None, None)
        if self.having is not None and not check_bool(
            self.having(value, meta, None, args, None, None), "having"
        ):
            return None
        return [value, dict(meta) if meta else None, None]

    def _unmatched(self, event: Any) -> Emitted:
        """A left join's output for a left event no pair used (`right` null), or its error."""
        try:
            output = self._output({"left": event, "right": None}, None)
        except Exception as exc:  # noqa: BLE001 - that event's output fails alone
            return [("err", error_item(self.name, [event, None, None], exc, self.locators))]
        return [("out", output)] if output is not None else []

    @property
    def late_events(self) -> int:
        return self.late

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
            "watermark": self.progress.snapshot(),
            "sides": {name: side.snapshot() for name, side in self.sides.items()},
        }

    def restore(self, state: Any) -> None:
        self.arrivals = state["arrivals"] if state else 0
        self.late = state["late"] if state else 0
        # A state written before watermarks were kept per partition holds each side's highest time.
        highest: list[int] = (
            [side["max_seen"] for side in state["sides"].values() if side.get("max_seen") is not None]
            if state
            else []
        )
        self.progress.restore(state and state.get("watermark"), min(highest) if len(highest) == 2 else None)
        for name, side in self.sides.items():
            side.restore(state["sides"][name] if state else None)
