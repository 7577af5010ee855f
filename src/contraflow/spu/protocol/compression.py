"""Batch compression codecs.

A batch body is compressed as a whole, so the codec sees many similar records
at once (that is where the ratio comes from). Codec ids follow Kafka's
attribute bits so the numbers mean the same thing to anyone who knows Kafka.
"""

from __future__ import annotations

import enum
import threading
import zlib

import lz4.frame
import zstandard

from contraflow.errors import UserError

_GZIP_WBITS = 31  # zlib with a gzip container (header + CRC32 trailer)


class Compression(enum.IntEnum):
    """Codec stored in the low three bits of a batch's attributes."""

    NONE = 0
    GZIP = 1
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | Compression | None) -> Compression:
        """Accept a codec by name ("zstd") or value; None means no compression."""
        if name is None:
            return cls.NONE
        if isinstance(name, Compression):
            return name
        try:
            return cls[name.strip().upper()]
        except KeyError:
            choices = ", ".join(c.name.lower() for c in cls)
            raise UserError(f"unknown compression {name!r} (choose one of: {choices})") from None


# zstandard compressor/decompressor objects are not safe to share between
# threads, and building one per call costs more than compressing a small batch.
_local = threading.local()


def _zstd_compressor() -> zstandard.ZstdCompressor:
    comp = getattr(_local, "zc", None)
    if comp is None:
        comp = _local.zc = zstandard.ZstdCompressor(level=3)
    return comp


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    dec = getattr(_local, "zd", None)
    if dec is None:
        dec = _local.zd = zstandard.ZstdDecompressor()
    return dec


def compress(codec: Compression, data: bytes | bytearray | memoryview) -> bytes:
    """Compress a whole batch body with `codec`."""
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        comp = zlib.compressobj(6, zlib.DEFLATED, _GZIP_WBITS)
        return comp.compress(data) + comp.flush()
    if codec is Compression.ZSTD:
        return _zstd_compressor().compress(data)
    if codec is Compression.LZ4:
        return lz4.frame.compress(data)
    raise ValueError(f"unsupported codec {codec!r}")


def decompress(codec: Compression, data: bytes | bytearray | memoryview) -> bytes:
    """Inverse of `compress`; raises ValueError on a damaged stream."""
    try:
        if codec is Compression.GZIP:
            return zlib.decompress(data, _GZIP_WBITS)
        if codec is Compression.ZSTD:
            return _zstd_decompressor().decompress(data)
        if codec is Compression.LZ4:
            return lz4.frame.decompress(data)
    except (zlib.error, zstandard.ZstdError, RuntimeError) as err:
        raise ValueError(f"cannot decompress {codec.name.lower()} batch body: {err}") from err
    if codec is Compression.NONE:
        return bytes(data)
    raise ValueError(f"unsupported codec {codec!r}")
