"""`streaming-compress` (Tremor's name in its code; its docs say `stream-compress`, also accepted): the
frames of an outgoing stream compressed as one stream, not one payload per frame as `compress` does.

`algorithm` is `xz2` (the default, as in Tremor) or `zstd`; `level` is
optional (xz2 0-9, default 6 as for `compress`; zstd -7..22, default 3).
Frames go into one compressor and come out as the compressed bytes it has
ready; `finish` ends the compressed stream (its trailer) and the next frame
starts a new one. The runtime ends it after every batch a sink delivers
(`ends_per_batch`), so what reached the sink is whole compressed streams, one
after another: a restart that resumes after the last delivered batch appends
a new stream, never the tail of a broken one, and `xz -d` / `zstd -d` read
the concatenation as one file.
"""

from __future__ import annotations

import lzma
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import zstandard

from contraflow.codecs.config import BadValue
from contraflow.codecs.processors.compress import check_level
from contraflow.codecs.processors.processor import Postprocessor
from contraflow.compression import ALGORITHMS


class _Stream(Protocol):
    def compress(self, data: bytes) -> bytes: ...

    def flush(self) -> bytes: ...


STREAMS: dict[str, Callable[[int], Any]] = {
    "xz2": lambda level: lzma.LZMACompressor(preset=level),
    "zstd": lambda level: zstandard.ZstdCompressor(level=level).compressobj(),
}


@dataclass(frozen=True)
class StreamCompressOptions:
    algorithm: str = "xz2"
    level: int | None = None

    def __post_init__(self) -> None:
        if self.algorithm not in STREAMS:
            raise BadValue(
                "algorithm", f"must be one of {', '.join(map(repr, STREAMS))}, got {self.algorithm!r}"
            )
        check_level(self.algorithm, self.level)


class StreamCompressPostprocessor(Postprocessor[StreamCompressOptions]):
    name = "streaming-compress"
    # The runtime calls `finish` after each batch a sink delivers (see the module's docstring).
    ends_per_batch: ClassVar[bool] = True

    def setup(self) -> None:
        algorithm = ALGORITHMS[self.options.algorithm]
        self._level = algorithm.default_level if self.options.level is None else self.options.level
        self._stream: _Stream | None = None

    def process(self, data: bytes) -> list[bytes]:
        if self._stream is None:
            self._stream = STREAMS[self.options.algorithm](self._level)
        out = self._stream.compress(data)
        return [out] if out else []

    def finish(self) -> list[bytes]:
        if self._stream is None:
            return []
        stream, self._stream = self._stream, None
        return [stream.flush()]
