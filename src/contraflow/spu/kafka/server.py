"""The Kafka listener: frames in, responses in order.

Kafka clients expect responses in the order they sent the requests (the Java
client checks it), and a producer's appends must keep its order. Requests of a
connection are handled one after the other, as a Kafka broker does, except
runs of produce requests: a producer pipelines them, so they are read and
queued while earlier ones are appended (in order per partition), which keeps
the thread pool busy instead of idle between one request and the next. Anything wrong with a
request gets a Kafka error code and a log line saying why; only a frame that
cannot be delimited (a negative or oversized length) closes the connection.
"""

from __future__ import annotations

import asyncio
import logging

from contraflow.spu.kafka.apis import SERVED, KafkaRequest
from contraflow.spu.kafka.apis.base import ApiKey
from contraflow.spu.kafka.apis.versions import versions_response
from contraflow.spu.kafka.broker import Broker
from contraflow.spu.kafka.connection import BadFrameError, FrameConnection
from contraflow.spu.kafka.errors import KafkaErrorCode
from contraflow.spu.kafka.wire import (
    MalformedRequestError,
    Reader,
    Writer,
    frame_response,
    peek_api,
    read_request_header,
)
from contraflow.spu.protocol.address import parse_addr, tune_socket
from contraflow.spu.rpc.budget import ByteBudget, ConnectionCount, SharedLimits

log = logging.getLogger(__name__)

Parts = list[bytes | bytearray | memoryview]
MAX_PIPELINED = 16  # requests of one connection read ahead of their answers
Replies = asyncio.Queue["asyncio.Task[Parts | None] | None"]


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
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: FrameConnection(self._on_connect), host, port)
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

    def _on_connect(self, conn: FrameConnection) -> None:
        task = asyncio.create_task(self._run(conn))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _run(self, conn: FrameConnection) -> None:
        assert self._limits is not None and conn.transport is not None
        connections = self._limits.connections
        if not connections.try_open():
            log.warning(
                "refused a Kafka connection: %d connections open (--max-connections)", connections.limit
            )
            conn.abort()
            return
        try:
            if tune_socket(conn.transport.get_extra_info("socket")):  # False: the peer already left
                await self._serve(conn)
        except BadFrameError as err:
            log.warning("closing %s: %s", conn.peer, err)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            connections.close()
            conn.close()

    async def _serve(self, conn: FrameConnection) -> None:
        """Read requests and answer them in order. Consecutive produce requests are handled
        while the next ones are read (their appends keep their order per partition); any
        other request waits until everything before it is done, and what follows waits for it."""
        assert self._limits is not None
        replies: Replies = asyncio.Queue(MAX_PIPELINED)
        sender = asyncio.create_task(_send_in_order(replies, conn))
        running: set[asyncio.Task[Parts | None]] = set()
        barrier: asyncio.Task[Parts | None] | None = None  # the last request that runs alone
        try:
            while not sender.done():
                try:
                    frame = await conn.read_frame(self.broker.settings.max_frame_bytes, self._limits.budget)
                except asyncio.IncompleteReadError:  # the client is done sending: answer what came
                    await replies.put(None)
                    await sender
                    return
                pipelined = peek_api(frame)[0] == ApiKey.PRODUCE
                if pipelined and barrier is not None:
                    await asyncio.wait([barrier])
                elif not pipelined and running:
                    await asyncio.wait(running)
                task = asyncio.create_task(self._answer(frame, conn.peer))
                running.add(task)
                task.add_done_callback(running.discard)
                barrier = None if pipelined else task
                await replies.put(task)  # a full queue stops reading: back-pressure
        finally:
            for task in (sender, *running):
                task.cancel()
            await asyncio.gather(sender, *running, return_exceptions=True)
        sender.result()  # a write that failed ends the connection with its error

    async def _answer(self, frame: memoryview, peer: str) -> Parts | None:
        assert self._limits is not None
        try:
            return await handle_frame(self.broker, frame, peer)
        finally:
            await self._limits.budget.release(len(frame))


async def _send_in_order(replies: Replies, conn: FrameConnection) -> None:
    """Write each answer once it is ready, in the order the requests came; None: stop."""
    while (answer := await replies.get()) is not None:
        parts = await answer
        if parts is not None:
            await conn.send(parts)
