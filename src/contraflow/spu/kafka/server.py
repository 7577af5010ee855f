"""The Kafka listener: frames in, one request at a time per connection, responses in order.

Kafka clients expect responses in the order they sent the requests (the Java
client checks it), and a producer's appends must keep its order, so each
connection handles its requests one after the other, as a Kafka broker does;
clients keep several connections busy in parallel. Anything wrong with a
request gets a Kafka error code and a log line saying why; only a frame that
cannot be delimited (a negative or oversized length) closes the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct

from contraflow.spu.kafka.apis import SERVED, KafkaRequest
from contraflow.spu.kafka.apis.base import ApiKey
from contraflow.spu.kafka.apis.versions import versions_response
from contraflow.spu.kafka.broker import Broker
from contraflow.spu.kafka.errors import KafkaErrorCode
from contraflow.spu.kafka.wire import (
    SIZE_PREFIX,
    MalformedRequestError,
    Reader,
    Writer,
    frame_response,
    peek_api,
    read_request_header,
)
from contraflow.spu.protocol.address import parse_addr, tune_socket
from contraflow.spu.server.budget import ByteBudget, ConnectionCount, SharedLimits

log = logging.getLogger(__name__)

Parts = list[bytes | bytearray | memoryview]


def error_only(code: KafkaErrorCode) -> Writer:
    """The answer to a request that cannot be answered in its own schema: just an error code
    (what Kafka's responses start with, after the throttle time, in most APIs)."""
    return Writer().int16(code)


async def handle_frame(broker: Broker, frame: memoryview, peer: str) -> Parts | None:
    """One request frame (without its size prefix) to response parts; None: no response."""
    api_key, version, correlation_id = peek_api(frame)
    api = SERVED.get(api_key)
    if api is None:
        log.warning("%s: unsupported Kafka api key %d (answered INVALID_REQUEST)", peer, api_key)
        return frame_response(correlation_id, error_only(KafkaErrorCode.INVALID_REQUEST))
    if not api.min_version <= version <= api.max_version:
        if api.key is ApiKey.API_VERSIONS:  # answered in v0 so the client can downgrade
            return frame_response(correlation_id, versions_response(0, KafkaErrorCode.UNSUPPORTED_VERSION))
        log.warning(
            "%s: %s v%d not supported (v%d..v%d)",
            peer,
            api.key.name,
            version,
            api.min_version,
            api.max_version,
        )
        return frame_response(correlation_id, error_only(KafkaErrorCode.UNSUPPORTED_VERSION))
    reader = Reader(frame)
    try:
        header = read_request_header(reader, api.is_flexible(version))
        body = await api.handler(broker, KafkaRequest(header, reader))
    except MalformedRequestError as err:
        log.warning("%s: malformed %s v%d: %s", peer, api.key.name, version, err)
        return frame_response(correlation_id, error_only(KafkaErrorCode.INVALID_REQUEST))
    except Exception:
        log.exception("%s: %s v%d failed", peer, api.key.name, version)
        return frame_response(correlation_id, error_only(KafkaErrorCode.UNKNOWN_SERVER_ERROR))
    return None if body is None else frame_response(correlation_id, body)


class KafkaListener:
    """Serves `broker` on `addr`; `start()` binds, `stop()` closes every connection."""

    def __init__(self, broker: Broker, addr: str, limits: SharedLimits | None = None) -> None:
        self.broker = broker
        self._addr = addr
        # The SPU's process-wide budgets (--max-buffered-bytes, --max-connections), shared
        # with its own ports; a listener on its own (tests) makes private ones.
        self._limits = limits
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.bound: tuple[str, int] = ("", 0)

    async def start(self) -> tuple[str, int]:
        if self._limits is None:
            self._limits = SharedLimits(ByteBudget(1 << 30), ConnectionCount(1024))
        host, port = parse_addr(self._addr)
        self._server = await asyncio.start_server(self._on_connect, host, port, limit=1 << 20)
        sock_host, sock_port = self._server.sockets[0].getsockname()[:2]
        self.bound = (str(sock_host), int(sock_port))
        self.broker.host, self.broker.port = self.bound  # advertised in Metadata and FindCoordinator
        self.broker.coordinator.start()
        return self.bound

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        self.broker.coordinator.stop()
        if self._server is not None:
            await self._server.wait_closed()

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._limits is not None
        connections = self._limits.connections
        if not connections.try_open():
            log.warning(
                "refused a Kafka connection: %d connections open (--max-connections)", connections.limit
            )
            writer.transport.abort()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        tune_socket(writer.get_extra_info("socket"))
        peer = writer.get_extra_info("peername")
        name = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        try:
            await self._serve(reader, writer, name)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            connections.close()
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        limit = self.broker.settings.max_frame_bytes
        assert self._limits is not None
        budget = self._limits.budget
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(SIZE_PREFIX))
            if not 8 <= size <= limit:
                log.warning("closing %s: request frame of %d bytes (allowed 8..%d)", peer, size, limit)
                return
            await budget.acquire(size)  # past the server's budget: stop reading this socket
            try:
                frame = memoryview(await reader.readexactly(size))
                parts = await handle_frame(self.broker, frame, peer)
            finally:
                await budget.release(size)
            if parts is not None:
                writer.writelines(parts)
                await writer.drain()
