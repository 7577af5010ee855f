"""One client connection: cut frames, dispatch them as tasks, write responses.

Requests on a connection run concurrently (up to `max_inflight`; past that the
connection simply stops reading, which is back-pressure, not an error); the
dispatcher puts requests that change state through FIFO `order_lock`s so a
client's appends land in the order it sent them.
A frame that cannot be delimited closes the connection; anything else wrong with
a request gets an error response and the connection keeps going.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Literal

from contraflow.security import tokens_match
from contraflow.spu.protocol import (
    API_VERSIONS,
    HEADER_SIZE,
    ApiKey,
    ErrorCode,
    FrameHeader,
    FramingError,
    SpuError,
    encode_header,
    pack_meta,
    parse_header,
    unpack_meta,
)
from contraflow.spu.rpc.budget import ByteBudget

log = logging.getLogger(__name__)

# Below this size a read goes out as mmap views written like any buffer:
# sendfile's per-call set-up (drain, pause, resume) costs more than the copy.
SENDFILE_MIN_BYTES = 64 * 1024

_connection_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class FileSlice:
    """Bytes of an open segment file, sent with sendfile when large enough."""

    file: BinaryIO
    position: int
    length: int

    def __len__(self) -> int:
        return self.length


Part = bytes | bytearray | memoryview | FileSlice


@dataclass(slots=True)
class Reply:
    """A handler's answer: result fields (error code added by the connection) and payload parts."""

    fields: dict[str, Any] = field(default_factory=dict)
    payload: Sequence[Part] = ()


@dataclass(frozen=True, slots=True)
class Limits:
    max_frame_bytes: int = 16 * 1024 * 1024
    max_inflight: int = 64
    max_inflight_bytes: int = 64 * 1024 * 1024  # request bodies held by one connection's requests
    max_staged_bytes: int = 64 * 1024 * 1024  # staged by one connection, in memory or spilled
    staged_memory_bytes: int = 64 * 1024 * 1024  # staging held in memory, SPU-wide; the rest spills
    max_buffered_bytes: int = 256 * 1024 * 1024  # request bodies held by the whole server
    max_connections: int = 1024
    frame_timeout_s: float = 30.0  # a frame that started arriving must be complete by then
    idle_timeout_s: float = 600.0  # a connection with no request, no running work and no stream


BODY_CHUNK = 256 * 1024  # bodies are read in chunks into one buffer: no second copy of a frame


Dispatch = Callable[["Connection", FrameHeader, memoryview], Awaitable[Reply | None]]


def error_fields(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"error": int(code), "message": message}


