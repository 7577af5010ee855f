"""Framing: how requests and responses are cut out of a TCP byte stream.

Every frame is

    u32 length          bytes that follow this field
    u16 api_key         which request (ApiKey); a response echoes it
    u16 api_version
    u32 correlation_id  chosen by the client, echoed by every response to it
    u32 meta_length     length of the msgpack map that follows
    meta                msgpack map (request fields, or error/message + result fields)
    payload             raw record-batch bytes, the rest of the frame (often empty)

The payload is kept outside msgpack so produce bytes can be appended as they
arrived and fetch responses can be written with sendfile straight from a segment.
All integers are big-endian.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgpack

from contraflow.spu.protocol.errors import ErrorCode, FramingError, SpuError

HEADER = struct.Struct(">IHHII")
HEADER_SIZE = HEADER.size  # 16
# Bytes of header counted by the length field (everything after the length itself).
HEADER_TAIL = HEADER_SIZE - 4
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
MAX_META_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """The fixed part of a frame, parsed before the body is read."""

    length: int
    api_key: int
    api_version: int
    correlation_id: int
    meta_length: int

    @property
    def body_length(self) -> int:
        """Bytes still to read after the 16-byte header."""
        return self.length - HEADER_TAIL

    @property
    def payload_length(self) -> int:
        return self.body_length - self.meta_length


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame; `meta` is still raw msgpack (decoded only by whoever needs it)."""

    api_key: int
    api_version: int
    correlation_id: int
    meta: bytes | memoryview
    payload: bytes | memoryview


def parse_header(
    data: bytes | bytearray | memoryview, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> FrameHeader:
    """Parse and sanity-check a header; a bad length means the stream is lost (FramingError)."""
    length, api_key, version, correlation_id, meta_length = HEADER.unpack_from(data)
    if length < HEADER_TAIL:
        raise FramingError(f"frame length {length} shorter than its header")
    if length + 4 > max_frame_bytes:
        raise FramingError(
            f"frame of {length + 4} bytes exceeds the limit of {max_frame_bytes}", ErrorCode.FRAME_TOO_LARGE
        )
    if meta_length > length - HEADER_TAIL or meta_length > MAX_META_BYTES:
        raise FramingError(f"metadata length {meta_length} does not fit the frame")
    return FrameHeader(length, api_key, version, correlation_id, meta_length)


def encode_header(
    api_key: int, api_version: int, correlation_id: int, meta: bytes, payload_length: int
) -> bytes:
    """Header plus metadata: everything of a frame except its payload."""
    length = HEADER_TAIL + len(meta) + payload_length
    return HEADER.pack(length, api_key, api_version, correlation_id, len(meta)) + meta


def pack_meta(fields: dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed


def unpack_meta(raw: bytes | memoryview) -> dict[str, Any]:
    """Decode a metadata map; anything else is a malformed request, never a crash."""
    if not raw:
        return {}
    try:
        value = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as err:  # msgpack raises many types (ExtraData, ValueError, TypeError...)
        raise SpuError(ErrorCode.MALFORMED_REQUEST, f"metadata is not valid msgpack: {err}") from None
    if not isinstance(value, dict):
        raise SpuError(ErrorCode.MALFORMED_REQUEST, "metadata must be a msgpack map")
    return value


def encode_frame(
    api_key: int, api_version: int, correlation_id: int, fields: dict[str, Any], payload: bytes = b""
) -> bytes:
    """A whole frame in one buffer (small frames; big payloads are written separately)."""
    return encode_header(api_key, api_version, correlation_id, pack_meta(fields), len(payload)) + payload


class FrameDecoder:
    """Incremental decoder: feed bytes as they arrive, take whole frames out.

    Used by tests and by anything reading a raw byte stream; the server reads
    header and body with exact-size reads instead, with the same checks.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buffer = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes | bytearray | memoryview) -> Iterator[Frame]:
        """Yield every complete frame; raise FramingError when the stream is unusable."""
        self._buffer += data
        while len(self._buffer) >= HEADER_SIZE:
            header = parse_header(self._buffer, self._max)
            end = HEADER_SIZE + header.body_length
            if len(self._buffer) < end:
                return
            body = bytes(self._buffer[HEADER_SIZE:end])
            del self._buffer[:end]
            yield Frame(
                header.api_key,
                header.api_version,
                header.correlation_id,
                body[: header.meta_length],
                body[header.meta_length :],
            )

    @property
    def buffered(self) -> int:
        return len(self._buffer)
