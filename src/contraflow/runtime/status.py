"""The live status line per flow: rates, channel depth, each source's and sink's totals, breakers.

    classify  running  in 1,204/s  out 1,198/s  depth 37  events 5,210 → classified 5,170 · counts 40  breaker closed
    classify  idle  depth 0  events 60 finished → classified 36 · counts 6 · errors 0  breaker closed
    orders  running  in 0/s  out 0/s  depth 812  ticks 2,400 → receiver 1,588  breaker OPEN: receiver connection lost: refused
    orders  running  in 5/s  out 40/s  depth 300  ticks 2,700 → receiver 2,400  breaker closed  busy: receiver 4 requests in flight

`in` is what the sources appended per second, `out` what the sinks delivered
per second (all sinks together: each sink's own total follows the arrow).
A source that reached its end says `finished`; a running flow where nothing
moved since the last line and nothing waits in a channel is `idle`. Breakers
by cause: a lost connection is `breaker OPEN` with why, a sink's first
connection `connecting`, a sink at its own concurrency limit `busy`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.text import Text

from contraflow.runtime.flow import ConnectorInstance, FlowInstance
from contraflow.runtime.hold import BreakerCause
from contraflow.runtime.sink import NOT_CONNECTED


@dataclass
class _Counts:
    at: float
    events_in: int
    events_out: int


@dataclass
class StatusBoard:
    """Turns counters into per-second rates between renders."""

    last: dict[str, _Counts] = field(default_factory=dict)

    def render(self, flows: list[FlowInstance]) -> Text:
        text = Text()
        now = time.monotonic()
        for i, flow in enumerate(flows):
            if i:
                text.append("\n")
            text.append_text(self.line(flow, now))
        return text

    def line(self, flow: FlowInstance, now: float) -> Text:
        events_in, events_out = totals(flow)
        before = self.last.get(flow.id)
        self.last[flow.id] = _Counts(now, events_in, events_out)
        elapsed = now - before.at if before else 0.0
        rate_in = (events_in - before.events_in) / elapsed if before and elapsed > 0 else 0.0
        rate_out = (events_out - before.events_out) / elapsed if before and elapsed > 0 else 0.0
        depth = sum(s.depth for s in flow.monitor.states.values()) if flow.monitor else 0
        moved = before is None or (events_in, events_out) != (before.events_in, before.events_out)
        state = "idle" if flow.state == "running" and not moved and depth == 0 else flow.state
        line = Text()
        line.append(f"{flow.id}  ", style="bold")
        line.append(state, style=_STATE_STYLE.get(state, ""))
        if state != "idle":
            line.append(f"  in {rate_in:,.0f}/s  out {rate_out:,.0f}/s")
        line.append(f"  depth {depth:,}  ")
        line.append(connector_totals(flow), style="dim")
        line.append("  ")
        line.append_text(breakers(flow))
        held = backpressured(flow)
        if held:
            line.append(f"  back-pressure: {', '.join(held)}", style="yellow")
        if flow.error:
            line.append(f"  error: {flow.error}", style="red")
        return line


_STATE_STYLE = {
    "running": "green",
    "idle": "green",
    "paused": "yellow",
    "failed": "bold red",
    "draining": "cyan",
}


def totals(flow: FlowInstance) -> tuple[int, int]:
    """(events sources appended, events sinks delivered) since the flow started."""
    events_in = events_out = 0
    for inst in flow.connectors.values():
        events_in += appended(inst)
        events_out += delivered(inst)
    return events_in, events_out


def appended(inst: ConnectorInstance) -> int:
    """Events a source connector appended to its channels (its `err` port aside)."""
    if inst.source is None:
        return 0
    counts = inst.ctx.metrics.by_port
    return sum(n[0] for port, n in counts.items() if port in inst.source.outputs and port != "err")


def delivered(inst: ConnectorInstance) -> int:
    """Events a sink connector delivered."""
    if inst.sink is None:
        return 0
    counts = inst.ctx.metrics.by_port
    return sum(counts.get(port, [0])[0] for _, _, port in inst.sink.inputs)


def connector_totals(flow: FlowInstance) -> str:
    """`events 60 finished → classified 36 · counts 6`: each source's and each sink's total."""
    sources, sinks = [], []
    for alias, inst in flow.connectors.items():
        if inst.source is not None and inst.source.outputs:
            finished = " finished" if inst.source.exhausted else ""
            sources.append(f"{alias} {appended(inst):,}{finished}")
        if inst.sink is not None and inst.sink.inputs:
            sinks.append(f"{alias} {delivered(inst):,}")
    return " · ".join(sources) + (" → " if sources and sinks else "") + " · ".join(sinks)


def breakers(flow: FlowInstance) -> Text:
    """Open breakers by cause: a lost connection is `breaker OPEN: why`; a sink making its first
    connection is `connecting`; a sink at its own capacity limit (all request slots busy, normal
    while a backlog drains) is `busy`."""
    faults, connecting, busy = {}, [], {}
    for breaker, why in flow.holds.open.items():
        if breaker.cause is BreakerCause.CAPACITY:
            busy[breaker.sink] = why
        elif why == NOT_CONNECTED:
            connecting.append(breaker.sink)
        else:
            faults[breaker.sink] = why
    parts: list[tuple[str, str]] = []
    if faults:
        why = "; ".join(f"{sink} {reason}" for sink, reason in faults.items())
        parts.append((f"breaker OPEN: {why}", "bold red"))
    elif not connecting:
        parts.append(("breaker closed", "green"))
    if connecting:
        parts.append((f"connecting: {', '.join(connecting)}", "cyan"))
    if busy:
        parts.append((f"busy: {'; '.join(f'{sink} {why}' for sink, why in busy.items())}", "yellow"))
    text = Text()
    for i, (words, style) in enumerate(parts):
        text.append(("  " if i else "") + words, style=style)
    return text


def backpressured(flow: FlowInstance) -> list[str]:
    """Channels currently stopped at their high watermark."""
    if flow.monitor is None:
        return []
    return [flow.topology.channels[t].name for t, s in flow.monitor.states.items() if s.stopped]
