"""The `script` node: a compiled tremor-script with per-node `state`, `emit` to ports and `drop`.

A script that returns the event it was given, without assigning into it,
hands the item on as is (raw bytes kept). A script that writes into `event`
or `$` in place is marked `mutates`, so a fan-out gives it its own copy.
Events arriving on an extra input port (`script from ctl ...`) run that
port's body, with the same `state`.
"""

from __future__ import annotations

from typing import Any

from contraflow.lang.graph import Node, ScriptSpec
from contraflow.lang.script import ast as sast
from contraflow.lang.script.codegen import walk
from contraflow.lang.script.compiler import compile_expr, compile_script
from contraflow.pipeline.base import Context, NodeRunner, drop
from contraflow.pipeline.item import Item, opened


def assigns_into(body: Any, root: str) -> bool:
    """True when the script writes inside `root` (`let event.x = ...`), changing the value in place."""
    return any(isinstance(n, sast.Let) and n.target.root == root and n.target.segments for n in walk(body))


class ScriptRunner(NodeRunner):
    def __init__(self, node: Node, ctx: Context, path: str) -> None:
        super().__init__(node, ctx, path)
        spec = node.spec
        assert isinstance(spec, ScriptSpec)
        self.spec = spec
        self.script = compile_script(spec.body.ast, name=node.name, consts=spec.constants, fns=spec.functions)
        self.fn = self.script.fn
        self.args = spec.args
        self.stateful = node.stateful
        bodies = [spec.body.ast, *(b.ast for b in spec.port_bodies.values())]
        self.changes_event = any(assigns_into(b, "event") for b in bodies)
        self.mutates = self.changes_event or any(assigns_into(b, "meta") for b in bodies)
        self.port_scripts = {
            port: compile_script(body.ast, name=node.name, consts=spec.constants, fns=spec.functions)
            for port, body in spec.port_bodies.items()
        }
        self.locators = (self.script.locator, *(s.locator for s in self.port_scripts.values()))
        self.state: Any = self.initial_state()

    def initial_state(self) -> Any:
        """The `state` clause's value, computed once (null without one, as the pipeline-state RFC says)."""
        if self.spec.state is None:
            return None
        init = compile_expr(
            self.spec.state.ast, name=self.name, consts=self.spec.constants, fns=self.spec.functions
        )
        return init.call(None, {}, None, self.args)

    def input(self, port: str) -> Any:
        """`in` runs the main body; `script from <port>` bodies run for their own port."""
        script = self.port_scripts.get(port)
        if script is None:
            return self.push
        fn = script.fn

        def push_port(item: Item) -> None:
            self.run(item, fn)

        return push_port

    def push(self, item: Item) -> None:
        self.run(item, self.fn)

    def run(self, item: Item, fn: Any) -> None:
        try:
            event, meta = opened(item)
            result = fn(event, meta, self.state, self.args, None, None)
        except Exception as exc:  # noqa: BLE001 - a bad event becomes an error event
            self.fail(item, exc)
            return
        self.state = result.state
        if result.dropped:
            return
        value = result.event
        if value is event and not self.changes_event:
            # the same item when nothing changed; `let $ = ...` replaced the metadata: a new item, same bytes
            out = item if result.meta is meta else [event, result.meta, item[2]]
        else:
            out = [value, result.meta, None]
        port = result.port
        if port is None:
            self.out(out)
        else:
            self.outs.get(port, drop)(out)

    def snapshot(self) -> Any:
        return self.state if self.stateful else None

    def restore(self, state: Any) -> None:
        if self.stateful:
            self.state = state

    def reset(self) -> None:
        self.state = self.initial_state()
