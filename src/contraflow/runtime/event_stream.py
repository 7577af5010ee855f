"""Structured runtime events: every transition a person may want to see, in one place.

Back-pressure on/off, breakers opening and closing, watchdog warnings,
cancellation tiers, deploy/undeploy/pause/resume and failed micro-batches are
each one `emit(kind, flow=..., **fields)`. An event is a flat JSON object
with a wall-clock timestamp and a sequence number:

    {"seq": 7, "ts": "2026-11-24T01:30:00.123Z", "ts_ms": 1795483800123,
     "kind": "breaker", "flow": "main", "connector": "out", "state": "open",
     "reason": "connection lost: refused"}

Why three destinations: the SPU topic `contraflow.events` keeps the history
(`contraflow consume contraflow.events -B`), subscribers (`GET /v1/events`,
the live page) get it at once, and a bounded in-memory ring lets a new
subscriber start with the recent past without reading the log. `emit` is
synchronous and never blocks: callers are breaker and monitor callbacks on
the event loop. A background writer appends what was emitted in batches.

`open()` continues the log of an earlier run: the ring starts with the
topic's last events and `seq` goes on after them. So sequence numbers keep
increasing across restarts, and an SSE client reconnecting with
`Last-Event-ID` after the runtime restarted gets what it missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import orjson

from contraflow.spu.client import AsyncSpuClient
from contraflow.spu.protocol.errors import ErrorCode, SpuError
from contraflow.spu.protocol.topics import TopicConfig

log = logging.getLogger("contraflow.runtime.events")

EVENTS_TOPIC = "contraflow.events"
RECENT = 500  # events kept in memory for new subscribers
SUBSCRIBER_QUEUE = 1000  # a subscriber further behind than this loses its oldest events
WRITE_BATCH = 500
WRITE_ATTEMPTS = 3

RuntimeEvent = dict[str, Any]


def _stamp(seq: int, kind: str, flow: str | None, fields: dict[str, Any]) -> RuntimeEvent:
    now = time.time()
    iso = datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    event: RuntimeEvent = {"seq": seq, "ts": iso, "ts_ms": int(now * 1000), "kind": kind}
    if flow is not None:
        event["flow"] = flow
    event.update(fields)
    return event


class EventStream:
    """Emits runtime events to the `contraflow.events` topic, live subscribers and a recent ring.

    `spu_addr=None` keeps events in memory only (checks before a runtime starts).
    """

    def __init__(self, spu_addr: str | None, topic: str = EVENTS_TOPIC) -> None:
        self.spu_addr = spu_addr
        self.topic = topic
        self.recent: deque[RuntimeEvent] = deque(maxlen=RECENT)
        self._seq = itertools.count(1)
        self._subscribers: set[asyncio.Queue[RuntimeEvent | None]] = set()
        self._unwritten: asyncio.Queue[RuntimeEvent] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._client: AsyncSpuClient | None = None
        self._topic_ready = False
        self._opened = False

    async def open(self) -> None:
        """Load the topic's last RECENT events into the ring and continue `seq` after them (once;
        an unreachable SPU is logged and the stream starts afresh)."""
        if self._opened or self.spu_addr is None:
            return
        self._opened = True
        try:
            earlier = await self._read_tail()
        except (SpuError, OSError) as err:
            log.warning("could not read the earlier events of %s: %s", self.topic, err)
            return
        numbered = [e for e in earlier if isinstance(e, dict) and isinstance(e.get("seq"), int)]
        if numbered:
            self.recent = deque([*numbered, *self.recent], maxlen=RECENT)  # its own events stay newest
            self._seq = itertools.count(max(numbered[-1]["seq"] + 1, next(self._seq)))

    async def _read_tail(self) -> list[Any]:
        client = await self._ready_client()
        partition = (await client.describe_topic(self.topic)).partitions[0]
        offset = max(partition.log_start_offset, partition.high_watermark - RECENT)
        values: list[Any] = []
        while offset < partition.high_watermark:
            result = await client.fetch(self.topic, 0, offset)
            for batch in result.batches:
                values += [orjson.loads(r.value) for r in batch.records(start_offset=offset)]
            offset = result.next_offset
        return values

    # -- emitting ------------------------------------------------------------------------------

    def emit(self, kind: str, flow: str | None = None, **fields: Any) -> RuntimeEvent:
        """Record one event; returns it. Also logged (`event=<kind> ...`) at INFO, WARNING for warnings."""
        event = _stamp(next(self._seq), kind, flow, fields)
        self.recent.append(event)
        for queue in self._subscribers:
            _offer(queue, event)
        level = logging.WARNING if kind in ("watchdog", "batch_failed", "redeploy_failed") else logging.INFO
        log.log(level, "event=%s %s", kind, _logfmt(event), extra={"runtime_event": event})
        self._persist(event)
        return event

    def _persist(self, event: RuntimeEvent) -> None:
        if self.spu_addr is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # emitted outside the runtime's loop: memory only
            return
        if self._unwritten is None:
            self._unwritten = asyncio.Queue()
        self._unwritten.put_nowait(event)
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write_loop(self._unwritten), name="events writer")

    # -- subscribing ---------------------------------------------------------------------------

    async def subscribe(
        self, flow: str | None = None, history: int = 50, after: int | None = None
    ) -> AsyncIterator[RuntimeEvent]:
        """The last `history` events (of `flow`, if given), then every new one until `close()`.

        `after` (an SSE client's `Last-Event-ID`) replaces `history`: every event in the ring with
        a larger `seq`, so a client that reconnects misses nothing the ring still holds."""
        await self.open()
        queue: asyncio.Queue[RuntimeEvent | None] = asyncio.Queue(SUBSCRIBER_QUEUE)
        self._subscribers.add(queue)  # no await from here to the ring read: no event is missed
        try:
            past = [e for e in self.recent if flow is None or e.get("flow") == flow]
            if after is not None:
                past = [e for e in past if e["seq"] > after]
            elif history > 0:
                past = past[-history:]
            else:
                past = []
            for event in past:
                yield event
            while (live := await queue.get()) is not None:
                if flow is None or live.get("flow") == flow:
                    yield live
        finally:
            self._subscribers.discard(queue)

    # -- writing -------------------------------------------------------------------------------

    async def _write_loop(self, unwritten: asyncio.Queue[RuntimeEvent]) -> None:
        while True:
            batch = [await unwritten.get()]
            while len(batch) < WRITE_BATCH and not unwritten.empty():
                batch.append(unwritten.get_nowait())
            await self._append(batch)
            for _ in batch:
                unwritten.task_done()

    async def _append(self, batch: list[RuntimeEvent]) -> None:
        values = [orjson.dumps(e) for e in batch]
        for attempt in range(WRITE_ATTEMPTS):
            try:
                client = await self._ready_client()
                await client.produce(self.topic, 0, values)
                return
            except (SpuError, OSError) as err:
                if attempt + 1 == WRITE_ATTEMPTS:
                    log.warning("could not append %d events to %s: %s", len(batch), self.topic, err)
                    return
                await asyncio.sleep(0.2 * (attempt + 1))

    async def _ready_client(self) -> AsyncSpuClient:
        assert self.spu_addr is not None
        if self._client is None:
            self._client = AsyncSpuClient(self.spu_addr)
        if not self._topic_ready:
            if self.topic not in await self._client.list_topics():
                try:
                    config = await self._client.replicated_config(TopicConfig(partitions=1))
                    await self._client.create_topic(self.topic, config)
                except SpuError as err:  # another runtime on the same SPU created it first
                    if err.code != ErrorCode.TOPIC_EXISTS:
                        raise
            self._topic_ready = True
        return self._client

    async def flush(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) until everything emitted so far is in the topic."""
        if self._unwritten is not None and self._writer is not None and not self._writer.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):  # not wait_for, which may swallow a cancel (3.11)
                    await self._unwritten.join()

    async def close(self) -> None:
        """Flush, end every subscription, stop the writer. Emitting later starts a new writer."""
        await self.flush()
        for queue in self._subscribers:
            _offer(queue, None)
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        self._unwritten = None
        if self._client is not None:
            await self._client.close()
            self._client = None


def _offer(queue: asyncio.Queue[RuntimeEvent | None], event: RuntimeEvent | None) -> None:
    """Put without waiting: a subscriber too far behind loses its oldest event, not the newest."""
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(event)


def _logfmt(event: RuntimeEvent) -> str:
    skip = ("seq", "ts", "ts_ms", "kind")
    return " ".join(f"{k}={_value(v)}" for k, v in event.items() if k not in skip)


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    text = str(value)
    return orjson.dumps(text).decode() if " " in text or not text else text
