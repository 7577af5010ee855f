"""The compression algorithms contraflow runs, implemented once.

Two users share this table: the `compress`/`decompress` processors (one
payload per frame, Tremor's algorithm names) and the SPU's record batch
format (a whole batch body, Kafka's codec ids). Each algorithm says how to
spot it (magic bytes), which levels it takes, and how to run it.

`gzip`, `zlib`, `xz2` (xz and legacy LZMA), `lz4` (frame format), `zstd`,
`snappy` (the framing format, as Tremor writes it; cramjam does the raw
blocks, the frames are read here so a stream decompresses chunk by chunk), `br`
(brotli, through cramjam; whole payloads only, it has no magic bytes and no
incremental reader) and `bzip2` (not in Tremor; stdlib, so free).

Every algorithm is driven through one incremental decompressor interface
(`decompress` / `eof` / `unused_data`): it gives both one-shot decompression
and decompression of a stream read in chunks. Concatenated members or frames
(as `cat a.gz b.gz` makes) decompress to their concatenation; a truncated one
is an error. This module depends on nothing else in contraflow, so the lowest
layer (the SPU) can use it.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import cramjam
import crc32c
import lz4.frame
import zstandard

Transform = Callable[[bytes], bytes]


class Incremental(Protocol):
    """What the stdlib and the lz4/zstandard decompressor objects have in common."""

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes) -> bytes: ...


@dataclass(frozen=True)
class Algorithm:
    """One algorithm: how to spot it, which levels it takes, and how to run it."""

    name: str
    magic: tuple[bytes, ...]
    levels: range
    default_level: int
    make_compressor: Callable[[int], Transform]
    new_decompressor: Callable[[], Incremental]
    streams: bool = True
    """Whether it can decompress a stream read in chunks (brotli here cannot: whole payloads only)."""

    def matches(self, data: bytes) -> bool:
        return data.startswith(self.magic)

    def decompress(self, data: bytes) -> bytes:
        """One complete payload (possibly several concatenated members) to its content.

        Raises one of `DECOMPRESS_ERRORS` for corrupt or truncated data.
        """
        out = []
        while True:
            stream = _payload_decompressor(self)
            out.append(stream.decompress(data))
            if not stream.eof:
                raise EOFError("compressed data is truncated")
            data = stream.unused_data
            if not data:
                return b"".join(out)


# zstandard (de)compressor objects must not be used by two threads at once, and building
# one per payload costs more than a small payload: one decompressor per thread.
_local = threading.local()


def _payload_decompressor(algorithm: Algorithm) -> Incremental:
    """A decompressor for one whole payload, reset and reused per thread where it can be.

    lz4's decompression context costs more to create than a batch body of a
    few hundred records costs to decompress (16x), and it has `reset`.
    """
    reusable: dict[str, Any] | None = getattr(_local, "reusable", None)
    if reusable is None:
        reusable = _local.reusable = {}
    cached = reusable.get(algorithm.name)
    if cached is not None:
        cached.reset()
        return cached
    stream = algorithm.new_decompressor()
    if hasattr(stream, "reset"):
        reusable[algorithm.name] = stream
    return stream


def _zstd_decompressor() -> Incremental:
    shared = getattr(_local, "zstd", None)
    if shared is None:
        shared = _local.zstd = zstandard.ZstdDecompressor()
    return shared.decompressobj()


def _zstd_compressor(level: int) -> Transform:
    return zstandard.ZstdCompressor(level=level).compress


class _FramedSnappy:
    """Snappy's framing format, read chunk by chunk: a 4-byte header (type, 24-bit length) per chunk.

    Type 0x00 holds a masked CRC-32C and a raw snappy block, 0x01 the CRC and
    the data as it is, 0xff the stream identifier (which may repeat, so
    concatenated streams read as one); 0x80-0xfe are skippable, the rest
    reserved (an error). The format has no end marker: the stream is complete
    (`eof`) whenever no chunk is half received.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.unused_data = b""

    @property
    def eof(self) -> bool:
        return not self._buffer

    def decompress(self, data: bytes) -> bytes:
        buffer = self._buffer
        buffer += data
        out = []
        pos = 0
        while len(buffer) - pos >= 4:
            kind = buffer[pos]
            end = pos + 4 + int.from_bytes(buffer[pos + 1 : pos + 4], "little")
            if end > len(buffer):
                break
            body = bytes(buffer[pos + 4 : end])
            if kind in (0x00, 0x01):
                out.append(_snappy_chunk(kind, body))
            elif kind == 0xFF:
                if body != b"sNaPpY":
                    raise ValueError("bad snappy stream identifier")
            elif kind < 0x80:
                raise ValueError(f"reserved snappy chunk type {kind:#04x}")
            pos = end
        del buffer[:pos]
        return b"".join(out)


