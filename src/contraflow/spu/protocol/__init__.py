"""The SPU wire protocol: framing, request types, error codes and the record batch format (no I/O here).

The record batch (`batch`, with its `compression`) is what producers send,
the log stores as is and consumers receive, so it belongs to the protocol that
every client and the server share, not to storage.
"""

from contraflow.spu.protocol.errors import RETRIABLE, ErrorCode, FramingError, SpuError
from contraflow.spu.protocol.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    HEADER_SIZE,
    Frame,
    FrameDecoder,
    FrameHeader,
    encode_frame,
    encode_header,
    pack_meta,
    parse_header,
    unpack_meta,
)
from contraflow.spu.protocol.messages import (
    API_VERSIONS,
    REQUEST_TYPES,
    Acks,
    ApiKey,
    parse_request,
)

__all__ = [
    "API_VERSIONS",
    "DEFAULT_MAX_FRAME_BYTES",
    "HEADER_SIZE",
    "REQUEST_TYPES",
    "RETRIABLE",
    "Acks",
    "ApiKey",
    "ErrorCode",
    "Frame",
    "FrameDecoder",
    "FrameHeader",
    "FramingError",
    "SpuError",
    "encode_frame",
    "encode_header",
    "pack_meta",
    "parse_header",
    "parse_request",
    "unpack_meta",
]
