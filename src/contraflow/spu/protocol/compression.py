"""Batch compression codecs: which algorithm a batch body uses, by Kafka's codec id.

A batch body is compressed as a whole, so the codec sees many similar records
at once (that is where the ratio comes from). Codec ids follow Kafka's
attribute bits so the numbers mean the same thing to anyone who knows Kafka.
The algorithms themselves are `contraflow.compression`'s, the same the
`compress`/`decompress` processors run.
"""

from __future__ import annotations

import enum
import threading

from contraflow.compression import ALGORITHMS, DECOMPRESS_ERRORS, Algorithm, Transform
from contraflow.errors import UserError


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


# Levels for batch bodies: the log favours speed (lz4's fast mode, zstd's default).
_LEVELS = {Compression.GZIP: 6, Compression.LZ4: 0, Compression.ZSTD: 3}

# A compressor object per thread and codec: zstandard's must not be shared between
# threads, and building one per call costs more than compressing a small batch.
_local = threading.local()


def _algorithm(codec: Compression) -> Algorithm:
    if codec not in _LEVELS:
        raise ValueError(f"unsupported codec {codec!r}")
    return ALGORITHMS[codec.name.lower()]


def _compressor(codec: Compression) -> Transform:
    compressors: dict[Compression, Transform] | None = getattr(_local, "compressors", None)
    if compressors is None:
        compressors = _local.compressors = {}
    compressor = compressors.get(codec)
    if compressor is None:
        compressor = compressors[codec] = _algorithm(codec).make_compressor(_LEVELS[codec])
    return compressor


def compress(codec: Compression, data: bytes | bytearray | memoryview) -> bytes:
    """Compress a whole batch body with `codec`."""
    if codec is Compression.NONE:
        return bytes(data)
    return _compressor(codec)(data)  # type: ignore[arg-type]  # every library takes a buffer


def decompress(codec: Compression, data: bytes | bytearray | memoryview) -> bytes:
    """Inverse of `compress`; raises ValueError on a damaged stream."""
    if codec is Compression.NONE:
        return bytes(data)
    algorithm = _algorithm(codec)
    try:
        return algorithm.decompress(data)  # type: ignore[arg-type]
    except DECOMPRESS_ERRORS as err:
        raise ValueError(f"cannot decompress {codec.name.lower()} batch body: {err}") from err
