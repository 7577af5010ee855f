"""A source connector's loop: wait for the gate, pull, decode, append to the channel topics.

The gate closes for pause, for back-pressure on an output channel, for an
open circuit breaker of any sink downstream, and until every reachable sink
is connected (controlled start). Appends go through the flow's
`AsyncProducer`; acknowledging sources get their tokens tracked.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

import orjson

from contraflow.connectors.base import ConnectionLost, Connector, SourceData
from contraflow.events import Event
from contraflow.runtime.acks import AckTracker
from contraflow.runtime.appends import ColumnRuns
from contraflow.runtime.connection import SharedConnect
from contraflow.runtime.disk_full import DiskFullBreaker
from contraflow.runtime.gate import Gate
from contraflow.runtime.metrics import RuntimeMetrics
from contraflow.runtime.priority import YieldBudget
from contraflow.runtime.wire import Decoded, Run, SourceDecoder
from contraflow.spu.client import AsyncProducer, AsyncSpuClient
from contraflow.stopping import STOPPED, unless_stopped

log = logging.getLogger("contraflow.runtime.source")


class SourceRunner:
    """Runs the source side of one connector until it is exhausted or the flow quiesces."""

    def __init__(
        self,
        connector: Connector,
        outputs: dict[str, str],
        client: AsyncSpuClient,
        producer: AsyncProducer,
        gate: Gate,
        acks: AckTracker | None,
        metrics: RuntimeMetrics,
        connect: SharedConnect,
    ) -> None:
        self.connector = connector
        self.ctx = connector.ctx
        self.outputs = outputs  # port -> channel topic
        self.client = client
        self.producer = producer
        self.sequence = 0  # pulls appended with a position, continued across restarts
        self.gate = gate
        self.acks = acks
        self.metrics = metrics
        self.connect = connect
        self.decoder = SourceDecoder(self.ctx, connector.structured)
        self.exhausted = False
        self.stopped = asyncio.Event()
        self.turns = YieldBudget("normal")  # the flow gives it its priority's
        self.pulling_since: float | None = None
        # the flow gives it a report that opens and closes the source's breaker
        self.disk_full = DiskFullBreaker(lambda is_open, why: None, self.ctx.quiescing)

    async def run(self) -> None:
        try:
            await self._loop()
        finally:
            await self.producer.flush()
            self.stopped.set()

    async def _loop(self) -> None:
        quiescing = self.ctx.quiescing
        while not quiescing.is_set():
            if await unless_stopped(self.gate.wait(), quiescing) is STOPPED:
                break
            try:
                self.pulling_since = time.monotonic()  # the flow's watchdog reports a pull past its deadline
                with self.metrics.timed(self.ctx.flow_id, "source_read"):
                    pulled = await unless_stopped(self.connector.pull(), quiescing)
                self.pulling_since = None
            except ConnectionLost as err:
                self.pulling_since = None
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
            with self.metrics.timed(self.ctx.flow_id, "source_decode"):
                decoded = self.decoder.decode(pulled)
            with self.metrics.timed(self.ctx.flow_id, "append"):
                await self._append(decoded, pulled.token, pulled)
            await self.turns.spend(decoded.count)  # cooperative yield, scaled by priority

    async def start(self) -> bool:
        """The first connection (shared with the sink side of the same connector): not a fault."""
        return await unless_stopped(self.connect(), self.ctx.quiescing) is True

    async def reconnect(self, why: str) -> bool:
        """The outside end went away: reconnect (shared with the sink side of the same connector)."""
        log.warning("%s: %s; reconnecting", self.ctx.name, why)
        return await self.start()

    async def _append(self, decoded: Decoded, token: Any, pulled: SourceData | None = None) -> None:
        """Append one pull's records, one atomic batch per topic, the data port's batch last.

        The data port's batch carries the pull's resume position on its last
        record, so the log itself says how far the source got: a crash between
        two batches re-reads the pull (at least once), never skips it.
        """
        by_topic = self._columns(decoded)
        data_topic = self.outputs.get(pulled.port) if pulled is not None else None
        marker: list[tuple[str, bytes]] | None = None
        if pulled is not None and pulled.position is not None and data_topic in by_topic:
            self.sequence += 1
            marker = [(POSITION_HEADER, orjson.dumps({"seq": self.sequence, "position": pulled.position}))]
        appends: dict[str, asyncio.Future[int]] = {}
        atomic = pulled is not None and pulled.position is not None
        for topic in sorted(by_topic, key=lambda t: t == data_topic):
            runs = by_topic[topic]
            if atomic or len(runs) >= DIRECT_APPEND_RECORDS:
                # One request, one log batch: a position and its events land together. Records the
                # producer still lingers over go first, so a channel keeps the order of its pulls.
                await self.producer.flush()
                last_headers = None
                if marker is not None and topic == data_topic:
                    last_headers = [*runs.last_headers, *marker]
                batch = runs.encode(last_headers)
                append = functools.partial(
                    self.client.produce_encoded, topic, 0, batch, self.producer.settings.acks
                )
                _, last = await self.disk_full.append(append)  # a full disk: held and tried again
                done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
                done.set_result(last)
                appends[topic] = done
            else:  # a few records and nothing to resume from: let the producer batch pulls together
                for value, header in runs.records():
                    appends[topic] = await self.producer.send(topic, 0, value, headers=header or None)
        if self.acks is not None and token is not None:
            self.acks.track(token, appends)

    def _columns(self, decoded: Decoded) -> dict[str, ColumnRuns]:
        """The pull's records by channel topic, as column runs; metrics counted once per run."""
        by_topic: dict[str, ColumnRuns] = {}
        runs = [Run([e.value], e.meta, e.port) for e in decoded.errors] + decoded.runs
        headers_of: dict[int, list[tuple[str, bytes]]] = {}  # a pull's runs share one meta dict
        for run in runs:
            count, nbytes = len(run.values), run.nbytes
            self.metrics.connector_events(self.ctx.flow_id, self.ctx.alias, run.port, count, nbytes)
            self.ctx.metrics.count(run.port, count, nbytes)
            if run.port == "err":
                self.metrics.connector_errors(self.ctx.flow_id, self.ctx.alias, "out", count)
            topic = self.outputs.get(run.port)
            if topic is None:
                if run.port == "err":
                    for value in run.values:
                        log.warning("%s: %s (err port not connected)", self.ctx.name, value.decode())
                continue
            headers = headers_of.get(id(run.meta))
            if headers is None:
                headers = headers_of[id(run.meta)] = Event(None, run.meta).headers()
            by_topic.setdefault(topic, ColumnRuns()).add(run.values, headers)
        return by_topic

    async def restore_position(self) -> None:
        """After a restart: hand the source the position stored with the last pull that reached the log."""
        found: dict[str, Any] | None = None
        for topic in self.outputs.values():
            marker = await last_position(self.client, topic)
            if marker is not None and (found is None or marker["seq"] > found["seq"]):
                found = marker
        if found is not None:
            self.sequence = int(found["seq"])
            log.info(
                "%s: resuming at %s, where its events stopped reaching the log",
                self.ctx.name,
                describe_position(found["position"]),
            )
            await self.connector.resume(found["position"])


