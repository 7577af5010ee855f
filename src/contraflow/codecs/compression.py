"""The compression algorithms `decompress` and `compress` know, under Tremor's names.

`gzip`, `zlib`, `xz2` (xz and legacy LZMA), `lz4` (frame format), `zstd`, and
`bzip2` (not in Tremor; stdlib, so free). Tremor's `snappy` and `br` have no
well-kept library pinned here: naming them is a config error that says so.

Each compressed frame is a complete, self-contained payload; concatenated
members or frames (as `cat a.gz b.gz` makes) decompress to their concatenation.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import lz4.frame
import zstandard

Transform = Callable[[bytes], bytes]


class _StreamDecompressor(Protocol):
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
    decompress: Transform

    def matches(self, data: bytes) -> bool:
        return data.startswith(self.magic)


def _all_frames(new: Callable[[], _StreamDecompressor], data: bytes) -> bytes:
    """Decompress every frame in `data`; a truncated last frame is an error, not a short result."""
    out = []
    while True:
        stream = new()
        out.append(stream.decompress(data))
        if not stream.eof:
            raise EOFError("compressed data is truncated")
        data = stream.unused_data
        if not data:
            return b"".join(out)


_ZSTD = zstandard.ZstdDecompressor()


def _zstd_compressor(level: int) -> Transform:
    return zstandard.ZstdCompressor(level=level).compress


ALGORITHMS: dict[str, Algorithm] = {
    algorithm.name: algorithm
    for algorithm in (
        Algorithm(
            "gzip",
            (b"\x1f\x8b",),
            range(0, 10),
            6,
            lambda level: partial(gzip.compress, compresslevel=level, mtime=0),
            gzip.decompress,
        ),
        Algorithm(
            "zlib",
            (b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda"),
            range(0, 10),
            6,
            lambda level: partial(zlib.compress, level=level),
            zlib.decompress,
        ),
        Algorithm(
            "xz2",
            (b"\xfd7zXZ\x00",),
            range(0, 10),
            6,
            lambda level: partial(lzma.compress, preset=level),
            lzma.decompress,
        ),
        Algorithm(
            "lz4",
            (b"\x04\x22\x4d\x18",),
            range(0, 17),
            4,
            lambda level: partial(lz4.frame.compress, compression_level=level),
            partial(_all_frames, lz4.frame.LZ4FrameDecompressor),
        ),
        Algorithm(
            "zstd",
            (b"\x28\xb5\x2f\xfd",),
            range(-7, 23),
            3,
            _zstd_compressor,
            partial(_all_frames, _ZSTD.decompressobj),
        ),
        Algorithm(
            "bzip2",
            tuple(b"BZh" + bytes([digit]) for digit in b"123456789"),
            range(1, 10),
            9,
            lambda level: partial(bz2.compress, compresslevel=level),
            bz2.decompress,
        ),
    )
}

UNAVAILABLE = {
    "snappy": "snappy needs a library contraflow does not ship",
    "br": "brotli needs a library contraflow does not ship",
}
"""Tremor algorithms contraflow cannot run, with the reason the config error gives."""

SNAPPY_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"

DECOMPRESS_ERRORS = (
    OSError,
    EOFError,
    ValueError,
    RuntimeError,
    zlib.error,
    lzma.LZMAError,
    zstandard.ZstdError,
)
"""What the libraries raise for corrupt or truncated input."""


def detect(data: bytes) -> Algorithm | None:
    """The algorithm whose magic bytes start `data`, or None for data that is not compressed."""
    for algorithm in ALGORITHMS.values():
        if algorithm.matches(data):
            return algorithm
    return None
