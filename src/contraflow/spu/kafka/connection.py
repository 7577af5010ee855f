"""One Kafka client connection's bytes: request frames in, answers out.

Each request frame is received straight into a buffer of its own
(`asyncio.BufferedProtocol`), with no copy between the socket and the
handler: a stream reader would copy a 1 MB produce request three times
(into its buffer, out as bytes, and the rest of its buffer down). The frame
is also writable, so a producer's batch inside it can be stamped with its log
offset and kept as the fetch answer for those records, again without a copy.

Reading is pulled: the socket is read only while the listener waits for the
next frame, so a busy connection leaves further requests in the kernel's
buffer (back-pressure on the client), and a frame's bytes are reserved in the
server's budget before its buffer exists.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Iterable

import numpy as np

from contraflow.spu.kafka.wire import SIZE_PREFIX
from contraflow.spu.protocol.batch import WireBuffer
from contraflow.spu.rpc.budget import ByteBudget
from contraflow.spu.rpc.wire import WritePauses

_SIZE = struct.Struct(">i")
GATHER_BELOW = 16 * 1024  # answer parts smaller than this are copied together into one write


class BadFrameError(ConnectionError):
    """A frame that cannot be delimited (its size is out of bounds): the connection closes."""


class FrameConnection(WritePauses, asyncio.BufferedProtocol):
    """`read_frame()` returns the next request frame; `write()` + `drain()` send answers."""

    def __init__(self, on_open: Callable[[FrameConnection], None]) -> None:
        self._on_open = on_open
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._target = memoryview(bytearray(0))
        self._filled = 0
        self._filling: asyncio.Future[None] | None = None
        self._lost: BaseException | None = None
        self._ended = False  # the client sent its end of stream (or the connection is gone)

    # -- reading --------------------------------------------------------------------------------------

    async def read_frame(self, max_bytes: int, budget: ByteBudget) -> memoryview:
        """The next frame without its size prefix, its size held in `budget` (reserved before
        its buffer exists; the caller releases it once the frame is answered).

        Raises asyncio.IncompleteReadError at the end of the stream, BadFrameError for
        a size outside 8..max_bytes."""
        prefix = bytearray(SIZE_PREFIX)
        await self._fill(prefix)
        (size,) = _SIZE.unpack(prefix)
        if not 8 <= size <= max_bytes:
            raise BadFrameError(f"request frame of {size} bytes (allowed 8..{max_bytes})")
        await budget.acquire(size)  # past the server's budget: wait, not reading this socket
        frame = np.empty(size, dtype=np.uint8).data  # not zeroed first, unlike a bytearray
        try:
            await self._fill(frame)
        except BaseException:
            await budget.release(size)
            raise
        return frame

    async def _fill(self, target: bytearray | memoryview) -> None:
        if self._ended or self.transport is None:
            raise asyncio.IncompleteReadError(b"", len(target))
        self._target, self._filled = memoryview(target), 0
        self._filling = asyncio.get_running_loop().create_future()
        self.transport.resume_reading()
        try:
            await self._filling
        finally:
            self._filling = None

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._target[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        if self._filled == len(self._target):
            assert self.transport is not None
            self.transport.pause_reading()  # the rest waits until the next frame is asked for
            if self._filling is not None and not self._filling.done():
                self._filling.set_result(None)

    def eof_received(self) -> bool:
        self._ended = True
        self._stop_filling(
            asyncio.IncompleteReadError(bytes(self._target[: self._filled]), len(self._target))
        )
        return True  # a half-closed client still gets the answers to what it sent

    # -- writing --------------------------------------------------------------------------------------

    async def send(self, parts: Iterable[WireBuffer]) -> None:
        """Write an answer: small parts gathered into one write (a small answer is one
        send), each large part on its own once the transport's buffer is empty.

        The transport sends a part straight from its buffer when nothing is queued
        before it and copies only what the socket did not take; `writelines` would
        first join every part into one bytes object (16 MiB for a large fetch) and
        then copy the unsent rest of it again."""
        small = bytearray()
        for part in parts:
            if len(part) < GATHER_BELOW:
                small += part
                continue
            if small:
                await self._write(small)
                small = bytearray()
            await self._write(part)
        if small:
            await self._write(small)

    async def _write(self, data: WireBuffer) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
        await self.drain()

    async def drain(self) -> None:
        """Wait while the transport holds unsent bytes (its high-water mark is 0)."""
        await self._until_writable()
        if self._lost is not None:
            raise ConnectionResetError("connection lost")

    # -- lifecycle ------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.pause_reading()  # until a frame is asked for
        transport.set_write_buffer_limits(high=0)  # `send` waits for each part to leave
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._on_open(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc or ConnectionResetError("connection closed")
        self._ended = True
        self._stop_filling(asyncio.IncompleteReadError(b"", None))
        self.resume_writing()  # a drain waiting on it sees the loss

    def _stop_filling(self, err: BaseException) -> None:
        if self._filling is not None and not self._filling.done():
            self._filling.set_exception(err)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
