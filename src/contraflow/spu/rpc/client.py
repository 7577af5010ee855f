"""One multiplexed connection to an SPU: correlation ids, frames routed as they arrive, reconnects.

Many requests share the connection; each response, as its frame arrives (`wire`), goes to
the future waiting for its correlation id, and stream pushes to their stream's queue.
When the connection drops, everything waiting fails with CONNECTION_ERROR and the
next request reconnects (with exponential backoff between attempts).
"""

from __future__ import annotations

import asyncio
import itertools
import mmap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from contraflow.backoff import first_waits
from contraflow.security import client_tls
from contraflow.spu.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    ErrorCode,
    FrameHeader,
    SpuError,
    encode_header,
    pack_meta,
    unpack_meta,
)
from contraflow.spu.protocol.address import parse_addr, tune_socket
from contraflow.spu.protocol.batch import Buffer
from contraflow.spu.rpc.wire import FrameWire

# Responses can be bigger than requests (a fetch of max_bytes plus one whole batch).
CLIENT_MAX_FRAME_BYTES = 4 * DEFAULT_MAX_FRAME_BYTES


@dataclass(frozen=True, slots=True)
class Response:
    fields: dict[str, Any]
    payload: memoryview


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter between reconnect attempts."""

    attempts: int = 6
    initial_s: float = 0.05
    max_s: float = 2.0

    def delays(self) -> list[float]:
        return first_waits(self.attempts - 1, self.initial_s, self.max_s, jitter=True)


def raise_for_error(fields: dict[str, Any]) -> None:
    code = fields.get("error", 0)
    if code:
        try:
            error = ErrorCode(code)
        except ValueError:
            error = ErrorCode.UNKNOWN
        raise SpuError(error, str(fields.get("message", error.name)))


class Connection:
    """A single TCP connection; dead once closed (the client makes a new one)."""

    def __init__(self) -> None:
        self._wire = FrameWire(CLIENT_MAX_FRAME_BYTES, self._on_frame, self._on_end)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._streams: dict[int, asyncio.Queue[Response | BaseException]] = {}
        self.closed = False
        self._last_heard = time.monotonic()  # when the last frame arrived

    @classmethod
    async def open(cls, addr: str, timeout_s: float) -> Connection:
        host, port = parse_addr(addr)
        tls = client_tls()
        conn = cls()
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancellation that
            # lands as the connect fails (a refused port) and returns the failure instead, so a
            # cancelled retry loop went on forever (a stopped follower of a dead leader).
            async with asyncio.timeout(timeout_s):
                transport, _ = await asyncio.get_running_loop().create_connection(
                    lambda: conn._wire, host, port, ssl=tls, server_hostname=host if tls else None
                )
        except (OSError, TimeoutError) as err:
            raise SpuError(ErrorCode.CONNECTION_ERROR, f"cannot connect to SPU at {addr}: {err}") from None
        if not tune_socket(transport.get_extra_info("socket")):
            transport.close()
            raise SpuError(ErrorCode.CONNECTION_ERROR, f"the SPU at {addr} closed the connection at once")
        return conn

    def next_id(self) -> int:
        return next(self._ids) & 0xFFFFFFFF

    def _on_frame(self, header: FrameHeader, body: memoryview) -> None:
        response = Response(unpack_meta(body[: header.meta_length]), body[header.meta_length :])
        self._last_heard = time.monotonic()
        self._route(header.correlation_id, response)

    def _on_end(self, error: Exception | None) -> None:
        if self.closed:
            return  # already failed (closed, or found silent): the waiters have their error
        if error is None:
            self._fail_all(SpuError(ErrorCode.CONNECTION_ERROR, "connection to the SPU closed"))
        else:
            self._fail_all(SpuError(ErrorCode.CONNECTION_ERROR, f"bad frame from the SPU: {error}"))

    def _route(self, correlation_id: int, response: Response) -> None:
        future = self._pending.pop(correlation_id, None)
        if future is not None:
            if not future.done():
                future.set_result(response)
            return
        queue = self._streams.get(correlation_id)
        if queue is not None:
            queue.put_nowait(response)

    def _fail_all(self, error: BaseException) -> None:
        self.closed = True
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        for queue in self._streams.values():
            queue.put_nowait(error)
        self._wire.close()

    def _write(
        self, api_key: int, correlation_id: int, fields: dict[str, Any], payload: Sequence[Buffer]
    ) -> None:
        if self.closed:
            raise SpuError(ErrorCode.CONNECTION_ERROR, "connection to the SPU closed")
        size = sum(len(p) for p in payload)
        self._wire.write(encode_header(api_key, 0, correlation_id, pack_meta(fields), size))
        for part in payload:
            self._wire.write(memoryview(part) if isinstance(part, mmap.mmap) else part)

    async def request(
        self,
        api_key: int,
        fields: dict[str, Any],
        payload: Sequence[Buffer] = (),
        timeout_s: float | None = None,
        correlation_id: int | None = None,
        on_sent: Callable[[], None] | None = None,
    ) -> Response:
        """Send and wait for the answer; `on_sent` runs once the request is in the socket's
        buffer (what is written after it reaches the server after it).

        A timeout with nothing heard on the connection since the request was sent closes it:
        the peer is likely cut off, and TCP retransmits ever more slowly (seconds apart), so
        requests written later on the same socket would wait behind those retries even once
        the network heals. A fresh connection gets through at once."""
        cid = self.next_id() if correlation_id is None else correlation_id
        sent = time.monotonic()
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[cid] = future
        try:
            self._write(api_key, cid, fields, payload)
            if on_sent is not None:
                on_sent()
            await self._wire.drain()
            async with asyncio.timeout(timeout_s):  # not wait_for: see `open`
                response = await future
        except TimeoutError:
            if self._last_heard < sent:
                self._fail_all(SpuError(ErrorCode.CONNECTION_ERROR, f"the SPU was silent for {timeout_s}s"))
            raise SpuError(ErrorCode.TIMEOUT, f"no answer from the SPU within {timeout_s}s") from None
        except (ConnectionError, OSError) as err:
            raise SpuError(ErrorCode.CONNECTION_ERROR, f"connection to the SPU lost: {err}") from None
        finally:
            self._pending.pop(cid, None)
            if future.done() and not future.cancelled():
                future.exception()  # the reader may have failed it too: seen, not "never retrieved"
        raise_for_error(response.fields)
        return response

    async def send_only(self, api_key: int, fields: dict[str, Any], payload: Sequence[Buffer] = ()) -> None:
        """Fire-and-forget (acks=none produce, stream credit): no response is expected."""
        try:
            self._write(api_key, self.next_id(), fields, payload)
            await self._wire.drain()
        except (ConnectionError, OSError) as err:
            raise SpuError(ErrorCode.CONNECTION_ERROR, f"connection to the SPU lost: {err}") from None

    def open_stream(self, correlation_id: int) -> asyncio.Queue[Response | BaseException]:
        queue: asyncio.Queue[Response | BaseException] = asyncio.Queue()
        self._streams[correlation_id] = queue
        return queue

    def forget_stream(self, correlation_id: int) -> None:
        self._streams.pop(correlation_id, None)

    async def close(self) -> None:
        if not self.closed:
            self._fail_all(SpuError(ErrorCode.CONNECTION_ERROR, "client closed"))
        await self._wire.wait_closed()