def _snappy_chunk(kind: int, body: bytes) -> bytes:
    if len(body) < 4:
        raise ValueError("snappy chunk shorter than its checksum")
    data = body[4:] if kind == 0x01 else bytes(cramjam.snappy.decompress_raw(body[4:]))
    crc = crc32c.crc32c(data)
    masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    if masked != int.from_bytes(body[:4], "little"):
        raise ValueError("snappy chunk checksum mismatch")
    return data


class _WholeBrotli:
    """Brotli through cramjam, which reads whole payloads only: `eof` once the input decompresses."""

    def __init__(self) -> None:
        self._buffer = b""
        self.eof = False
        self.unused_data = b""

    def decompress(self, data: bytes) -> bytes:
        self._buffer += data
        try:
            out = bytes(cramjam.brotli.decompress(self._buffer))
        except cramjam.DecompressionError:
            return b""  # not (yet) a whole payload; `eof` stays False
        self.eof, self._buffer = True, b""
        return out


def _snappy_compressor(level: int) -> Transform:
    return lambda data: bytes(cramjam.snappy.compress(data))


def _brotli_compressor(level: int) -> Transform:
    return lambda data: bytes(cramjam.brotli.compress(data, level=level))


ALGORITHMS: dict[str, Algorithm] = {
    algorithm.name: algorithm
    for algorithm in (
        Algorithm(
            "gzip",
            (b"\x1f\x8b",),
            range(0, 10),
            6,
            lambda level: partial(gzip.compress, compresslevel=level, mtime=0),
            partial(zlib.decompressobj, wbits=16 + zlib.MAX_WBITS),
        ),
        Algorithm(
            "zlib",
            (b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda"),
            range(0, 10),
            6,
            lambda level: partial(zlib.compress, level=level),
            zlib.decompressobj,
        ),
        Algorithm(
            "xz2",
            (b"\xfd7zXZ\x00",),
            range(0, 10),
            6,
            lambda level: partial(lzma.compress, preset=level),
            lzma.LZMADecompressor,
        ),
        Algorithm(
            "lz4",
            (b"\x04\x22\x4d\x18",),
            range(0, 17),
            4,
            lambda level: partial(lz4.frame.compress, compression_level=level),
            lz4.frame.LZ4FrameDecompressor,
        ),
        Algorithm(
            "zstd",
            (b"\x28\xb5\x2f\xfd",),
            range(-7, 23),
            3,
            _zstd_compressor,
            _zstd_decompressor,
        ),
        Algorithm(
            "snappy",
            (b"\xff\x06\x00\x00sN",),
            range(0, 1),
            0,
            _snappy_compressor,
            _FramedSnappy,
        ),
        Algorithm("br", (), range(0, 12), 11, _brotli_compressor, _WholeBrotli, streams=False),
        Algorithm(
            "bzip2",
            tuple(b"BZh" + bytes([digit]) for digit in b"123456789"),
            range(1, 10),
            9,
            lambda level: partial(bz2.compress, compresslevel=level),
            bz2.BZ2Decompressor,
        ),
    )
}

MAGIC_BYTES = 6
"""Enough leading bytes to tell every algorithm apart."""

DECOMPRESS_ERRORS = (
    OSError,
    EOFError,
    ValueError,
    RuntimeError,
    zlib.error,
    lzma.LZMAError,
    zstandard.ZstdError,
    cramjam.DecompressionError,
)
"""What the libraries raise for corrupt or truncated input."""


def detect(data: bytes) -> Algorithm | None:
    """The algorithm whose magic bytes start `data`, or None for data that is not compressed."""
    for algorithm in ALGORITHMS.values():
        if algorithm.magic and algorithm.matches(data):
            return algorithm
    return None
