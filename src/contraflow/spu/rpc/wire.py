"""A client connection's socket side: frames cut from received bytes, writes with flow control.

Frames are received with `recv_into` (`asyncio.BufferedProtocol`), not through a
StreamReader: small frames are cut out of one reusable receive buffer (often many per
receive), and a large body (a fetch's megabytes) is received straight into a buffer of
its own, so its bytes are copied once from the kernel. A StreamReader copied each byte
about five times (a new bytes per receive, its buffer, the slice, `bytes()`, the body),
a fifth of a Spark read task's CPU.

Frames are handed over in the receiving callback (no reader task in between), in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np

from contraflow.spu.protocol import HEADER_SIZE, FrameHeader, FramingError, SpuError, parse_header

OWN_BUFFER_BYTES = 64 << 10  # a body at least this large is received into its own buffer
RECEIVE_BUFFER_BYTES = 4 * OWN_BUFFER_BYTES  # room for many small frames per receive

FrameHandler = Callable[[FrameHeader, memoryview], None]
EndHandler = Callable[[Exception | None], None]


class WritePauses(asyncio.BaseProtocol):
    """The transport's pause/resume of writing as a future that `drain`s wait on (shielded:
    one drain cancelled leaves the others waiting)."""

    _writable: asyncio.Future[None] | None = None  # pending while writing is paused

    async def _until_writable(self) -> None:
        if self._writable is not None:
            await asyncio.shield(self._writable)

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None


class FrameWire(WritePauses, asyncio.BufferedProtocol):
    """Calls `on_frame(header, body)` for each frame and `on_end(error)` once when the
    connection ends (None for a close or EOF; the FramingError, or the SpuError of bad
    metadata, that `on_frame` or the header raised for an unreadable stream)."""

    def __init__(self, max_frame_bytes: int, on_frame: FrameHandler, on_end: EndHandler) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._on_frame = on_frame
        self._on_end: EndHandler | None = on_end
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray(RECEIVE_BUFFER_BYTES)
        self._view = memoryview(self._buffer)
        self._start = 0  # unparsed bytes are self._buffer[self._start : self._end]
        self._end = 0
        self._body: memoryview | None = None  # a large body being received in place
        self._body_header: FrameHeader | None = None
        self._body_filled = 0
        self._closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- receiving ------------------------------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return self._body[self._body_filled :]
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._buffer) - self._end < OWN_BUFFER_BYTES:
            # What is left is a partial header or small frame (under OWN_BUFFER_BYTES): move it
            # down (through a copy: a bytearray's slice assignment may not handle an overlap).
            kept = self._end - self._start
            self._buffer[:kept] = bytes(self._view[self._start : self._end])
            self._start, self._end = 0, kept
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self._body is not None:
                self._body_filled += nbytes
                self._finish_body()
            else:
                self._end += nbytes
            if self._body is None:
                self._cut_frames()
        except (FramingError, SpuError) as err:
            self._end_with(err)
            if self.transport is not None:
                self.transport.close()

    def _cut_frames(self) -> None:
        """Hand over every whole frame in the receive buffer; start a large body in place."""
        view = self._view
        while self._end - self._start >= HEADER_SIZE:
            header = parse_header(view[self._start : self._start + HEADER_SIZE], self._max_frame_bytes)
            body_at = self._start + HEADER_SIZE
            size = header.body_length
            if size >= OWN_BUFFER_BYTES:
                self._start_body(header, body_at)
                if self._body is not None:
                    return  # the rest of it arrives straight into the body
                continue
            if self._end - body_at < size:
                return
            self._start = body_at + size
            self._on_frame(header, memoryview(bytes(view[body_at : body_at + size])))

    def _start_body(self, header: FrameHeader, body_at: int) -> None:
        body = np.empty(header.body_length, dtype=np.uint8).data  # not zeroed first, unlike a bytearray
        arrived = min(self._end - body_at, header.body_length)
        body[:arrived] = self._view[body_at : body_at + arrived]
        self._start = body_at + arrived
        self._body, self._body_header, self._body_filled = body, header, arrived
        self._finish_body()

    def _finish_body(self) -> None:
        body, header = self._body, self._body_header
        if body is None or header is None or self._body_filled < len(body):
            return
        self._body = self._body_header = None
        self._on_frame(header, body)

    def eof_received(self) -> bool:
        return False  # the transport closes itself: connection_lost ends everything

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_with(None)
        self.resume_writing()  # a drain waiting on it sees the loss
        if not self._closed.done():
            self._closed.set_result(None)

    def _end_with(self, error: Exception | None) -> None:
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end(error)

    # -- writing and lifecycle ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait while the transport is over its high-water mark; ConnectionResetError once lost."""
        await self._until_writable()
        if self._closed.done():
            raise ConnectionResetError("connection lost")

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)
