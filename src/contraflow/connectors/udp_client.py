"""`udp_client`: sends every event as one datagram per frame (Tremor's `udp_client`).

Config: `url` (`"host:port"`, required), `bind` (local `"host:port"` to send
from, default an ephemeral port on all interfaces), `socket_options`
(`{"SO_REUSEPORT": true}` for a `bind` port other sockets share). A frame larger than a
datagram can carry fails the event (non-retryable). The peer's port being
closed is reported by the kernel as "connection refused" on a later send;
that is a `ConnectionLost`, so the breaker opens and the runtime reconnects
(re-creates the socket) by its `reconnect` policy.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Sequence

from contraflow.connectors.base import (
    ConnectionLost,
    Connector,
    ConnectorContext,
    DeliveryFailed,
    SinkEvent,
    register,
)
from contraflow.connectors.base.netaddr import Endpoint, endpoint
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.sockets import udp_reuse_port


class _Sender(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.error: Exception | None = None

    def error_received(self, exc: Exception) -> None:
        self.error = exc


@register("udp_client")
class UdpClientConnector(Connector[tuple[Endpoint, Endpoint | None, bool]]):
    config_keys = frozenset({"url", "bind", "socket_options"})
    required_keys = frozenset({"url"})

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.url, self.bind, self.reuse_port = self.options
        self._transport: asyncio.DatagramTransport | None = None
        self._protocol: _Sender | None = None

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> tuple[Endpoint, Endpoint | None, bool]:
        bind = endpoint(cfg, "bind") if "bind" in cfg.config else None
        return endpoint(cfg), bind, udp_reuse_port(cfg)

    async def connect(self) -> None:
        await self.close()
        loop = asyncio.get_running_loop()
        local = (self.bind.host, self.bind.port) if self.bind else None
        try:
            self._transport, self._protocol = await loop.create_datagram_endpoint(
                _Sender,
                remote_addr=(self.url.host, self.url.port),
                local_addr=local,
                reuse_port=self.reuse_port or None,
            )
        except OSError as err:
            raise ConnectionLost(f"cannot reach {self.url}: {err.strerror or err}") from err

    async def send(self, events: Sequence[SinkEvent]) -> None:
        if self._transport is None or self._protocol is None:
            raise ConnectionLost(f"no socket for {self.url}")
        for event in events:
            for frame in event.frames:
                self._check()
                try:
                    self._transport.sendto(frame)
                except OSError as err:
                    raise DeliveryFailed(
                        f"datagram to {self.url}: {err.strerror or err}", retryable=False
                    ) from err
        await asyncio.sleep(0)  # let the kernel report a refused port before the batch counts as sent
        self._check()

    def _check(self) -> None:
        assert self._protocol is not None
        error, self._protocol.error = self._protocol.error, None
        if isinstance(error, ConnectionRefusedError):
            raise ConnectionLost(f"{self.url} refused the datagram (no one is listening)")
        if isinstance(error, OSError) and error.errno == errno.EMSGSIZE:
            raise DeliveryFailed(f"a frame is too large for one datagram to {self.url}", retryable=False)
        if error is not None:
            raise DeliveryFailed(f"datagram to {self.url}: {error}", retryable=True)

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport, self._protocol = None, None
