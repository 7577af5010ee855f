"""A sink connector's loop: tail each input channel from the committed offset, deliver, then commit.

Delivery and contraflow:
- `ConnectionLost` opens the sink's circuit breaker (every source upstream
  stops pulling), reconnects with the connector's reconnect policy, closes
  the breaker and sends the same batch again: nothing is skipped.
- `DeliveryFailed(retryable=True)` is retried with exponential backoff
  (`delivery` flow arg); a non-retryable failure or exhausted retries send
  the batch to the connector's `err` port as error events. Either way the
  offset is committed only after the batch was handled, so a crash
  redelivers (at least once) and never skips.

A holding sink (`Connector.holds_deliveries`) delivers after `send`
returns: its offsets are committed only as far as it releases them
(`DeliveryHold`), and when the flow stops it settles (delivers what it took)
before the last commits.

Every attempt, delivered or failed, is reported to `feedback(topic, append
times in ms, failed)` when given: the QoS feed turns it into signals for
`qos::backpressure` and `qos::percentile` upstream.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contraflow.backoff import first_waits
from contraflow.codecs import CodecError
from contraflow.connectors.base import (
    ConnectionLost,
    Connector,
    ConnectorError,
    DeliveryFailed,
    SinkBytes,
    SinkEvent,
)
from contraflow.events import META_HEADER, Event, decode_value, encode_value
from contraflow.runtime.connection import SharedConnect
from contraflow.runtime.delivery_hold import DeliveryHold
from contraflow.runtime.gate import Gate
from contraflow.runtime.metrics import RuntimeMetrics
from contraflow.runtime.settings import DeliverySettings
from contraflow.runtime.wire import SinkEncoder, join_values
from contraflow.spu.client import AsyncProducer, AsyncSpuClient
from contraflow.spu.protocol import SpuError
from contraflow.spu.protocol.batch import DecodedBatch
from contraflow.spu.protocol.errors import REROUTE
from contraflow.stopping import STOPPED, unless_stopped

log = logging.getLogger("contraflow.runtime.sink")

Feedback = Callable[[str, Sequence[int], bool], None]  # (input topic, append times in ms, failed)

MAX_BATCH_EVENTS = 1024
# A bulk sink's tail takes pushes of up to PUSH_BYTES, with PUSH_CREDIT_BYTES in flight: every push
# is one write and one offset commit (a durable write on the SPU), so at the stream's default 256
# KiB a busy file sink spent three quarters of its time committing. Pushes are whatever the log
# holds when it is read, so a larger cap costs no latency. (Other sinks deliver 1,024 events at a
# time whatever the push, and keep the stream's defaults.)
PUSH_BYTES = 4 << 20
PUSH_CREDIT_BYTES = 16 << 20


# A tail whose log leader is lost (SIGKILL, a partition) reads again after these waits, then every
# 2 s: a cluster elects a new leader within a session timeout, and the sink must outlive it. The
# waits start again from the first once the log is read again (the next loss is a new outage).
LEADER_WAITS = 6


def leader_waits() -> Iterator[float]:
    return iter(first_waits(LEADER_WAITS, 0.1, 2.0, jitter=True))


def lost_its_leader(err: SpuError) -> bool:
    """The log is out of reach for now (its leader died or moved), not refusing the sink."""
    return err.retriable or err.code in REROUTE


NOT_CONNECTED = "not connected yet"  # a sink's breaker reason until its first connection


class TrailingCommits:
    """A tail's offset commits behind its deliveries: at most one in flight, the newest offset wins.

    A commit is a durable write on the SPU (tens of ms on a busy disk), and a
    bulk sink that waited for each one before its next write spent most of its
    time waiting. Every offset committed is one whose records were all
    delivered, in order, so a crash still redelivers (at least once) and never
    skips; the committed offset (and the acks that follow it) only lag the
    deliveries by the commit in flight. A failed commit is raised by the next
    `advance` or by `flush` (unless the log was read again since: `reopened`).
    """

    def __init__(self, commit: Callable[[int], Awaitable[None]]) -> None:
        self._commit = commit
        self._wanted: int | None = None
        self._newest: int | None = None  # the newest offset advanced to
        self._running: asyncio.Task[None] | None = None

    def advance(self, offset: int) -> None:
        """Everything before `offset` is delivered: commit it once the commit in flight is done."""
        if self._running is not None and self._running.done():
            running, self._running = self._running, None
            running.result()
        self._wanted = self._newest = offset
        if self._running is None:
            self._running = asyncio.create_task(self._run())

    def reopened(self) -> None:
        """The log is read again after an outage: a commit that failed in it is not raised (the
        next commit, of a later offset, supersedes it) and does not cost the tail another reopen."""
        if self._running is not None and self._running.done():
            running, self._running = self._running, None
            if not running.cancelled():
                running.exception()  # retrieved, not raised

    async def _run(self) -> None:
        while self._wanted is not None:
            offset, self._wanted = self._wanted, None
            await self._commit(offset)

    async def flush(self) -> None:
        """Wait until the newest offset is committed; if the log was out of reach for the commit
        in flight, commit the newest offset once more (the log may be back)."""
        if self._running is None:
            return
        running, self._running = self._running, None
        try:
            await running
        except SpuError as err:
            if not lost_its_leader(err) or self._newest is None:
                raise
            await self._commit(self._newest)


@dataclass(eq=False)  # an instance is a running thing: identity, not value, equality
class SinkRunner:
    """Runs the sink side of one connector: one tail per input channel, deliveries serialized."""

    connector: Connector
    inputs: list[tuple[str, str, str]]  # (topic, consumer, port)
    client: AsyncSpuClient
    producer: AsyncProducer
    err_topic: str | None
    gate: Gate
    delivery: DeliverySettings
    metrics: RuntimeMetrics
    breaker: Callable[[bool, str], None]
    connect_shared: SharedConnect
    feedback: Feedback | None = None

    def __post_init__(self) -> None:
        self.ctx = self.connector.ctx
        self.encoder = SinkEncoder(self.ctx, self.connector.structured)
        # A whole fetch goes out as one buffer when the connector writes bytes and the codec keeps values.
        self.bulk_separator = self.encoder.bulk_separator if self.connector.writes_bytes else None
        self.hold: DeliveryHold | None = None
        self._held_commits: list[TrailingCommits] = []
        if self.connector.holds_deliveries:
            self.bulk_separator = None  # a holding sink releases events by their channel and offset
            self.hold = DeliveryHold()
            self.ctx.release = self.hold.release
        self.committed: dict[str, int] = {}
        self._delivered: dict[str, int] = {}  # per channel topic: the next offset to deliver
        self._send_lock = asyncio.Lock()
        self.stop = asyncio.Event()
        self.ready = asyncio.Event()
        self.connected = False
        self.sending_since: float | None = None

    async def connect(self) -> bool:
        """Controlled start: connect before any source upstream may pull."""
        return await self._reconnect(NOT_CONNECTED)

    async def run(self) -> None:
        await asyncio.gather(*(self._tail(topic, consumer, port) for topic, consumer, port in self.inputs))
        if self.hold is not None:
            await self.settle()

    def handed_over(self) -> dict[tuple[str, str], Callable[[], int]]:
        """A holding sink's (topic, consumer) -> how far it was handed events (the monitor's depth)."""
        hold = self.hold
        assert hold is not None
        return {
            (topic, consumer): functools.partial(hold.taken_of, topic) for topic, consumer, _ in self.inputs
        }

    def caught_up(self, ends: Mapping[str, int]) -> bool:
        """A holding sink was handed every event below `ends` (channel topic -> end offset)."""
        assert self.hold is not None
        return all(self.hold.taken_of(topic) >= ends[topic] for topic, _, _ in self.inputs)

    async def settle(self) -> None:
        """A holding sink delivers (and releases) what it took: the flow drains, or it stops.

        A sink that cannot deliver now releases nothing more: those events come again next run."""
        try:
            async with self._send_lock:
                await self.connector.settle()
        except ConnectorError as err:
            log.warning(
                "%s: could not deliver what it holds (it comes again next run): %s", self.ctx.name, err
            )
        await asyncio.gather(*(trailing.flush() for trailing in self._held_commits))

    async def _tail(self, topic: str, consumer: str, port: str) -> None:
        offset = await self.client.fetch_offset(consumer, topic, 0)
        if offset is None:
            offset = await self.client.list_offsets(topic, 0, "earliest") or 0
        self.committed[topic] = offset
        self._delivered[topic] = offset
        trailing = TrailingCommits(functools.partial(self._commit, consumer, topic))
        if self.hold is not None:
            self.hold.watch(topic, offset, trailing.advance)
            self._held_commits.append(trailing)
        waits = leader_waits()

        def reopened() -> None:
            nonlocal waits
            waits = leader_waits()
            trailing.reopened()

        try:
            while not self.stop.is_set():
                try:
                    await self._stream(topic, consumer, port, trailing, reopened)
                    return
                except SpuError as err:
                    wait = next(waits, 2.0)
                    if not lost_its_leader(err):
                        raise
                    log.warning(
                        "%s: the log %s is unreachable (%s); reading again from offset %d in %.1fs",
                        self.ctx.name,
                        topic,
                        err,
                        self._delivered[topic],
                        wait,
                    )
                    await unless_stopped(asyncio.sleep(wait), self.stop)
        finally:
            if self.hold is None:  # a holding sink's commits follow its releases (`_settle`)
                await trailing.flush()

    async def _stream(
        self, topic: str, consumer: str, port: str, trailing: TrailingCommits, opened: Callable[[], None]
    ) -> None:
        """Deliver the channel from `_delivered[topic]` on until stopped (or the log fails);
        `opened` is told once the log answered."""
        offset = self._delivered[topic]
        stream = (
            self.client.stream(topic, 0, offset, credit_bytes=PUSH_CREDIT_BYTES, max_bytes=PUSH_BYTES)
            if self.bulk_separator is not None
            else self.client.stream(topic, 0, offset)
        )
        try:
            if await unless_stopped(stream.open(), self.stop) is STOPPED:
                return
            opened()
            iterator = aiter(stream)
            while not self.stop.is_set():
                result = await unless_stopped(anext(iterator), self.stop)
                if result is STOPPED:
                    break
                batches = [b for b in result.batches if b.last_offset >= offset]
                if not batches:
                    continue
                if self.bulk_separator is not None:
                    await self.gate.wait()
                    await self._deliver_bulk(batches, offset, port, topic)
                    offset = self._delivered[topic] = batches[-1].last_offset + 1
                    trailing.advance(offset)
                    continue
                for batch in batches:
                    records = list(batch.records(start_offset=offset))
                    for start in range(0, len(records), MAX_BATCH_EVENTS):
                        chunk = records[start : start + MAX_BATCH_EVENTS]
                        await self.gate.wait()
                        if self.hold is not None:
                            self.hold.take(topic, chunk[-1].offset + 1)
                        await self._deliver_records(chunk, port, topic)
                        offset = self._delivered[topic] = chunk[-1].offset + 1
                        if self.hold is None:
                            await self._commit(consumer, topic, offset)
        finally:
            await stream.close()

    async def _commit(self, consumer: str, topic: str, offset: int) -> None:
        with self.metrics.timed(self.ctx.flow_id, "sink_commit"):
            await self.client.commit_offset(consumer, topic, 0, offset)
        self.committed[topic] = offset

    async def _deliver_bulk(
        self, batches: Sequence[DecodedBatch], offset: int, port: str, topic: str
    ) -> None:
        """Every record of a fetch from `offset` on, as one buffer of wire bytes and one write."""
        separator = self.bulk_separator
        assert separator is not None
        parts: list[bytes] = []
        stamps: list[int] = []
        count = 0
        for batch in batches:
            first = max(0, offset - batch.base_offset)
            values, data = batch.value_buffers()
            parts.append(join_values(values, data, first, separator))
            count += batch.record_count - first
            if self.feedback is not None:
                stamps.extend(batch.timestamps()[first:])
        report = functools.partial(self.feedback, topic, stamps) if self.feedback is not None else None

        def undelivered() -> list[tuple[bytes, Sequence[tuple[str, bytes]]]]:
            return [(r.value, r.headers) for b in batches for r in b.records(start_offset=offset)]

        await self.deliver(SinkBytes(b"".join(parts), count, port), report, undelivered)

    async def _deliver_records(self, records: Sequence[Any], port: str, topic: str) -> None:
        events: list[SinkEvent] = []
        for record in records:
            try:
                event = self.encoder.encode(record.value, record.headers, port, record.offset)
                event.channel = topic
                events.append(event)
            except (CodecError, ValueError, TypeError) as err:
                await self._to_err(f"cannot encode: {err}", [(record.value, record.headers)])
        self.encoder.end_batch(events)
        if events:
            report = None
            if self.feedback is not None:
                report = functools.partial(self.feedback, topic, [r.timestamp for r in records])
            await self.deliver(events, report, lambda: [(e.raw, _headers(e)) for e in events])

    async def deliver(
        self,
        events: Sequence[SinkEvent] | SinkBytes,
        report: Callable[[bool], None] | None,
        undelivered: Callable[[], list[tuple[bytes, Sequence[tuple[str, bytes]]]]],
    ) -> None:
        """Send one batch: reconnect on ConnectionLost, retry retryable failures, else to `err`.

        `report(failed)` hears the outcome of every attempt (the QoS feedback);
        `undelivered()` gives the batch's records for the `err` port."""
        delays = self.delivery.delays()
        attempt = 0
        while True:
            try:
                async with self._send_lock:
                    with self.metrics.timed(self.ctx.flow_id, "sink_write"):
                        await self._send(events, report)
            except ConnectionLost as err:
                self.connected = False
                self.ready.clear()
                if not await self._reconnect(f"connection lost: {err}"):
                    await self._to_err(f"connection lost: {err}", undelivered())
                    return
                continue
            except DeliveryFailed as err:
                if err.rejected is not None:  # the other events were delivered
                    await self._to_err(
                        f"delivery failed: {err}", [(e.raw, _headers(e)) for e in err.rejected]
                    )
                    rejected = {id(e) for e in err.rejected}
                    if not isinstance(events, SinkBytes) and len(rejected) < len(events):
                        self._count_delivered([e for e in events if id(e) not in rejected])
                    return
                if err.retryable and attempt < len(delays):
                    log.info(
                        "%s: delivery failed (%s), retry %d in %.2fs",
                        self.ctx.name,
                        err,
                        attempt + 1,
                        delays[attempt],
                    )
                    await asyncio.sleep(delays[attempt])
                    attempt += 1
                    continue
                await self._to_err(f"delivery failed: {err}", undelivered())
                return
            self._count_delivered(events)
            return

    def _count_delivered(self, events: Sequence[SinkEvent] | SinkBytes) -> None:
        if isinstance(events, SinkBytes):
            count, nbytes, port = events.count, len(events.data), events.port
        else:
            count, port = len(events), events[0].port
            nbytes = sum(len(f) for e in events for f in e.frames) or sum(len(e.raw) for e in events)
        self.metrics.connector_events(self.ctx.flow_id, self.ctx.alias, port, count, nbytes)
        self.ctx.metrics.count(port, count, nbytes)

    async def _send(
        self, events: Sequence[SinkEvent] | SinkBytes, report: Callable[[bool], None] | None
    ) -> None:
        send = (
            functools.partial(self.connector.send_bytes, events)
            if isinstance(events, SinkBytes)
            else functools.partial(self.connector.send, events)
        )
        self.sending_since = time.monotonic()  # the flow's watchdog reports a send past its deadline
        try:
            if report is None:
                await send()
                return
            try:
                await send()
            except (ConnectionLost, DeliveryFailed):
                report(True)
                raise
            report(False)
        finally:
            self.sending_since = None

    async def _reconnect(self, why: str) -> bool:
        """Hold the breaker open while the outside end is unreachable; close it once connected."""
        self.breaker(True, why)
        ok = await self.connect_shared()
        if ok:
            self.connected = True
            self.ready.set()
            self.breaker(False, "connected")
        return ok

    async def _to_err(
        self, reason: str, records: Sequence[tuple[bytes, Sequence[tuple[str, bytes]]]]
    ) -> None:
        """Events that could not be delivered become error events on the `err` port: never dropped silently."""
        self.metrics.connector_errors(self.ctx.flow_id, self.ctx.alias, "in", len(records))
        self.ctx.metrics.count("err", 0, 0, len(records))
        for value, headers in records:
            error = {"error": reason, "connector": self.ctx.name, "event": _as_json(value)}
            if self.err_topic is None:
                log.error("%s: %s (err port not connected): %s", self.ctx.name, reason, bytes(value)[:200])
                continue
            kept = [(name, data) for name, data in headers if name == META_HEADER]  # the event's own metadata
            await self.producer.send(self.err_topic, 0, encode_value(error), headers=kept or None)
        await self.producer.flush()


def _headers(event: SinkEvent) -> list[tuple[str, bytes]]:
    return Event(None, event.meta).headers()


def _as_json(value: bytes) -> Any:
    try:
        return decode_value(value)
    except ValueError:
        return bytes(value).decode("utf-8", "replace")