class Connection:
    """Owns the socket; the server's dispatcher does the work."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        dispatch: Dispatch,
        limits: Limits,
        allowed_apis: frozenset[ApiKey] | None = None,
        budget: ByteBudget | None = None,
        token: str | None = None,
    ) -> None:
        self.id = next(_connection_ids)
        self.reader = reader
        self.writer = writer
        self._dispatch = dispatch
        self.limits = limits
        self._allowed = allowed_apis
        self._budget = budget or ByteBudget(limits.max_buffered_bytes)
        self._token = token
        self.authenticated = token is None
        self._inflight = asyncio.Semaphore(limits.max_inflight)
        self._inflight_bytes = 0
        self._bytes_released = asyncio.Condition()
        self._order: dict[object, asyncio.Lock] = {}
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self.streams: dict[int, asyncio.Task[None]] = {}
        # Per-connection helpers the dispatcher keeps (e.g. ordered appenders).
        self.attachments: dict[object, Any] = {}
        self.closed = False
        self._cleaned = False
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    async def serve(self) -> None:
        """Read frames until the peer goes away or breaks framing."""
        try:
            while True:
                head = await self._read_header()
                try:
                    header = parse_header(head, self.limits.max_frame_bytes)
                except FramingError as err:
                    await self._reject_and_close(head, err)
                    return
                await self._reserve(header.body_length)
                body = await self._read_body(header.body_length)
                if not self.authenticated:
                    verdict = await self._handshake(header, body)
                    if verdict == "refused":
                        return
                    if verdict == "answered":
                        continue
                await self._inflight.acquire()
                task = asyncio.create_task(self._run(header, body))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except TimeoutError as err:
            log.warning("closing %s: %s", self.peer, err or "timed out")
        finally:
            await self.close()

    async def _handshake(
        self, header: FrameHeader, body: memoryview
    ) -> Literal["serve", "answered", "refused"]:
        """Before AUTHENTICATE succeeds only API_VERSIONS is served (probes use it). An
        AUTHENTICATE is answered here, in order, so requests pipelined after it are
        already authenticated; anything else is refused and the connection closes."""
        if header.api_key == ApiKey.API_VERSIONS:
            return "serve"
        await self._release(len(body))
        sent: Any = None
        if header.api_key == ApiKey.AUTHENTICATE:
            with contextlib.suppress(Exception):  # unreadable metadata is just no token
                sent = unpack_meta(body[: header.meta_length]).get("token")
            if self._token is not None and isinstance(sent, str) and tokens_match(sent, self._token):
                self.authenticated = True
                await self.send(header.api_key, header.correlation_id, {"error": int(ErrorCode.NONE)})
                return "answered"
        reason = "wrong token" if header.api_key == ApiKey.AUTHENTICATE else "authenticate first"
        log.warning("refused %s: %s", self.peer, reason)
        message = f"{reason}: this SPU requires a token (--token or CONTRAFLOW_TOKEN)"
        await self.send(
            header.api_key, header.correlation_id, error_fields(ErrorCode.AUTHENTICATION_FAILED, message)
        )
        return "refused"

    async def _read_header(self) -> bytes:
        """The next frame header. Waiting for its first byte is bounded by the idle timeout
        while the connection has nothing running; the rest by the frame deadline."""
        first = await self._idle_wait(self.reader.readexactly(1))
        try:
            async with asyncio.timeout(self.limits.frame_timeout_s):
                return first + await self.reader.readexactly(HEADER_SIZE - 1)
        except TimeoutError:
            raise TimeoutError(f"frame header incomplete after {self.limits.frame_timeout_s:g} s") from None

    async def _idle_wait(self, read: Awaitable[bytes]) -> bytes:
        if self._tasks or self.streams:  # a quiet client waiting on its requests or stream
            return await read
        try:
            async with asyncio.timeout(self.limits.idle_timeout_s):
                return await read
        except TimeoutError:
            raise TimeoutError(f"idle for {self.limits.idle_timeout_s:g} s") from None

    async def _read_body(self, size: int) -> memoryview:
        """Read a body (its bytes already reserved) by the frame deadline, in chunks into
        one buffer so a frame is held once, not twice."""
        body = bytearray(size)
        done = 0
        try:
            async with asyncio.timeout(self.limits.frame_timeout_s):
                while done < size:
                    chunk = await self.reader.read(min(BODY_CHUNK, size - done))
                    if not chunk:
                        raise asyncio.IncompleteReadError(bytes(body[:done]), size)
                    body[done : done + len(chunk)] = chunk
                    done += len(chunk)
        except BaseException as err:
            await self._release(size)
            if isinstance(err, TimeoutError):
                raise TimeoutError(
                    f"frame body incomplete after {self.limits.frame_timeout_s:g} s ({done} of {size} bytes)"
                ) from None
            raise
        return memoryview(body)

    async def _reserve(self, size: int) -> None:
        """Wait (not reading the socket: back-pressure) until the bodies of running
        requests leave room for this one, on this connection and in the whole server;
        a lone request is always admitted."""
        async with self._bytes_released:
            await self._bytes_released.wait_for(
                lambda: (
                    self._inflight_bytes == 0 or self._inflight_bytes + size <= self.limits.max_inflight_bytes
                )
            )
            self._inflight_bytes += size
        try:
            await self._budget.acquire(size)
        except BaseException:
            async with self._bytes_released:
                self._inflight_bytes -= size
                self._bytes_released.notify_all()
            raise

    async def _release(self, size: int) -> None:
        async with self._bytes_released:
            self._inflight_bytes -= size
            self._bytes_released.notify_all()
        await self._budget.release(size)

    async def _reject_and_close(self, head: bytes, err: FramingError) -> None:
        """Answer with the frame's correlation id (the header is readable), then hang up."""
        log.warning("closing %s: %s", self.peer, err)
        api_key = int.from_bytes(head[4:6], "big")
        correlation_id = int.from_bytes(head[8:12], "big")
        await self.send(api_key, correlation_id, error_fields(err.code, str(err)))

    async def _run(self, header: FrameHeader, body: memoryview) -> None:
        try:
            reply = await self._handle(header, body)
            if reply is not None:
                reply.fields.setdefault("error", int(ErrorCode.NONE))
                await self.send(header.api_key, header.correlation_id, reply.fields, reply.payload)
        except SpuError as err:
            await self.send(header.api_key, header.correlation_id, error_fields(err.code, str(err)))
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception as err:  # a bug: answer, log, keep serving
            log.exception("request %s from %s failed", header.api_key, self.peer)
            await self.send(header.api_key, header.correlation_id, error_fields(ErrorCode.UNKNOWN, repr(err)))
        finally:
            self._inflight.release()
            await self._release(len(body))

    async def _handle(self, header: FrameHeader, body: memoryview) -> Reply | None:
        try:
            api = ApiKey(header.api_key)
        except ValueError:
            raise SpuError(ErrorCode.UNSUPPORTED_API, f"unknown api key {header.api_key}") from None
        if self._allowed is not None and api not in self._allowed:
            raise SpuError(ErrorCode.UNSUPPORTED_API, f"{api.name} is not served on this port")
        low, high = API_VERSIONS[api]
        if not low <= header.api_version <= high:
            raise SpuError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"{api.name} version {header.api_version} not supported ({low}..{high})",
            )
        return await self._dispatch(self, header, body)

    def order_lock(self, key: object) -> asyncio.Lock:
        """FIFO lock for requests whose effects must keep the order they were sent in
        (asyncio locks wake waiters first come, first served)."""
        lock = self._order.get(key)
        if lock is None:
            lock = self._order[key] = asyncio.Lock()
        return lock

    async def send(
        self, api_key: int, correlation_id: int, fields: dict[str, Any], payload: Sequence[Part] = ()
    ) -> None:
        """Write one response frame; file slices go out with sendfile when worth it.

        A failure once the header is out leaves the peer mid-frame: the connection
        is dropped (a lost peer is not an error; anything else is logged)."""
        if self.closed:
            return
        head = encode_header(api_key, 0, correlation_id, pack_meta(fields), sum(len(p) for p in payload))
        async with self._write_lock:
            try:
                self.writer.write(head)
                for part in payload:
                    if isinstance(part, FileSlice):
                        await self._send_file(part)
                    else:
                        self.writer.write(part)
                await self.writer.drain()
            except (ConnectionError, RuntimeError):  # RuntimeError: transport closing
                self._drop()
            except (OSError, ValueError):  # a segment file closed or cut under the read
                log.exception("response to %s failed midway; closing the connection", self.peer)
                self._drop()

    async def _send_file(self, part: FileSlice) -> None:
        loop = asyncio.get_running_loop()
        sent = await loop.sendfile(self.writer.transport, part.file, part.position, part.length)
        if sent != part.length:  # the file got shorter under us: the frame cannot be completed
            raise OSError(f"sendfile sent {sent} of {part.length} bytes")

    def _drop(self) -> None:
        """Abort the transport at once; `serve` notices and cleans up."""
        self.closed = True
        self.writer.transport.abort()

    async def close(self) -> None:
        if self._cleaned:
            return
        self._cleaned = self.closed = True
        for task in [*self.streams.values(), *self._tasks]:
            task.cancel()
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()
