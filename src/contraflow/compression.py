"""The compression algorithms contraflow runs, implemented once.

Two users share this table: the `compress`/`decompress` processors (one
payload per frame, Tremor's algorithm names) and the SPU's record batch
format (a whole batch body, Kafka's codec ids). Each algorithm says how to
spot it (magic bytes), which levels it takes, and how to run it.

`gzip`, `zlib`, `xz2` (xz and legacy LZMA), `lz4` (frame format), `zstd`, and
`bzip2` (not in Tremor; stdlib, so free). Tremor's `snappy` and `br` have no
well-kept library pinned here: `UNAVAILABLE` says so.

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
            "bzip2",
            tuple(b"BZh" + bytes([digit]) for digit in b"123456789"),
            range(1, 10),
            9,
            lambda level: partial(bz2.compress, compresslevel=level),
            bz2.BZ2Decompressor,
        ),
    )
}

UNAVAILABLE = {
    "snappy": "snappy needs a library contraflow does not ship",
    "br": "brotli needs a library contraflow does not ship",
}
"""Tremor algorithms contraflow cannot run, with the reason the config error gives."""

SNAPPY_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"
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
)
"""What the libraries raise for corrupt or truncated input."""


def detect(data: bytes) -> Algorithm | None:
    """The algorithm whose magic bytes start `data`, or None for data that is not compressed."""
    for algorithm in ALGORITHMS.values():
        if algorithm.matches(data):
            return algorithm
    return None
