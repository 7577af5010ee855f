"""The compression algorithms `decompress` and `compress` know, under Tremor's names.

`gzip`, `zlib`, `xz2` (xz and legacy LZMA), `lz4` (frame format), `zstd`, and
`bzip2` (not in Tremor; stdlib, so free). Tremor's `snappy` and `br` have no
well-kept library pinned here: naming them is a config error that says so.

Every algorithm is driven through the same incremental decompressor interface
(`decompress` / `eof` / `unused_data`), which gives both one-shot decompression
of a frame and `StreamDecompressor` for a whole compressed stream read in
chunks (a `.gz` file). Concatenated members or frames (as `cat a.gz b.gz`
makes) decompress to their concatenation; a truncated one is an error.
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

from contraflow.codecs.errors import CodecError, ConfigError, unknown

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
        """One complete payload (possibly several concatenated members) to its content."""
        out = []
        while True:
            stream = self.new_decompressor()
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
            _ZSTD.decompressobj,
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


class StreamDecompressor:
    """Decompresses one whole stream fed in arbitrary chunks, e.g. a `.gz` file being read.

    With `algorithm="autodetect"` the first bytes of the stream pick the
    algorithm; a stream that matches none passes through unchanged. Errors are
    `CodecError`s named `decompress`, as from the preprocessor.
    """

    def __init__(self, algorithm: str = "autodetect") -> None:
        if algorithm != "autodetect" and algorithm not in ALGORITHMS:
            valid = ["autodetect", *ALGORITHMS]
            raise ConfigError(
                unknown("compression algorithm", algorithm, valid),
                kind="preprocessor",
                name="decompress",
                valid=valid,
            )
        self._algorithm = None if algorithm == "autodetect" else ALGORITHMS[algorithm]
        self._head = b""  # first bytes, kept until there are enough to detect the algorithm
        self._stream: Incremental | None = None
        self._passthrough = False

    def decompress(self, chunk: bytes) -> bytes:
        """The content bytes `chunk` completes (possibly none yet)."""
        if self._passthrough:
            return chunk
        if self._stream is None:
            self._head += chunk
            if len(self._head) < MAGIC_BYTES and self._algorithm is None:
                return b""
            chunk, self._head = self._head, b""
            if not self._start(chunk):
                return chunk
        return self._feed(chunk)

    def finish(self) -> bytes:
        """End of stream: the last content bytes; a truncated stream is a `CodecError`."""
        out = b""
        if self._head:
            out = self.decompress(self._head) if self._start(self._head) else self._head
            self._head = b""
        if self._stream is not None and not self._stream.eof:
            raise self._error("compressed stream is truncated")
        return out

    def _start(self, head: bytes) -> bool:
        """Pick the algorithm from `head`; False when the stream is not compressed."""
        algorithm = self._algorithm or detect(head)
        if algorithm is None:
            if head.startswith(SNAPPY_FRAMED_MAGIC):
                raise self._error("snappy-compressed data is not supported")
            self._passthrough = True
            return False
        self._algorithm = algorithm
        self._stream = algorithm.new_decompressor()
        return True

    def _feed(self, chunk: bytes) -> bytes:
        assert self._stream is not None and self._algorithm is not None
        out = []
        try:
            while chunk:
                if self._stream.eof:  # the next member of a concatenated stream
                    self._stream = self._algorithm.new_decompressor()
                out.append(self._stream.decompress(chunk))
                chunk = self._stream.unused_data if self._stream.eof else b""
        except DECOMPRESS_ERRORS as err:
            raise self._error(f"corrupt {self._algorithm.name} data: {err}") from None
        return b"".join(out)

    @staticmethod
    def _error(reason: str) -> CodecError:
        return CodecError("decompress", reason, kind="preprocessor")
