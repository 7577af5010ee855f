"""What the connection servers share (`tcp_server`, `unix_socket_server`, `ws_server`).

Each accepted connection is a stream of its own (the runtime keeps one
preprocessor chain per stream, so data split across reads, or two connections
writing at once, is framed correctly). What a connection reads goes through the
bounded `Inbox`: when the runtime stops pulling (back-pressure, a paused flow,
an open breaker) the readers stop reading and the transport's flow control
holds the peers back.

Replies: an event on `in` goes to the connection its `$<kind>` metadata names
(`peer_key`), which is how a flow answers on the connection a request came from
(a pipeline that passes `$` on keeps it). An event for a connection that is
gone, or without that metadata, becomes an error event on the connector's
`err` port and the rest of the batch is delivered.

A kind implements `_listen` (start serving, handing each connection to
`_serve`), `peer_key` (which connection an event's metadata names) and the
meta of a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from contraflow.connectors.base import (
    ConnectionLost,
    Connector,
    ConnectorContext,
    DeliveryFailed,
    SinkEvent,
    SourceData,
)
from contraflow.connectors.base.inbox import Inbox, pump
from contraflow.connectors.base.tls import loaded_tls
from contraflow.connectors.base.undelivered import report_undelivered


class Link(Protocol):
    """The sending side of one connection."""

    what: str

    def is_closing(self) -> bool: ...

    async def send(self, events: Sequence[SinkEvent]) -> None:
        """Write the events' frames, in order; `ConnectionLost` when the peer is gone."""

    async def close(self) -> None: ...


class Listener(Protocol):
    """A started server: asyncio's and websockets' both fit."""

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


OptionsT = TypeVar("OptionsT")


class StreamServer(Connector[OptionsT]):
    # How long replies can still be sent after the peer stopped sending (a half-closed stream).
    reply_linger_s: ClassVar[float] = 0.0

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.inbox = Inbox.for_streams(ctx)
        self.tls_context = loaded_tls(self.options)
        self._listener: Listener | None = None
        self._links: dict[Hashable, Link] = {}
        self._ids = itertools.count(1)
        self._handlers: set[asyncio.Task[Any]] = set()
        self._closing = False

    # -- what a kind implements --------------------------------------------------------------------

    async def _listen(self) -> Listener:
        """Start serving; every accepted connection is handed to `_serve`."""
        raise NotImplementedError

    def peer_key(self, meta: Mapping[str, Any]) -> Hashable | None:
        """Which connection the `$<kind>` metadata of an event names (None: none)."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------------

    async def connect(self) -> None:
        if self._listener is None:
            self._closing = False
            self._listener = await self._listen()

    def next_stream(self) -> int:
        return next(self._ids)

    async def _serve(
        self,
        stream: int,
        key: Hashable,
        link: Link,
        meta: dict[str, Any],
        chunks: AsyncIterator[tuple[bytes, dict[str, Any]]],
    ) -> None:
        """One connection, from accept to close: its chunks into the inbox as `stream`, replies to
        `key` through `link` meanwhile (and for `reply_linger_s` after the peer ended its side)."""
        if self.ctx.quiescing.is_set():
            await link.close()
            return
        self._links[key] = link
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await pump(chunks, self.inbox, stream, meta)
            if self.reply_linger_s:
                await asyncio.sleep(self.reply_linger_s)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # close() ended this handler: return normally, the servers log cancelled handlers.
        finally:
            if task is not None:
                self._handlers.discard(task)
            if self._links.get(key) is link:
                del self._links[key]
            await link.close()

    async def pull(self) -> SourceData | None:
        return await self.inbox.get()

    async def send(self, events: Sequence[SinkEvent]) -> None:
        """Write each event to its connection; one that cannot be (peer gone, no peer meta) becomes an
        error event on `err` while the rest of the batch is delivered."""
        for event in events:
            try:
                key, link = self._target(event)
                try:
                    await link.send([event])
                except ConnectionLost as err:
                    self._links.pop(key, None)
                    raise DeliveryFailed(str(err), retryable=False) from err
            except DeliveryFailed as err:
                report_undelivered(self.ctx, self.inbox, str(err), event)

    def _target(self, event: SinkEvent) -> tuple[Hashable, Link]:
        meta = event.meta.get(self.kind)
        key = self.peer_key(meta) if isinstance(meta, dict) else None
        if key is None:
            raise DeliveryFailed(f"the event has no ${self.kind}.peer to send it to", retryable=False)
        link = self._links.get(key)
        if link is None or link.is_closing():
            self._links.pop(key, None)
            raise DeliveryFailed(f"the connection {_describe(key)} is closed", retryable=False)
        return key, link

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        self._closing = True
        for handler in list(self._handlers):
            handler.cancel()
        links, self._links = list(self._links.values()), {}
        for link in links:
            await link.close()
        if self._listener is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2.0):  # not wait_for, which may swallow a cancel (3.11)
                    await self._listener.wait_closed()
            self._listener = None

    def status(self) -> dict[str, Any]:
        return {"connections": len(self._links)}


def _describe(key: Hashable) -> str:
    if isinstance(key, tuple) and len(key) == 2:
        return f"from {key[0]}:{key[1]}"
    return str(key)
