"""The connector interface: what a connector kind implements and what the runtime gives it.

A connector talks to the outside world and nothing else. The runtime does the
rest around it: codecs and pre/postprocessors (per stream), appending to and
tailing channel topics, back-pressure, circuit breakers, acks, retries.

Source side (a kind that implements `pull`: `is_source`)
    `await pull()` waits for the next chunk and returns a `SourceData`:
    raw bytes of one stream (`data`, `stream`; or several `chunks`, each with
    its own metadata) that the runtime splits with the
    preprocessors and decodes with the codec, or ready `events` for structured
    connectors (metronome, log). `None` means the source is exhausted (end of
    file); the runtime flushes the stream's preprocessors and stops pulling.
    `SourceData.end_stream` says one stream (a TCP connection) ended.
    A source that can seek sets `SourceData.position` (where to continue after
    this pull) and implements `resume(position)`: the runtime appends each
    pull's events as one atomic batch carrying that position and, after a
    restart, resumes the source right after the last pull that reached the log.
    Sources that acknowledge (implement `ack`: file with checkpoint, log,
    http_server) put a `token` on each `SourceData`; the runtime calls
    `ack(token)` once every event derived from it was delivered downstream
    (or persisted in the log, with `ack = "persisted"`), and `fail(token)` if
    it cannot be. Tokens of one connector are acked in pull order.

Sink side (a kind that implements `send`: `is_sink`)
    `await send(events)` delivers a batch of `SinkEvent`s (already encoded to
    wire frames by the codec and postprocessors) and returns once they are
    delivered. It raises `ConnectionLost` when the destination is gone: the
    runtime opens the circuit breaker (every source upstream stops pulling),
    reconnects with `connect()` following the connector's `reconnect` policy and
    then sends the same batch again. It raises `DeliveryFailed(retryable=...)`
    when this batch could not be delivered: retryable failures are retried
    with backoff, the others (and exhausted retries) go to the `err` port.
    The channel offset is committed only after `send` returned.

Holding sinks (a kind that implements `settle`: `holds_deliveries`)
    Some sinks take events long before they are delivered: an object store's
    upload is only there once the whole object is complete. Such a sink's
    `send` returning means "taken", not "delivered": the runtime commits its
    channel offsets only as far as the sink says with `ctx.release(marks)`
    (channel -> offset of the last delivered event, as `DeliveryMarks` keeps
    them from `SinkEvent.channel` and `SinkEvent.offset`), so a crash before
    then delivers the same events again. When the flow stops, the runtime
    calls `settle()`: deliver (and release) everything taken.

Bidirectional connectors (tcp_server, http_server) implement both sides; replies
carry the stream id (`meta["stream"]` by convention) of the request they answer.

A built-in kind registers itself with `@register("kind")` in
`contraflow/connectors/<kind>.py`; kinds written outside contraflow come from
an installed package's entry point or a `python` connector's `class`
(`contraflow.connectors.base.registry`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from prometheus_client import CollectorRegistry

from contraflow.codecs import Codec, Postprocessors, Preprocessors, codec, postprocessors, preprocessors
from contraflow.connectors.base.options import ConfigReader
from contraflow.events import decode_value
from contraflow.lang.graph import ConnectorSpec

# ---------------------------------------------------------------------------------------------- errors


class ConnectorError(Exception):
    """Base of the errors a connector raises to tell the runtime what happened."""


class ConnectionLost(ConnectorError):
    """The outside end is gone (refused, reset, closed). Opens the circuit breaker; the runtime reconnects."""


def reason_of(err: BaseException) -> str:
    """What went wrong, for a breaker's reason and an `err` event: the first message along the
    exception's chain (httpx's ConnectError can have none of its own while the OSError it wraps
    says `Connection refused`), else the errno's text, else the exception's type."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno and not current.strerror:
            return os.strerror(current.errno)  # `[Errno 111] ` says less
        if str(current):
            return str(current)
        current = current.__cause__ or current.__context__
    return type(err).__name__


class DeliveryFailed(ConnectorError):
    """This batch was not delivered. `retryable`: trying again later may succeed (5xx, timeout).

    `rejected`: only these events of the batch failed (never retried: they go to `err`), the
    others were delivered; a sink that checks each event says so instead of failing the batch."""

    def __init__(
        self, reason: str, *, retryable: bool = True, rejected: Sequence[SinkEvent] | None = None
    ) -> None:
        super().__init__(reason)
        self.retryable = retryable and rejected is None
        self.rejected = rejected


# ---------------------------------------------------------------------------------------------- data


@dataclass(slots=True)
class SourceData:
    """What one `pull()` produced.

    Either `data` (raw bytes of stream `stream`, decoded by the runtime) or
    `events` (ready `(value, meta)` pairs of a structured connector), plus
    `meta` merged into every event's metadata and an optional ack `token`.
    `chunks` are several chunks of stream `stream` at once, each with its own
    metadata (merged over `meta`): a source whose input comes in records (a
    log) hands out every record it has ready in one pull, so the runtime
    appends them with one request instead of one round trip per record.
    """

    data: bytes | None = None
    chunks: list[tuple[bytes, dict[str, Any]]] | None = None
    stream: int = 0
    meta: dict[str, Any] | None = None
    events: list[tuple[Any, dict[str, Any]]] | None = None
    token: Any = None
    port: str = "out"
    end_stream: bool = False
    # Where to resume to read what follows this pull (JSON-serialisable; see `Connector.resume`).
    position: Any = None


