"""`bench`: replays a file as fast as asked and measures what comes back (Tremor's `bench`).

Config (Tremor's): `path` (or 0.12's `source`; required: the data file,
compressed files are detected), `interval` (nanoseconds between events, 0 =
as fast as possible), `chunk_size` (split the data into chunks of this many
bytes instead of lines), `iters` (passes over the data), `stop_after_secs`
(wall-clock limit), `base64` (decode each line from base64),
`significant_figures` (latency precision, default 2), `warmup_secs` (events
sent during the first seconds are not measured, so the latency is the steady
state's). Without `iters` and `stop_after_secs` it replays until the flow
stops.

Source: the data is loaded once into memory, so reading the file never
limits the measured rate. With a `separate` preprocessor first, lines are
handed out in batches joined by the separator (one pull, many events);
otherwise every line (or chunk) is one pull and one frame. Each pull stamps
`$bench = {"ingest_ns": <wall clock ns>}`. With an `interval` the source is
paced: each pull carries every event due by then (up to 256 with a
separator, else one), stamped with the time the first of them was due, so
high rates (10k events/s = 100 us) hold and latency is never understated;
after a stall of more than 0.5 s the backlog is dropped from the schedule and
counted in the report's `skipped` (`sent_per_s` is the rate reached).

Sink: events coming back on `in` are counted (events, bytes) and, when they
still carry `$bench.ingest_ns`, their end-to-end latency goes into a
histogram. When the source is done and everything sent came back (or
nothing arrived for `DRAIN_TIMEOUT_S`, e.g. a pipeline filtered events), the
report is printed on stdout as one JSON object and the runtime is asked to
stop, as Tremor's bench does; with nothing connected to `in`, the report
(of what was sent) follows as soon as the source is done.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from contraflow.codecs.processors.compress import StreamDecompressor
from contraflow.connectors.base import Connector, ConnectorContext, SinkEvent, SourceData, register
from contraflow.connectors.base.filereader import leading_separator
from contraflow.connectors.base.histogram import Histogram
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.timing import Pacer
from contraflow.stopping import sleep_unless

NS_PER_S = 1_000_000_000
BATCH_EVENTS = 256
DRAIN_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class BenchOptions:
    path: Path
    interval_ns: int
    chunk_size: int | None
    iters: int | None
    stop_after_s: float | None
    base64: bool
    significant_figures: int
    warmup_s: float

    @classmethod
    def read(cls, cfg: ConfigReader) -> BenchOptions:
        if ("path" in cfg.config) == ("source" in cfg.config):
            raise cfg.error("path", "is required (or `source`, its Tremor 0.12 name), and only one of them")
        figures = cfg.integer("significant_figures", 2, minimum=1)
        if figures > 5:
            raise cfg.error("significant_figures", f"must be between 1 and 5, got {figures}")
        return cls(
            Path(cfg.string("path" if "path" in cfg.config else "source")),
            cfg.integer("interval", 0),
            cfg.optional_integer("chunk_size", minimum=1),
            cfg.optional_integer("iters", minimum=1),
            cfg.optional_number("stop_after_secs", minimum=0.001),
            cfg.boolean("base64", False),
            figures,
            cfg.number("warmup_secs", 0.0),
        )


def load_items(options: BenchOptions) -> list[bytes]:
    """The file's lines (or chunks), decompressed and base64-decoded as configured."""
    raw = options.path.read_bytes()
    decompressor = StreamDecompressor()
    data = decompressor.decompress(raw) + decompressor.finish()
    if options.chunk_size:
        items = [data[i : i + options.chunk_size] for i in range(0, len(data), options.chunk_size)]
    else:
        items = [line for line in data.split(b"\n") if line]
    if options.base64:
        items = [base64.b64decode(item, validate=True) for item in items]
    return items


