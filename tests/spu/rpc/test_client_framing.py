"""The client cuts frames from received bytes however the stream is split.

Small frames are cut out of one receive buffer, many per receive or one in many
pieces; a large body is received into a buffer of its own, partly from what was
already in the receive buffer. A peer that breaks the framing, or leaves mid-frame,
fails what is pending with a connection error.
"""

from __future__ import annotations

import asyncio
import functools

import pytest

from contraflow.spu.protocol import HEADER_SIZE, ErrorCode, SpuError, encode_header, pack_meta, parse_header
from contraflow.spu.protocol.frames import FrameHeader
from contraflow.spu.rpc.client import CLIENT_MAX_FRAME_BYTES, Connection
from contraflow.spu.rpc.wire import OWN_BUFFER_BYTES, FrameWire

# small and large frames, then small ones that fill the receive buffer until what is left
# of a partial one is moved to its start
BODY_SIZES = [0, 10, OWN_BUFFER_BYTES + 3, 5, 3 * OWN_BUFFER_BYTES, 1, 7] + [OWN_BUFFER_BYTES - 40] * 6


@functools.cache
def frame(correlation_id: int, size: int) -> bytes:
    payload = ((b"%d." % correlation_id) * size)[:size]
    return encode_header(3, 0, correlation_id, pack_meta({"n": correlation_id}), size) + payload


def received(stream: bytes, piece: int) -> list[tuple[int, bytes]]:
    """Feed `stream` to a FrameWire `piece` bytes at a time (at most what it asks for)."""

    async def feed() -> list[tuple[int, bytes]]:
        frames: list[tuple[int, bytes]] = []

        def on_frame(header: FrameHeader, body: memoryview) -> None:
            frames.append((header.correlation_id, bytes(body[header.meta_length :])))

        wire = FrameWire(
            CLIENT_MAX_FRAME_BYTES, on_frame, lambda err: frames.append((-1, repr(err).encode()))
        )
        done = 0
        while done < len(stream):
            buffer = wire.get_buffer(-1)
            size = min(piece, len(buffer), len(stream) - done)
            buffer[:size] = stream[done : done + size]
            wire.buffer_updated(size)
            done += size
        return frames

    return asyncio.run(feed())


@pytest.mark.parametrize("piece", [1 << 30, 1000, 13])
def test_frames_arrive_whole_and_in_order_however_the_bytes_are_split(piece: int) -> None:
    stream = b"".join(frame(cid, size) for cid, size in enumerate(BODY_SIZES, 1))
    expected = [(cid, frame(cid, size)[-size:] if size else b"") for cid, size in enumerate(BODY_SIZES, 1)]
    assert received(stream, piece) == expected


async def answer_with(reply: bytes) -> SpuError:
    """A request to a peer that answers any request with `reply` and then closes."""

    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        header = parse_header(await reader.readexactly(HEADER_SIZE))
        await reader.readexactly(header.body_length)
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(peer, "127.0.0.1", 0)
    async with server:
        conn = await Connection.open(f"127.0.0.1:{server.sockets[0].getsockname()[1]}", 1.0)
        try:
            await conn.request(1, {}, timeout_s=5.0)
        except SpuError as err:
            return err
        finally:
            await conn.close()
    raise AssertionError("the request was answered")


def test_an_oversized_frame_and_a_peer_leaving_mid_body_fail_the_request() -> None:
    too_large = encode_header(3, 0, 1, b"", CLIENT_MAX_FRAME_BYTES)
    oversized = asyncio.run(answer_with(too_large))
    assert oversized.code == ErrorCode.CONNECTION_ERROR
    assert "bad frame from the SPU: frame of" in str(oversized)
    cut = asyncio.run(answer_with(frame(1, 2 * OWN_BUFFER_BYTES)[:-100]))
    assert (cut.code, str(cut)) == (ErrorCode.CONNECTION_ERROR, "connection to the SPU closed")
