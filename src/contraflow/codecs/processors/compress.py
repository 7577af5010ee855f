"""`decompress` and `compress`: one compressed payload per frame, as in Tremor.

`decompress` takes `algorithm` (default `autodetect`: pick by magic bytes and
pass frames that match none through unchanged, leaving the verdict to the
codec). `compress` requires `algorithm` and takes an optional `level` within
the algorithm's range.
"""

from __future__ import annotations

from dataclasses import dataclass

from contraflow.codecs.config import BadValue
from contraflow.codecs.processors.compression import (
    ALGORITHMS,
    DECOMPRESS_ERRORS,
    SNAPPY_FRAMED_MAGIC,
    UNAVAILABLE,
    Algorithm,
    detect,
)
from contraflow.codecs.processors.processor import Postprocessor, Preprocessor

AUTODETECT = "autodetect"


def _check_algorithm(name: str, extra: tuple[str, ...] = ()) -> None:
    if name in ALGORITHMS or name in extra:
        return
    valid = ", ".join(map(repr, (*extra, *ALGORITHMS)))
    if name in UNAVAILABLE:
        raise BadValue("algorithm", f"{name!r} is not available: {UNAVAILABLE[name]}; use one of {valid}")
    raise BadValue("algorithm", f"must be one of {valid}, got {name!r}")


@dataclass(frozen=True)
class DecompressOptions:
    algorithm: str = AUTODETECT

    def __post_init__(self) -> None:
        _check_algorithm(self.algorithm, (AUTODETECT,))


@dataclass(frozen=True)
class CompressOptions:
    algorithm: str | None = None
    level: int | None = None

    def __post_init__(self) -> None:
        if self.algorithm is None:
            raise BadValue("algorithm", f"is required: one of {', '.join(map(repr, ALGORITHMS))}")
        _check_algorithm(self.algorithm)
        levels = ALGORITHMS[self.algorithm].levels
        if self.level is not None and self.level not in levels:
            raise BadValue(
                "level",
                f"must be between {levels.start} and {levels.stop - 1} for {self.algorithm}, got {self.level}",
            )


class DecompressPreprocessor(Preprocessor):
    name = "decompress"

    Options = DecompressOptions
    options: DecompressOptions

    def __init__(self, options: DecompressOptions | None = None) -> None:
        super().__init__(options)
        algorithm = self.options.algorithm
        self._forced: Algorithm | None = None if algorithm == AUTODETECT else ALGORITHMS[algorithm]

    def process(self, data: bytes) -> list[bytes]:
        algorithm = self._forced or detect(data)
        if algorithm is None:
            if data.startswith(SNAPPY_FRAMED_MAGIC):
                raise self.error("snappy-compressed data is not supported")
            return [data]
        try:
            return [algorithm.decompress(data)]
        except DECOMPRESS_ERRORS as err:
            raise self.error(f"corrupt {algorithm.name} data: {err}") from None


class CompressPostprocessor(Postprocessor):
    name = "compress"

    Options = CompressOptions
    options: CompressOptions

    def __init__(self, options: CompressOptions) -> None:
        super().__init__(options)
        algorithm = ALGORITHMS[str(options.algorithm)]
        level = algorithm.default_level if options.level is None else options.level
        self._compress = algorithm.make_compressor(level)

    def process(self, data: bytes) -> list[bytes]:
        return [self._compress(data)]
