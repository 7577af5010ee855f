"""A source connector's loop: wait for the gate, pull, decode, append to the channel topics.

The gate closes for pause, for back-pressure on an output channel, for an
open circuit breaker of any sink downstream, and until every reachable sink
is connected (controlled start). Appends go through the flow's
`AsyncProducer`; acknowledging sources get their tokens tracked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from contraflow.connectors.base import ConnectionLost, Connector, SourceData
from contraflow.events import Event
from contraflow.runtime.acks import AckTracker
from contraflow.runtime.connection import SharedConnect
from contraflow.runtime.gate import Gate
from contraflow.runtime.wire import Decoded, SourceDecoder
from contraflow.spu.client import AsyncProducer

log = logging.getLogger("contraflow.runtime.source")


class SourceRunner:
    """Runs the source side of one connector until it is exhausted or the flow quiesces."""

    def __init__(
        self,
        connector: Connector,
        outputs: dict[str, str],
        producer: AsyncProducer,
        gate: Gate,
        acks: AckTracker | None,
        metrics: Any,
        connect: SharedConnect,
    ) -> None:
        self.connector = connector
        self.ctx = connector.ctx
        self.outputs = outputs  # port -> channel topic
        self.producer = producer
        self.gate = gate
        self.acks = acks
        self.metrics = metrics
        self.connect = connect
        self.decoder = SourceDecoder(self.ctx, connector.structured)
        self.exhausted = False
        self.stopped = asyncio.Event()

    async def run(self) -> None:
        try:
            await self._loop()
        finally:
            await self.producer.flush()
            self.stopped.set()

    async def _loop(self) -> None:
        quiescing = self.ctx.quiescing
        while not quiescing.is_set():
            if await _until(self.gate.wait(), quiescing) is STOPPED:
                break
            try:
                pulled = await _until(self.connector.pull(), quiescing)
            except ConnectionLost as err:
                if not await self.reconnect(str(err)):
                    break
                continue
            if pulled is STOPPED:
                break
            if pulled is None:
                self.exhausted = True
                await self._append(self.decoder.finish(), None)
                log.info("%s: source exhausted", self.ctx.name)
                break
            assert isinstance(pulled, SourceData)
            await self._append(self.decoder.decode(pulled), pulled.token)
            await asyncio.sleep(0)  # cooperative yield: one pull never starves the loop

    async def reconnect(self, why: str) -> bool:
        """The outside end went away: reconnect (shared with the sink side of the same connector)."""
        log.warning("%s: %s; reconnecting", self.ctx.name, why)
        result = await _until(self.connect(), self.ctx.quiescing)
        return result is True

    async def _append(self, decoded: Decoded, token: Any) -> None:
        appends: dict[str, asyncio.Future[int]] = {}
        for record in (*decoded.records, *decoded.errors):
            topic = self.outputs.get(record.port)
            size = len(record.value)
            if record.port == "err":
                self.metrics.connector_errors(self.ctx.flow_id, self.ctx.alias, "out")
            if topic is None:
                if record.port == "err":
                    log.warning("%s: %s (err port not connected)", self.ctx.name, record.value.decode())
                continue
            headers = Event(None, record.meta).headers() or None
            appends[topic] = await self.producer.send(topic, 0, record.value, headers=headers)
            self.metrics.connector_events(self.ctx.flow_id, self.ctx.alias, record.port, 1, size)
            self.ctx.metrics.count(record.port, 1, size)
        if self.acks is not None and token is not None:
            self.acks.track(token, appends)


STOPPED = object()


async def _until(work: Any, stop: asyncio.Event) -> Any:
    """Await `work` unless `stop` is set first (then cancel it and return STOPPED)."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    return STOPPED
