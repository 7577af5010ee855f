"""The `select` node: where, group by, target (windowed or not), having.

`select event from in where ... into out` hands the incoming item on as is, so
its raw bytes leave untouched; any other target builds a new value. A select
with no clause but `select event` is an identity node the wiring skips.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contraflow.lang.graph import Node, PipelineGraph, SelectSpec
from contraflow.lang.script import ast as sast
from contraflow.lang.script.codegen import walk
from contraflow.lang.script.compiler import CompiledExpr, compile_expr, compile_select
from contraflow.pipeline.base import Context, NodeRunner, error_item
from contraflow.pipeline.event_time import LateEvent, WatermarkWindows, watermark_windows
from contraflow.pipeline.grouping import NO_GROUP, GroupFn, compile_group, script_group
from contraflow.pipeline.item import Item, opened
from contraflow.pipeline.windows import Emitted, Windows


class ClauseError(Exception):
    """`where`/`having` evaluated to something other than a boolean."""


def is_bare_event(expr: Any) -> bool:
    """True for the expression `event` itself (no path segments)."""
    return isinstance(expr, sast.Path) and expr.root == "event" and not expr.segments


def reads_group(tree: Any) -> bool:
    """Whether an expression reads `group` anywhere."""
    return any(isinstance(n, sast.Path) and n.root == "group" for n in walk(tree))


def check_bool(value: Any, clause: str) -> bool:
    if value is True or value is False:
        return value
    raise ClauseError(f"`{clause}` must evaluate to a boolean, got {type(value).__name__}")


class SelectRunner(NodeRunner):
    def __init__(self, node: Node, ctx: Context, path: str, graph: PipelineGraph) -> None:
        super().__init__(node, ctx, path)
        spec = node.spec
        assert isinstance(spec, SelectSpec)
        self.args = graph.args
        self.passes_item = is_bare_event(spec.target.ast) and not spec.windows
        self.identity = (
            self.passes_item and spec.where is None and spec.having is None and spec.group_by is None
        )

        def expr(e: Any) -> CompiledExpr:
            return compile_expr(e.ast, name=node.name, consts=graph.constants, fns=graph.functions)

        self.where = expr(spec.where) if spec.where is not None else None
        self.having = expr(spec.having) if spec.having is not None else None
        self.groups: GroupFn | None = None
        # `group by <expr>` (the common case) skips the general group machinery: one group, `[value]`.
        self.group_expr: Any = None
        locators = [c.locator for c in (self.where, self.having) if c is not None]
        if spec.group_by is not None and spec.group_by.mode == "expr":
            single = expr(spec.group_by.expr)
            self.group_expr = single.fn
            locators.append(single.locator)
        elif spec.group_by is not None:
            self.groups, group_exprs = compile_group(spec.group_by, graph, node.name)
            locators += [g.locator for g in group_exprs]
        self.windows: Windows | None = None
        if spec.windows:
            selected = compile_select(
                spec.target.ast, name=node.name, consts=graph.constants, fns=graph.functions
            )
            self.windows = watermark_windows(spec.windows, selected, graph, node.name, ctx)
            self.stateful = True
            locators += [selected.locator, *self.windows.locators]
            self.target_fn = None
        else:
            target = expr(spec.target)
            locators.append(target.locator)
            self.target_fn = target.fn
        # Building Tremor's `group` value (dimensions + their JSON) only pays when a script reads it.
        self.sees_group = any(e is not None and reads_group(e.ast) for e in (spec.target, spec.having))
        # ... and in a function's arguments, where aggregate arguments are (the Spark fold reads this)
        self.calls_see_group = self.sees_group and any(
            isinstance(n, sast.Call) and any(reads_group(a) for a in n.args) for n in walk(spec.target.ast)
        )
        self.where_fn = self.where.fn if self.where is not None else None
        self.having_fn = self.having.fn if self.having is not None else None
        self.locators = tuple(locators)

        # The shape of this select, chosen once: which step makes the outputs of an admitted event.
        if self.windows is not None:
            self._outputs = self._windowed
        elif self.groups is None and self.group_expr is None:
            self._outputs = self._ungrouped
        else:
            self._outputs = self._grouped

    def push(self, item: Item) -> None:
        """Filter by `where`; the select's shape (ungrouped, grouped, windowed) makes the outputs."""
        try:
            event, meta = opened(item)
            where = self.where_fn
            if where is not None:
                keep = where(event, meta, None, self.args, None, None)
                if keep is not True and not check_bool(keep, "where"):
                    return
            outputs = self._outputs(item, event, meta)
        except Exception as exc:  # noqa: BLE001 - a bad event becomes an error event
            self.fail(item, exc)
            return
        for out in outputs:
            self.out(out)

    def _ungrouped(self, item: Item, event: Any, meta: dict[str, Any]) -> Sequence[Item]:
        """The common case, kept to a few direct calls: no window, no grouping."""
        if self.passes_item and self.having_fn is None:
            return (item,)
        args = self.args
        target = self.target_fn
        assert target is not None
        value = target(event, meta, None, args, NO_GROUP, None)
        having = self.having_fn
        if having is not None and not check_bool(having(value, meta, None, args, NO_GROUP, None), "having"):
            return ()
        return (item if self.passes_item else [value, meta, None],)

    def _windowed(self, item: Item, event: Any, meta: dict[str, Any]) -> Sequence[Item]:
        """Feed the event's groups to their windows; the outputs are what the windows closed."""
        windows = self.windows
        assert windows is not None
        args = self.args
        now = self.ctx.now_ns
        emitted: Emitted = []
        if self.group_expr is not None:
            windows.on_event(
                [self.group_expr(event, meta, None, args, None, None)], event, meta, now, emitted
            )
        elif self.groups is not None:
            for dims in self.groups(event, meta, args):
                windows.on_event(dims, event, meta, now, emitted)
        else:
            windows.on_event(None, event, meta, now, emitted)
        return self._having(emitted, meta) if emitted else ()

    def step_group(self, key: Any, time: int, now_ns: int, meta: dict[str, Any]) -> None:
        """An event of existing group `key` at window time `time`, seen only by its clock: it may
        close the group's window, and the outputs go on as an event's would (see
        `Windows.step_without_event`; the caller adds the event to the window itself)."""
        windows = self.windows
        assert windows is not None
        emitted: Emitted = []
        windows.step_without_event(windows.groups[key], time, now_ns, meta, emitted)
        for out in self._having(emitted, meta) if emitted else ():
            self.out(out)

    def _grouped(self, item: Item, event: Any, meta: dict[str, Any]) -> Sequence[Item]:
        """Grouped select without windows: one output per group."""
        if self.group_expr is not None:
            groups = [[self.group_expr(event, meta, None, self.args, None, None)]]
        else:
            assert self.groups is not None
            groups = self.groups(event, meta, self.args)
        return self._plain(groups, item, event, meta)

    def _plain(self, groups: list[Any], item: Item, event: Any, meta: dict[str, Any]) -> list[Item]:
        outputs: list[Item] = []
        target, having, args = self.target_fn, self.having_fn, self.args
        assert target is not None
        for dims in groups:
            group = script_group(dims) if self.sees_group else dims
            value = target(event, meta, None, args, group, None)
            if having is not None and not check_bool(having(value, meta, None, args, group, None), "having"):
                continue
            if self.passes_item and not outputs:
                outputs.append(item)
            else:
                outputs.append([value, meta if not outputs else dict(meta), None])
        return outputs

    def _having(self, emitted: Emitted, meta: dict[str, Any] | None) -> list[Item]:
        having, args = self.having_fn, self.args
        outputs = []
        for value, group, window in emitted:
            if having is not None and not check_bool(
                having(value, meta or {}, None, args, group, window), "having"
            ):
                continue
            outputs.append([value, dict(meta) if meta else None, None])
        return outputs

    @property
    def late_events(self) -> int:
        return self.windows.late if isinstance(self.windows, WatermarkWindows) else 0

    def fail(self, item: Item, exc: BaseException) -> None:
        """A late event's error also names its window, the watermark and its time."""
        if not isinstance(exc, LateEvent):
            super().fail(item, exc)
            return
        error = error_item(self.name, item, exc, self.locators)
        error[0].update(exc.fields())
        self.err(error)

    def tick(self, now_ns: int) -> None:
        if self.windows is None:
            return
        try:
            outputs = self._having(self.windows.tick(now_ns), None)
        except Exception as exc:  # noqa: BLE001
            self.fail([None, None, None], exc)
            return
        for out in outputs:
            self.out(out)

    def deadline(self, latest: bool = False) -> int | None:
        return self.windows.deadline(latest) if self.windows is not None else None

    def snapshot(self) -> Any:
        return self.windows.snapshot() if self.windows is not None else None

    def restore(self, state: Any) -> None:
        if self.windows is not None:
            self.windows.restore(state)
