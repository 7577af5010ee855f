"""`gelf-chunking`: Graylog's GELF chunks (UDP datagrams of at most 8192 bytes), joined and split.

A chunk is `1e 0f`, an 8-byte message id, a sequence number, the chunk count
(at most 128) and a slice of the message. The preprocessor passes whole
messages through (a frame starting with `{`, or with Wayfair's `1f 3c`) and
holds chunks until their message is complete; as the GELF spec says,
messages still incomplete after 5 seconds are given up. Unlike Tremor, which
only logs them, every loss is a `CodecError` for the `err` port: a duplicate
or out-of-range chunk, a message given up, and at the end of the stream the
messages still incomplete. The postprocessor splits frames into chunks of at
most 8192 bytes with ids counting up from 0, as Tremor's does.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from contraflow.codecs.errors import CodecError, FrameErrors
from contraflow.codecs.processors.processor import Postprocessor, Preprocessor

MAGIC = b"\x1e\x0f"
WELF_MAGIC = b"\x1f\x3c"  # Wayfair's uncompressed, unchunked GELF
CHUNK_SIZE = 8192
MAX_CHUNKS = 128
EXPIRY_NS = 5_000_000_000
_HEADER = struct.Struct(">2sQBB")


@dataclass
class _Partial:
    """The chunks of one message received so far."""

    count: int
    started_ns: int
    chunks: dict[int, bytes] = field(default_factory=dict)


class GelfChunkingPreprocessor(Preprocessor):
    name = "gelf-chunking"

    clock: Callable[[], int] = staticmethod(time.monotonic_ns)
    """Where the 5-second expiry reads the time (tests put a fake clock here)."""

    def setup(self) -> None:
        self._partial: dict[int, _Partial] = {}

    def process(self, data: bytes) -> list[bytes]:
        errors = self._expire(self.clock())
        try:
            frames = self._chunk(data)
        except CodecError as err:
            errors.append(err)
            frames = []
        if errors:
            raise FrameErrors(frames, errors)
        return frames

    def finish(self) -> list[bytes]:
        lost = [self._lost(ident, partial, "the stream ended") for ident, partial in self._partial.items()]
        self._partial.clear()
        if lost:
            raise FrameErrors([], lost)
        return []

    def _chunk(self, data: bytes) -> list[bytes]:
        if data.startswith(WELF_MAGIC):
            return [data[2:]]
        if len(data) >= 2 and data[0] == 0x7B:  # '{': a whole GELF message
            return [data]
        if not data.startswith(MAGIC) or len(data) < _HEADER.size:
            raise self.error(f"not a GELF chunk: {len(data)} bytes starting {data[:2].hex(' ') or 'empty'}")
        _, ident, seq, count = _HEADER.unpack_from(data)
        body = data[_HEADER.size :]
        if count == 1:
            return [body]
        if seq >= count or count > MAX_CHUNKS:
            raise self.error(f"chunk {seq} of {count} for message {ident} is out of range")
        partial = self._partial.get(ident)
        if partial is None:
            partial = self._partial[ident] = _Partial(count, self.clock())
        if seq in partial.chunks or partial.count != count:
            del self._partial[ident]
            raise self.error(f"duplicate or inconsistent chunk {seq} of {count} for message {ident}: dropped")
        partial.chunks[seq] = body
        if len(partial.chunks) < count:
            return []
        del self._partial[ident]
        return [b"".join(partial.chunks[i] for i in range(count))]

    def _expire(self, now: int) -> list[CodecError]:
        stale = [ident for ident, partial in self._partial.items() if now - partial.started_ns > EXPIRY_NS]
        return [self._lost(ident, self._partial.pop(ident), "5 seconds passed") for ident in stale]

    def _lost(self, ident: int, partial: _Partial, why: str) -> CodecError:
        return self.error(
            f"message {ident} incomplete ({len(partial.chunks)} of {partial.count} chunks) when {why}"
        )


class GelfChunkingPostprocessor(Postprocessor):
    name = "gelf-chunking"

    def setup(self) -> None:
        self._next_id = 0

    def process(self, data: bytes) -> list[bytes]:
        step = CHUNK_SIZE - _HEADER.size
        count = max(1, -(-len(data) // step))
        if count > MAX_CHUNKS:
            raise self.error(f"a frame of {len(data)} bytes needs {count} chunks; GELF allows {MAX_CHUNKS}")
        ident = self._next_id
        self._next_id = (ident + 1) % 2**64
        return [
            _HEADER.pack(MAGIC, ident, seq, count) + data[seq * step : (seq + 1) * step]
            for seq in range(count)
        ]