def describe_position(position: Any) -> str:
    """A source's position in words for a person (`position 4299 (device 2049, inode 12)`), not a dict."""
    if not isinstance(position, dict):
        return str(position)
    main = {k: v for k, v in position.items() if k in ("position", "offset")}
    rest = ", ".join(f"{k} {v}" for k, v in position.items() if k not in main)
    words = ", ".join(f"{k} {v}" for k, v in main.items()) or rest
    return f"{words} ({rest})" if main and rest else words


POSITION_HEADER = "contraflow.source"
# A pull of at least this many records for one channel is appended as its own batch, not record by
# record through the flow's lingering producer: it is a batch already.
DIRECT_APPEND_RECORDS = 256
SCAN_BACK = 4096  # records of a channel's tail searched for the last position marker


async def last_position(client: AsyncSpuClient, topic: str) -> dict[str, Any] | None:
    """The newest source position marker in the tail of `topic`, if any."""
    end = await client.list_offsets(topic, 0, "latest") or 0
    start = max(0, end - SCAN_BACK)
    found: dict[str, Any] | None = None
    offset = start
    while offset < end:
        result = await client.fetch(topic, 0, offset)
        records = [r for b in result.batches for r in b.records(start_offset=offset)]
        if not records:
            break
        for record in records:
            for name, value in record.headers:
                if name == POSITION_HEADER:
                    found = orjson.loads(value)
        offset = records[-1].offset + 1
    return found