@dataclass(slots=True)
class SinkEvent:
    """One event for a sink: the JSON value as in the channel (`raw`), its metadata and wire frames.

    `frames` is what the codec and postprocessors made of it (a json codec
    passes `raw` through untouched); structured sinks use `value()` and `meta`.
    """

    raw: bytes
    meta: dict[str, Any]
    frames: list[bytes]
    port: str = "in"
    offset: int = -1
    channel: str = ""  # the channel topic it came from (with `offset`: what a holding sink releases)

    def value(self) -> Any:
        """The decoded event value."""
        return decode_value(self.raw)

    @property
    def stream(self) -> int | None:
        """The stream (connection) a reply is for, when the event carries one in its metadata."""
        stream = self.meta.get("stream")
        return stream if isinstance(stream, int) else None


@dataclass(slots=True)
class SinkBytes:
    """Many events' wire bytes as one buffer: json events through a `separate` postprocessor, joined.

    Given to sinks that declare `writes_bytes` when nothing about the events
    needs them one by one (the json codec passes the channel value through,
    and such a sink ignores metadata), so a fetched log batch is delivered
    with one write and no Python object per event.
    """

    data: bytes
    count: int
    port: str = "in"


# ---------------------------------------------------------------------------------------------- context


@dataclass
class ConnectorMetrics:
    """Counters the runtime and the connector update; exported per connector and port on /metrics."""

    events_in: int = 0
    events_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    errors: int = 0
    by_port: dict[str, list[int]] = field(default_factory=dict)  # port -> [events, bytes, errors]

    def count(self, port: str, events: int = 1, nbytes: int = 0, errors: int = 0) -> None:
        counters = self.by_port.setdefault(port, [0, 0, 0])
        counters[0] += events
        counters[1] += nbytes
        counters[2] += errors
        self.errors += errors


@dataclass
class ConnectorContext:
    """Everything a connector instance gets from the runtime.

    `quiescing` is set when the flow stops: a source finishes what it is
    doing and returns None from `pull()`; servers stop accepting.
    `open_breaker(reason)` / `close_breaker()` let a sink signal back-pressure
    it sees itself (e.g. a concurrency limit) without failing a batch.
    `stop_runtime()` asks the whole runtime to quiesce and exit (the `exit` connector).
    `state_dir` is a private directory that survives restarts (checkpoints).
    `runtime_metrics` is the runtime's own metric registry (what `/metrics` shows; the `metrics` kind).
    `release(marks)` is how a holding sink says its events up to `marks` (channel -> last offset) are delivered.
    """

    alias: str
    flow_id: str
    kind: str
    config: dict[str, Any]
    spec: ConnectorSpec
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger]
    metrics: ConnectorMetrics = field(default_factory=ConnectorMetrics)
    quiescing: asyncio.Event = field(default_factory=asyncio.Event)
    state_dir: Path | None = None
    spu_addr: str | None = None
    runtime_metrics: CollectorRegistry | None = None
    # Ports connected in the flow: a connector may skip a side nothing uses (stdio without `out`).
    outputs: frozenset[str] = frozenset()
    inputs: frozenset[str] = frozenset()
    open_breaker: Callable[[str], None] = lambda reason: None
    close_breaker: Callable[[], None] = lambda: None
    stop_runtime: Callable[[], None] = lambda: None
    release: Callable[[Mapping[str, int]], None] = lambda marks: None

    @property
    def name(self) -> str:
        """`flow/alias`, how logs and errors refer to this connector."""
        return f"{self.flow_id}/{self.alias}"

    def codec(self) -> Codec:
        """The connector's codec (json when the flow does not name one)."""
        return codec(_spec(self.spec.codec) if self.spec.codec else "json")

    def preprocessors(self) -> Preprocessors:
        """A fresh preprocessor chain: one per incoming stream."""
        return preprocessors([_spec(p) for p in self.spec.preprocessors])

    def postprocessors(self) -> Postprocessors:
        """A fresh postprocessor chain: one per outgoing stream."""
        return postprocessors([_spec(p) for p in self.spec.postprocessors])


def _spec(ref: Any) -> Any:
    return {"name": ref.name, "config": ref.config} if ref.config else ref.name


# ---------------------------------------------------------------------------------------------- connector


OptionsT = TypeVar("OptionsT")


