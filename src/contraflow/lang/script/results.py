"""What compiled tremor-script hands back: results, the expression environment, aggregate calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from contraflow.lang.errors import Position
from contraflow.lang.script.aggr import Aggregate

if TYPE_CHECKING:
    from contraflow.lang.script.compiler import CompiledExpr


@dataclass(slots=True)
class ScriptResult:
    """What one run of a script produced.

    `port` is None for the default output (`out`), or the port named by
    `emit ... => "port"`. `event` is the emitted value (the value of the last
    expression when the script ends without `emit`); `dropped` is true after `drop`.
    """

    port: str | None
    event: Any
    dropped: bool
    state: Any
    meta: Any


class Env:
    """What a script or expression sees: the event, its metadata, state, args, group, window.

    The one place these six slots are spelled, with their defaults: compiled
    scripts, expressions and selects and the interpreter take `Env`'s arguments
    (by position or by name) and hand `slots()` to the code.
    """

    __slots__ = ("event", "meta", "state", "args", "group", "window")

    def __init__(
        self,
        event: Any = None,
        meta: Any = None,
        state: Any = None,
        args: Any = None,
        group: Any = None,
        window: Any = None,
    ) -> None:
        self.event = event
        self.meta = meta if meta is not None else {}
        self.state = state
        self.args = args if args is not None else {}
        self.group = group
        self.window = window

    def slots(self) -> tuple[Any, Any, Any, Any, Any, Any]:
        """The slots in the order generated code takes them."""
        return (self.event, self.meta, self.state, self.args, self.group, self.window)


@dataclass
class AggregateCall:
    """One aggregate call in a windowed select's target: which aggregate, and its argument expressions."""

    name: str
    cls: type[Aggregate]
    args: list[CompiledExpr]
    position: Position
    # The arguments as parsed (the columnar fold lowers them: `contraflow.pipeline.spark.columnar_fold`).
    arg_nodes: tuple[Any, ...] = ()
