"""A WebSocket connection's data frames cut a read at a time, not parsed a message at a time.

websockets parses each frame through a chain of generators and hands each
message through its queue and a `recv()`; with one event per message (how
WebSocket peers send events) that per-message work was most of what a
`ws_server` flow cost beyond the same flow on `tcp_server`.
`BatchedReads`, mixed into websockets' server and client connections, cuts
the whole, unfragmented text and binary frames of each read itself (unmasked
by websockets' C `apply_mask`) and queues them to the connection's messages
as they came, or, when the connector's preprocessors frame across chunks
(`inbox.chunks_can_join`: the runtime would join them anyway), consecutive
frames of one type as one message of up to `JOIN_LIMIT` bytes.

Everything else goes through websockets' own parser, unchanged: the opening
handshake, control frames (pings, pongs, close), fragments, a frame with RSV
bits, a wrongly masked one or one over the size limit. That parser is only
ever given whole frames, so it stays at a frame boundary; an incomplete frame
at the end of a read waits here for the rest. A fragment, a close or anything
that leaves the connection not open hands the connection (and what waits
here) to websockets for good.
"""

from __future__ import annotations

from typing import Any, ClassVar

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.server import ServerConnection
from websockets.frames import Frame, Opcode
from websockets.protocol import Side, State
from websockets.speedups import apply_mask

from contraflow.connectors.base.inbox import JOIN_LIMIT

FIN = 0x80
RSV_OPCODE = 0x7F
MASK_BIT = 0x80
LENGTH = 0x7F
TEXT, BINARY, PING, PONG = 0x1, 0x2, 0x9, 0xA
MAX_CONTROL = 125  # the longest payload a control frame may have
CUT_HERE = {FIN | TEXT: Opcode.TEXT, FIN | BINARY: Opcode.BINARY}


class BatchedReads:
    """The data-frame path of a websockets connection (see the module docstring)."""

    protocol: Any
    # Consecutive frames of one type queued as one message (`inbox.chunks_can_join`).
    joins: ClassVar[bool] = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cutting = False  # past the handshake, at a frame boundary: reads are cut here
        self._handed_over = False  # websockets parses everything from now on
        # The start of a frame the next reads complete, and its whole size once its header is in
        # (a large frame comes in many reads: they are only gathered until it is complete).
        self._partial = bytearray()
        self._needed = 0

    def data_received(self, data: bytes) -> None:
        opened = not self._handed_over and self.protocol.state is State.OPEN
        if opened and (self._cutting or _at_frame_boundary(self.protocol)):
            self._cutting = True
            if not self._partial:
                self._cut(data)
                return
            self._partial += data
            if len(self._partial) >= self._needed:
                self._cut(bytes(self._partial))
            return
        if self._cutting:  # the connection is closing (our side began it): websockets' from now on
            self._hand_over(bytes(self._partial) + data)
        else:
            super().data_received(data)  # type: ignore[misc]

    def eof_received(self) -> None:
        self._hand_over(bytes(self._partial))  # a frame cut short is websockets' to report
        super().eof_received()  # type: ignore[misc]

    def _cut(self, buf: bytes) -> None:
        masked = self.protocol.side is Side.SERVER
        limit = self.protocol.max_message_size
        pos, end, size = 0, len(buf), len(buf)
        self._needed = 0
        pending: list[tuple[int, list[bytes], int]] = []  # (head byte, parts, bytes) per message
        while size - pos >= 2:
            head, length_byte = buf[pos], buf[pos + 1]
            at = pos + 2
            length = length_byte & LENGTH
            if length == 126:
                if size - at < 2:
                    break
                length, at = int.from_bytes(buf[at : at + 2], "big"), at + 2
            elif length == 127:
                if size - at < 8:
                    break
                length, at = int.from_bytes(buf[at : at + 8], "big"), at + 8
            masked_right = bool(length_byte & MASK_BIT) == masked
            cut_here = head in CUT_HERE and masked_right and (limit is None or length <= limit)
            control = (head & RSV_OPCODE) in (PING, PONG) and masked_right and length <= MAX_CONTROL
            if not cut_here and not control:  # websockets' from here on, as soon as the header says so
                self._queue(pending)
                self._hand_over(buf[pos:])
                return
            key = at
            if length_byte & MASK_BIT:
                at += 4
            end = at + length
            if end > size:
                self._needed = end - pos
                break
            if cut_here:
                data = apply_mask(buf[at:end], buf[key:at]) if masked else buf[at:end]
                self._add(pending, head, data)
            else:  # a ping or a pong, whole: websockets answers or acknowledges it
                self._queue(pending)
                pending = []
                if not self._hand_over(buf[pos:end], control=True):
                    self._hand_over(buf[end:])
                    return
            pos = end
        self._queue(pending)
        self._partial = bytearray(buf[pos:])

    def _add(self, pending: list[tuple[int, list[bytes], int]], head: int, data: bytes) -> None:
        if self.joins and pending and pending[-1][0] == head and pending[-1][2] < JOIN_LIMIT:
            _, parts, size = pending[-1]
            parts.append(data)
            pending[-1] = (head, parts, size + len(data))
        else:
            pending.append((head, [data], len(data)))

    def _queue(self, pending: list[tuple[int, list[bytes], int]]) -> None:
        for head, parts, _ in pending:
            data = parts[0] if len(parts) == 1 else b"".join(parts)
            self.process_event(Frame(CUT_HERE[head], data))  # type: ignore[attr-defined]

    def _hand_over(self, frames: bytes, control: bool = False) -> bool:
        """Give websockets whole frames (or, handing over for good, everything left); True while
        reads can still be cut here (a ping or pong, after which the connection is still open)."""
        if not control:
            self._cutting, self._handed_over, self._partial = False, True, bytearray()
        if frames:
            super().data_received(frames)  # type: ignore[misc]
        if control and self.protocol.state is not State.OPEN:
            self._cutting, self._handed_over = False, True
        return self._cutting


def _at_frame_boundary(protocol: Any) -> bool:
    """websockets' parser waits for the next frame's first byte (not inside a frame, or a handshake).

    Read from the generators it is suspended in: if websockets changes them, this
    says False and the connection is simply parsed by websockets."""
    parser = protocol.parser
    while getattr(parser, "gi_yieldfrom", None) is not None:
        parser = parser.gi_yieldfrom
    return (
        getattr(getattr(parser, "gi_code", None), "co_name", None) == "at_eof" and not protocol.reader.buffer
    )


class BatchedServerConnection(BatchedReads, ServerConnection):
    """websockets' server connection, its data frames cut a read at a time."""


class JoiningServerConnection(BatchedServerConnection):
    joins = True


class BatchedClientConnection(BatchedReads, ClientConnection):
    """websockets' client connection, its data frames cut a read at a time."""


class JoiningClientConnection(BatchedClientConnection):
    joins = True


def server_connection(joins: bool) -> type[ServerConnection]:
    """What `serve(create_connection=...)` takes, for a connector whose chunks can be joined or not."""
    return JoiningServerConnection if joins else BatchedServerConnection


def client_connection(joins: bool) -> type[ClientConnection]:
    """What `connect(create_connection=...)` takes, for a connector whose chunks can be joined or not."""
    return JoiningClientConnection if joins else BatchedClientConnection
