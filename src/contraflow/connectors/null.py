"""`null`: a sink that discards every event and a source that never produces one (Tremor's `null`).

Useful to terminate a flow branch or to measure a pipeline without output cost.
The source side waits until the flow quiesces, so it never spins.
"""

from __future__ import annotations

from collections.abc import Sequence

from contraflow.connectors.base import Connector, SinkEvent, SourceData, register


@register("null")
class NullConnector(Connector):
    async def pull(self) -> SourceData | None:
        await self.ctx.quiescing.wait()
        return None

    async def send(self, events: Sequence[SinkEvent]) -> None:
        """Accept and forget: the runtime commits the channel offset right after."""