@register("bench")
class BenchConnector(Connector[BenchOptions]):
    config_keys = frozenset(
        {
            "path",
            "source",
            "interval",
            "chunk_size",
            "iters",
            "stop_after_secs",
            "base64",
            "significant_figures",
            "warmup_secs",
        }
    )
    # How long to wait for more events coming back before reporting without them.
    drain_timeout_s = DRAIN_TIMEOUT_S

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        # Lines can travel many per pull, joined again by the separator the runtime splits them at.
        separator = leading_separator(ctx.spec.preprocessors)
        self.separator = None if self.options.chunk_size else separator
        self.items: list[bytes] = []
        self.latency = Histogram(self.options.significant_figures)
        self.sent = self.sent_bytes = self.received = self.received_bytes = 0
        self.report: dict[str, Any] | None = None
        self._index = self._iteration = 0
        self._started_ns = self._first_in_ns = self._last_in_ns = self._done_ns = 0
        self._measure_from_ns = 0  # wall clock: events sent before it are the warm-up
        self._source_done = asyncio.Event()
        self._arrived = asyncio.Event()
        self._pacer: Pacer | None = None
        self._finisher: asyncio.Task[None] | None = None

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> BenchOptions:
        return BenchOptions.read(cfg)

    async def connect(self) -> None:
        if self.items:
            return
        try:
            self.items = await asyncio.to_thread(load_items, self.options)
        except binascii.Error as err:
            raise self.config_reader.error(
                "base64", f"is true but {self.options.path} is not base64: {err}"
            ) from None
        if not self.items:
            raise self.config_reader.error("path", f"names an empty file: {self.options.path}")
        if self.options.interval_ns:
            self._pacer = Pacer(self.options.interval_ns / NS_PER_S)
        self._finisher = asyncio.create_task(self._finish_when_done())

    # -- source ------------------------------------------------------------------------------------

    async def pull(self) -> SourceData | None:
        if not self._started_ns:
            self._started_ns = time.monotonic_ns()
            self._measure_from_ns = time.time_ns() + int(self.options.warmup_s * NS_PER_S)
        if self._exhausted():
            if not self._source_done.is_set():
                self._done_ns = time.monotonic_ns()
                self._source_done.set()
            return None
        size = 1 if self.separator is None else BATCH_EVENTS
        late_ns = 0
        if self._pacer is not None:
            size, due = await self._paced(size)
            if not size:
                return None
            late_ns = max(0, time.monotonic_ns() - int(due * NS_PER_S))
        ingest_ns = time.time_ns() - late_ns  # when the first event of the pull was due
        batch = self._next_batch(size)
        meta = {"bench": {"ingest_ns": ingest_ns}}
        self.sent += len(batch)
        data = self.separator.join(batch) + self.separator if self.separator is not None else batch[0]
        self.sent_bytes += len(data)
        return SourceData(data=data, meta=meta)

    async def _paced(self, limit: int) -> tuple[int, float]:
        """Wait until events are due; (how many, at most `limit`; when the first was due), 0 if quiescing."""
        assert self._pacer is not None
        while True:
            count, due = self._pacer.take(limit)
            if count:
                return count, due
            if await sleep_unless(self.ctx.quiescing, self._pacer.delay()):
                return 0, due

    def _exhausted(self) -> bool:
        o = self.options
        if self.ctx.quiescing.is_set() or (o.iters is not None and self._iteration >= o.iters):
            return True
        return (
            o.stop_after_s is not None and time.monotonic_ns() - self._started_ns >= o.stop_after_s * NS_PER_S
        )

    def _next_batch(self, size: int) -> list[bytes]:
        batch = self.items[self._index : self._index + size]
        self._index += len(batch)
        if self._index >= len(self.items):
            self._index = 0
            self._iteration += 1
        return batch

    # -- sink --------------------------------------------------------------------------------------

    async def send(self, events: Sequence[SinkEvent]) -> None:
        now_ns = time.time_ns()
        mono = time.monotonic_ns()
        if not self._first_in_ns:
            self._first_in_ns = mono
        self._last_in_ns = mono
        for event in events:
            self.received += 1
            self.received_bytes += len(event.raw)
            ingest = event.meta.get("bench")
            sent_ns = ingest.get("ingest_ns") if isinstance(ingest, dict) else None
            if isinstance(sent_ns, int) and sent_ns >= self._measure_from_ns:
                self.latency.record(now_ns - sent_ns)
        self._arrived.set()

    async def _finish_when_done(self) -> None:
        await self._source_done.wait()
        while self.received < self.sent and "in" in self.ctx.inputs:
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.drain_timeout_s):  # not wait_for: may swallow a cancel
                    await self._arrived.wait()
            if not self._arrived.is_set():
                break  # nothing more is coming back (filtered, or nothing connected to `in`)
        self.finish()
        self.ctx.stop_runtime()

    def finish(self) -> dict[str, Any]:
        """Compute the report once and print it on stdout as JSON."""
        if self.report is None:
            self.report = self._report()
            sys.stdout.buffer.write(orjson.dumps({"bench": self.report}, option=orjson.OPT_INDENT_2) + b"\n")
            sys.stdout.flush()
        return self.report

    def _report(self) -> dict[str, Any]:
        # Throughput of what came back when something did, else of what was sent.
        end = (self._last_in_ns if self.received else self._done_ns) or time.monotonic_ns()
        seconds = max(end - (self._started_ns or end), 1) / NS_PER_S
        counted = self.received if self.received else self.sent
        counted_bytes = self.received_bytes if self.received else self.sent_bytes
        sending = max((self._done_ns or end) - (self._started_ns or end), 1) / NS_PER_S
        return {
            "sent": self.sent,
            "received": self.received,
            "sent_per_s": round(self.sent / sending, 1),
            "skipped": self._pacer.skipped if self._pacer is not None else 0,
            "seconds": round(seconds, 6),
            "events_per_s": round(counted / seconds, 1),
            "mb_per_s": round(counted_bytes / seconds / 1e6, 3),
            "latency_ns": self.latency.summary() if self.latency.count else None,
            "iterations": self._iteration,
        }

    async def close(self) -> None:
        if self._finisher is not None and not self._finisher.done():
            self._finisher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._finisher
        if self._started_ns:
            self.finish()

    def status(self) -> dict[str, Any]:
        return {"sent": self.sent, "received": self.received}
