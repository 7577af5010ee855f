"""Reporting single events of a batch that cannot be delivered, without failing the whole batch.

A reply for a TCP connection that closed, or for an HTTP request nobody waits
for any more, can never be delivered, while the other events of the same
batch can. Raising `DeliveryFailed` would send the whole batch to `err`
(including what was delivered). Connectors that are also sources instead
deliver what they can and emit one error event per undeliverable event on
their own `err` port, shaped like the runtime's error events:
`{"error": reason, "connector": "<flow>/<alias>", "event": <value>}` with the
event's metadata.
"""

from __future__ import annotations

from contraflow.connectors.base import ConnectorContext, SinkEvent, SourceData
from contraflow.connectors.base.inbox import Inbox


def report_undelivered(ctx: ConnectorContext, inbox: Inbox, reason: str, event: SinkEvent) -> None:
    """Queue an error event for `err`; if the queue is full, log it (a sink must not wait on its source)."""
    ctx.metrics.count("in", 0, 0, errors=1)
    try:
        value = event.value()
    except ValueError:
        value = event.raw.decode("utf-8", "replace")
    error = {"error": reason, "connector": ctx.name, "event": value}
    if "err" not in ctx.outputs or not inbox.put_nowait(
        SourceData(events=[(error, dict(event.meta))], port="err")
    ):
        ctx.logger.error("undeliverable event (%s): %s", reason, event.raw[:200])
