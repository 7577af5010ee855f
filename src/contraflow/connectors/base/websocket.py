"""What `ws_server` and `ws_client` share: one WebSocket connection as messages read and frames sent.

Each message read is one chunk of the connection's stream (the runtime's
preprocessors and codec make events of it, as Tremor does); a binary message
adds `"binary": true` to the kind's metadata. Each frame an event was encoded
to is sent as one message: text, unless the event's `$<kind>.binary` is true or
the frame is not UTF-8 (a text message must be), then binary; the messages of
a batch go out in one write.

Both ends run on the `websockets` library, without per-message compression
(Tremor's peers do not negotiate it, and it costs CPU per message).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from contraflow.connectors.base import ConnectionLost, SinkEvent

# The largest message accepted (websockets' default is 1 MiB; Tremor's peer takes 64 MiB).
MAX_MESSAGE = 64 << 20
# What both ends pass to websockets: no compression, the larger message limit.
OPTIONS: dict[str, Any] = {"compression": None, "max_size": MAX_MESSAGE}


async def messages(
    ws: Connection, kind: str, meta: dict[str, Any]
) -> AsyncIterator[tuple[bytes, dict[str, Any]]]:
    """The connection's messages as chunks with their metadata, until it closes (cleanly or not)."""
    binary = {kind: {**meta[kind], "binary": True}}
    try:
        async for message in ws:
            if isinstance(message, str):
                yield message.encode(), meta
            else:
                yield message, binary
    except ConnectionClosed:
        return


class WsLink:
    """The sending side of one WebSocket connection: one message per frame."""

    def __init__(self, ws: Connection, kind: str, what: str) -> None:
        self.ws = ws
        self.kind = kind
        self.what = what

    def is_closing(self) -> bool:
        return self.ws.state is not State.OPEN

    async def send(self, events: Sequence[SinkEvent]) -> None:
        """The batch's frames as messages, written at once and drained once (as websockets' `send`
        does for one message: a write, a syscall and a drain per message were the sink's cost)."""
        ws, protocol = self.ws, self.ws.protocol
        try:
            async with ws.send_context():  # raises ConnectionClosed unless the connection is open
                for event in events:
                    meta = event.meta.get(self.kind)
                    binary = isinstance(meta, dict) and meta.get("binary") is True
                    for frame in event.frames:
                        if not binary and _is_utf8(frame):
                            protocol.send_text(frame)
                        else:
                            protocol.send_binary(frame)
                ws.transport.write(b"".join(protocol.data_to_send()))
        except ConnectionClosed as err:
            raise ConnectionLost(f"{self.what} is closed ({err})") from err

    async def close(self) -> None:
        await self.ws.close()


def _is_utf8(frame: bytes) -> bool:
    if frame.isascii():  # the common case (JSON), checked without decoding
        return True
    try:
        frame.decode()
    except UnicodeDecodeError:
        return False
    return True
