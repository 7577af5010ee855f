"""`udp_server`: every datagram received is a chunk of input (Tremor's `udp_server`).

Config: `url` (`"host:port"`, required), `buf_size` (largest datagram
accepted, default 8192; longer ones are truncated by the kernel, as in
Tremor), `socket_options` (`{"SO_REUSEPORT": true}`: several servers, in
this process or others, share the port). Each datagram is its own stream, so a `separate` preprocessor
never joins the tail of one datagram to the next; events carry
`$udp_server = {"peer": {"host", "port"}}`.

UDP has no back-pressure: when the runtime does not pull fast enough and the
bounded queue is full, datagrams are dropped and counted (`errors` on port
`out`, and a warning at most once per second) rather than buffered without
limit.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from contraflow.connectors.base import Connector, ConnectorContext, SourceData, register
from contraflow.connectors.base.inbox import Inbox
from contraflow.connectors.base.netaddr import Endpoint, endpoint
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.sockets import udp_reuse_port

QUEUE_DATAGRAMS = 4096


class _Receiver(asyncio.DatagramProtocol):
    def __init__(self, owner: UdpServerConnector) -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.owner.received(data, addr)


@register("udp_server")
class UdpServerConnector(Connector[tuple[Endpoint, int, bool]]):
    config_keys = frozenset({"url", "buf_size", "socket_options"})
    required_keys = frozenset({"url"})

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.url, self.buf_size, self.reuse_port = self.options
        self.inbox = Inbox(ctx.quiescing, QUEUE_DATAGRAMS)
        self._transport: asyncio.DatagramTransport | None = None
        self._streams = itertools.count(1)
        self.dropped = 0
        self._warned_at = 0.0

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> tuple[Endpoint, int, bool]:
        """(where to listen, receive buffer size, SO_REUSEPORT)."""
        return endpoint(cfg), cfg.integer("buf_size", 8192, minimum=1), udp_reuse_port(cfg)

    @property
    def port(self) -> int:
        assert self._transport is not None
        return int(self._transport.get_extra_info("sockname")[1])

    async def connect(self) -> None:
        if self._transport is None:
            loop = asyncio.get_running_loop()
            self._transport, _ = await loop.create_datagram_endpoint(
                lambda: _Receiver(self),
                local_addr=(self.url.host, self.url.port),
                reuse_port=self.reuse_port or None,
            )

    def received(self, data: bytes, addr: tuple[Any, int]) -> None:
        meta = {"udp_server": {"peer": {"host": str(addr[0]), "port": int(addr[1])}}}
        # A datagram is a whole stream: it ends with its data, so the preprocessors flush and forget it.
        item = SourceData(data=data[: self.buf_size], stream=next(self._streams), meta=meta, end_stream=True)
        if not self.inbox.put_nowait(item):
            self.dropped += 1
            self.ctx.metrics.count("out", 0, len(data), errors=1)
            now = time.monotonic()
            if now - self._warned_at > 1.0:
                self._warned_at = now
                self.ctx.logger.warning("input queue full: %d datagrams dropped so far", self.dropped)

    async def pull(self) -> SourceData | None:
        return await self.inbox.get()

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def status(self) -> dict[str, Any]:
        return {"dropped": self.dropped}
