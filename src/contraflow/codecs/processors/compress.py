"""`decompress` and `compress`: one compressed payload per frame, as in Tremor.

`decompress` takes `algorithm` (default `autodetect`: pick by magic bytes and
pass frames that match none through unchanged, leaving the verdict to the
codec). `compress` requires `algorithm` and takes an optional `level` within
the algorithm's range. `StreamDecompressor` is `decompress` for one whole
stream read in chunks (a `.gz` file) rather than one payload per frame. The
algorithms are `contraflow.compression`'s, shared with the SPU's batches.
"""

from __future__ import annotations

from dataclasses import dataclass

from contraflow.codecs.config import BadValue
from contraflow.codecs.errors import CodecError, ConfigError, unknown
from contraflow.codecs.processors.processor import Postprocessor, Preprocessor
from contraflow.compression import (
    ALGORITHMS,
    DECOMPRESS_ERRORS,
    MAGIC_BYTES,
    Algorithm,
    Incremental,
    detect,
)

AUTODETECT = "autodetect"


def _check_algorithm(name: str, extra: tuple[str, ...] = ()) -> None:
    if name in ALGORITHMS or name in extra:
        return
    valid = ", ".join(map(repr, (*extra, *ALGORITHMS)))
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
        check_level(self.algorithm, self.level)


def check_level(algorithm: str, level: int | None) -> None:
    """A compression `level` is None (the algorithm's default) or within the algorithm's range."""
    levels = ALGORITHMS[algorithm].levels
    if level is not None and level not in levels:
        raise BadValue(
            "level", f"must be between {levels.start} and {levels.stop - 1} for {algorithm}, got {level}"
        )


class DecompressPreprocessor(Preprocessor[DecompressOptions]):
    name = "decompress"

    def setup(self) -> None:
        algorithm = self.options.algorithm
        self._forced: Algorithm | None = None if algorithm == AUTODETECT else ALGORITHMS[algorithm]

    def process(self, data: bytes) -> list[bytes]:
        algorithm = self._forced or detect(data)
        if algorithm is None:
            return [data]
        try:
            return [algorithm.decompress(data)]
        except DECOMPRESS_ERRORS as err:
            raise self.error(f"corrupt {algorithm.name} data: {err}") from None


class CompressPostprocessor(Postprocessor[CompressOptions]):
    name = "compress"

    def setup(self) -> None:
        algorithm = ALGORITHMS[str(self.options.algorithm)]
        level = algorithm.default_level if self.options.level is None else self.options.level
        self._compress = algorithm.make_compressor(level)

    def process(self, data: bytes) -> list[bytes]:
        return [self._compress(data)]


class StreamDecompressor:
    """Decompresses one whole stream fed in arbitrary chunks, e.g. a `.gz` file being read.

    With `algorithm="autodetect"` the first bytes of the stream pick the
    algorithm; a stream that matches none passes through unchanged. Errors are
    `CodecError`s named `decompress`, as from the preprocessor.
    """

    def __init__(self, algorithm: str = "autodetect") -> None:
        if algorithm != "autodetect" and algorithm not in ALGORITHMS:
            valid = ["autodetect", *(name for name, known in ALGORITHMS.items() if known.streams)]
            raise ConfigError(
                unknown("compression algorithm", algorithm, valid),
                kind="preprocessor",
                name="decompress",
                valid=valid,
            )
        if algorithm in ALGORITHMS and not ALGORITHMS[algorithm].streams:
            raise ConfigError(
                f"{algorithm} decompresses whole payloads only (the decompress preprocessor), not a stream",
                kind="preprocessor",
                name="decompress",
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
