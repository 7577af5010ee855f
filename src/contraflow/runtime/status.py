"""The live status line per flow: events in/out per second, channel depth, breaker state and why.

    classify  running  in 1,204/s  out 1,198/s  depth 37  breaker closed
    classify  running  in 0/s  out 0/s  depth 812  breaker OPEN: classified connection lost: refused

`in` counts events sources appended, `out` events sinks delivered; rates are
over the interval between two renders.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.text import Text

from contraflow.runtime.flow import FlowInstance


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
        line = Text()
        line.append(f"{flow.id}  ", style="bold")
        line.append(f"{flow.state:<8}", style=_STATE_STYLE.get(flow.state, ""))
        line.append(f"  in {rate_in:,.0f}/s  out {rate_out:,.0f}/s  depth {depth:,}  ")
        line.append(f"[{events_in:,} in, {events_out:,} out]  ", style="dim")
        if flow.breakers:
            why = "; ".join(f"{sink} {reason}" for sink, reason in flow.breakers.items())
            line.append(f"breaker OPEN: {why}", style="bold red")
        else:
            line.append("breaker closed", style="green")
        held = backpressured(flow)
        if held:
            line.append(f"  back-pressure: {', '.join(held)}", style="yellow")
        if flow.error:
            line.append(f"  error: {flow.error}", style="red")
        return line


_STATE_STYLE = {"running": "green", "paused": "yellow", "failed": "bold red", "draining": "cyan"}


def totals(flow: FlowInstance) -> tuple[int, int]:
    """(events sources appended, events sinks delivered) since the flow started."""
    events_in = events_out = 0
    for inst in flow.connectors.values():
        counts = inst.ctx.metrics.by_port
        if inst.source is not None:
            events_in += sum(
                n[0] for port, n in counts.items() if port in inst.source.outputs and port != "err"
            )
        if inst.sink is not None:
            events_out += sum(counts.get(port, [0])[0] for _, _, port in inst.sink.inputs)
    return events_in, events_out


def backpressured(flow: FlowInstance) -> list[str]:
    """Channels currently stopped at their high watermark."""
    if flow.monitor is None:
        return []
    return [flow.topology.channels[t].name for t, s in flow.monitor.states.items() if s.stopped]