class Connector(Generic[OptionsT]):
    """Base of every connector kind: `class XConnector(Connector[XOptions])`. Override the side(s) you implement.

    Every method has a default so a kind overrides only its sides. The side
    flags are not set by hand: they say which methods the kind implements
    (`pull` makes a source, `send` a sink, `ack` an acknowledging source,
    `send_bytes` a bytes writer), so they cannot disagree with the code.
    `self.options` holds the kind's typed options (`options_for`).
    """

    kind: ClassVar[str] = ""
    # `config` keys this kind accepts / needs; anything else is an error at load time.
    config_keys: ClassVar[frozenset[str]] = frozenset()
    required_keys: ClassVar[frozenset[str]] = frozenset()
    is_source: ClassVar[bool] = False
    is_sink: ClassVar[bool] = False
    # The source wants `ack`/`fail` for the tokens it puts on `SourceData`.
    acknowledges: ClassVar[bool] = False
    # Events bypass codec and processors (pull returns `events`; send uses `SinkEvent.value()`).
    structured: ClassVar[bool] = False
    # The sink only writes the events' wire bytes (no metadata, no per-event reply): it takes
    # `send_bytes` with a whole fetched batch when the codec leaves the channel values as they are.
    writes_bytes: ClassVar[bool] = False
    # The sink delivers later than `send` returns and says so with `ctx.release` (see the module's doc).
    holds_deliveries: ClassVar[bool] = False

    options: OptionsT

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.is_source = _implements(cls, "pull")
        cls.is_sink = _implements(cls, "send")
        cls.acknowledges = _implements(cls, "ack")
        cls.writes_bytes = _implements(cls, "send_bytes")
        cls.holds_deliveries = _implements(cls, "settle")

    def __init__(self, ctx: ConnectorContext) -> None:
        self.ctx = ctx
        self.options = self.options_for(ctx)

    @classmethod
    def options_for(cls, ctx: ConnectorContext) -> OptionsT:
        """The options of the instance `ctx` describes: `read_config`, unless they depend on the flow too."""
        return cls.read_config(ctx.alias, ctx.config)

    @classmethod
    def check_config(cls, alias: str, config: Mapping[str, Any]) -> None:
        """Reject unknown and missing `config` keys; kinds extend this to check values."""
        cfg = ConfigReader(alias, cls.kind, config)
        for key in config:
            if key not in cls.config_keys:
                known = ", ".join(sorted(cls.config_keys)) or "none"
                raise cfg.problem(f"unknown config key '{key}' (known keys: {known})")
        for key in sorted(cls.required_keys - set(config)):
            raise cfg.missing(key)
        cls.read_config(alias, config)

    @classmethod
    def read_config(cls, alias: str, config: Mapping[str, Any]) -> Any:
        """The kind's typed options from its `config` record (None for kinds without any).

        `__init__` puts the result in `self.options`, and `check_config` calls it too, so a bad
        value is a `ConnectorConfigError` before anything starts. Built-in kinds implement
        `read_options`; a user's kind may override this instead.
        """
        return cls.read_options(ConfigReader(alias, cls.kind, config))

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> Any:
        """The kind's typed options read through `cfg`, whose errors name the alias, the kind and the key."""
        return None

    @property
    def config_reader(self) -> ConfigReader:
        """This instance's `config`, for the values a kind can only check once it starts."""
        return ConfigReader(self.ctx.alias, self.kind, self.ctx.config)

    async def connect(self) -> None:
        """Open the outside end (socket, file). Raise `ConnectionLost`/`OSError` to be retried."""

    async def close(self) -> None:
        """Release everything; called once, after the last pull/send."""

    async def pull(self) -> SourceData | None:
        """Source side: the next chunk, waiting for it; None when the source is exhausted."""
        raise NotImplementedError(f"{self.kind} is not a source")

    async def resume(self, position: Any) -> None:
        """Source side, after `connect()` on a restart: continue right after `position`.

        `position` is the `SourceData.position` of the last pull whose events
        reached the channel log (the runtime stores it in the log with them,
        in the same atomic batch). Resuming there means nothing that reached
        the log is read again: with a `log` sink downstream, exactly once.
        Sources that cannot seek ignore it (their own checkpoint, if any, wins).
        """

    async def ack(self, token: Any) -> None:
        """Source side: everything derived from `token`'s data was delivered (or persisted)."""

    async def fail(self, token: Any) -> None:
        """Source side: what came from `token` could not be delivered (a reply may say so)."""

    async def send(self, events: Sequence[SinkEvent]) -> None:
        """Sink side: deliver `events`; raise `ConnectionLost` or `DeliveryFailed`."""
        raise NotImplementedError(f"{self.kind} is not a sink")

    async def send_bytes(self, batch: SinkBytes) -> None:
        """Sink side, for `writes_bytes` sinks: write many events' bytes at once; errors as `send`."""
        raise NotImplementedError(f"{self.kind} does not write bytes")

    async def settle(self) -> None:
        """Holding sink, when the flow stops: deliver everything taken and `ctx.release` it."""

    def status(self) -> dict[str, Any]:
        """Extra connector-specific status for the API (connected peers, file position...)."""
        return {}


def _implements(cls: type[Connector[Any]], method: str) -> bool:
    return getattr(cls, method) is not getattr(Connector, method)
