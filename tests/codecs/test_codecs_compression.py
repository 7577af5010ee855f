"""`compress` and `decompress`: every algorithm round-trips and is recognised by its magic bytes."""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib

import lz4.frame
import pytest
import snappy
import zstandard
from codecs_support import split_at
from hypothesis import given, settings
from hypothesis import strategies as st

from contraflow.codecs import CodecError, ConfigError, FrameErrors, postprocessors, preprocessors
from contraflow.codecs.processors.compress import StreamDecompressor

PAYLOAD = b'{"event": "compress me", "n": 1}\n' * 20

# Each algorithm as written by its reference tool or library, not by contraflow.
FOREIGN = {
    "gzip": gzip.compress(PAYLOAD),
    "zlib": zlib.compress(PAYLOAD),
    "xz2": lzma.compress(PAYLOAD),
    "lz4": lz4.frame.compress(PAYLOAD),
    "zstd": zstandard.ZstdCompressor().compress(PAYLOAD),
    "bzip2": bz2.compress(PAYLOAD),
    "snappy": snappy.StreamCompressor().add_chunk(PAYLOAD),  # python-snappy's framing format
}
ALGORITHMS = sorted(FOREIGN)


def compress(algorithm: str, **config: object) -> list[object]:
    return [{"name": "compress", "config": {"algorithm": algorithm, **config}}]


def decompress(algorithm: str = "autodetect") -> list[object]:
    return [{"name": "decompress", "config": {"algorithm": algorithm}}]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_autodetect_recognises_each_algorithm(algorithm: str) -> None:
    assert preprocessors(["decompress"]).process(FOREIGN[algorithm]) == [PAYLOAD]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_forced_algorithm_decompresses(algorithm: str) -> None:
    assert preprocessors(decompress(algorithm)).process(FOREIGN[algorithm]) == [PAYLOAD]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=25, deadline=None)
@given(data=st.binary(max_size=300))
def test_compress_then_autodetect_round_trips(algorithm: str, data: bytes) -> None:
    (wire,) = postprocessors(compress(algorithm)).process(data)
    assert preprocessors(["decompress"]).process(wire) == [data]


@pytest.mark.parametrize(
    ("algorithm", "level"),
    [("gzip", 1), ("zlib", 9), ("xz2", 0), ("lz4", 0), ("zstd", -7), ("zstd", 19), ("bzip2", 1)],
)
def test_levels_change_the_output_not_the_content(algorithm: str, level: int) -> None:
    (wire,) = postprocessors(compress(algorithm, level=level)).process(PAYLOAD)
    assert preprocessors(decompress(algorithm)).process(wire) == [PAYLOAD]


def test_gzip_output_is_deterministic() -> None:
    first = postprocessors(compress("gzip")).process(PAYLOAD)
    assert postprocessors(compress("gzip")).process(PAYLOAD) == first


def test_autodetect_passes_uncompressed_frames_through() -> None:
    assert preprocessors(["decompress"]).process(b'{"plain": true}') == [b'{"plain": true}']
    assert preprocessors(["decompress"]).process(b"") == [b""]


@pytest.mark.parametrize("algorithm", ["gzip", "lz4", "zstd", "xz2", "bzip2"])
def test_concatenated_members_decompress_to_their_concatenation(algorithm: str) -> None:
    assert preprocessors(["decompress"]).process(FOREIGN[algorithm] * 2) == [PAYLOAD * 2]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_damaged_data_is_a_codec_error_naming_the_algorithm(algorithm: str, damage: str) -> None:
    good = FOREIGN[algorithm]
    bad = good[: len(good) // 2] if damage == "truncated" else good[:8] + bytes(64)
    with pytest.raises(FrameErrors) as caught:
        preprocessors(["decompress"]).process(bad)
    err = caught.value.errors[0]
    assert (err.kind, err.name) == ("preprocessor", "decompress")
    assert err.reason.startswith(f"corrupt {algorithm} data: ")


def test_forcing_the_wrong_algorithm_is_an_error() -> None:
    with pytest.raises(FrameErrors, match="corrupt zstd data"):
        preprocessors(decompress("zstd")).process(FOREIGN["gzip"])


@settings(max_examples=25, deadline=None)
@given(data=st.binary(max_size=300), level=st.integers(min_value=0, max_value=11))
def test_brotli_round_trips_when_named(data: bytes, level: int) -> None:
    """Brotli has no magic bytes: `decompress` must name it (as in Tremor, autodetect cannot)."""
    (wire,) = postprocessors(compress("br", level=level)).process(data)
    assert preprocessors(decompress("br")).process(wire) == [data]
    assert preprocessors(["decompress"]).process(wire) == [wire]


def test_corrupt_snappy_and_brotli_are_errors() -> None:
    flipped = bytearray(FOREIGN["snappy"])
    flipped[-1] ^= 0xFF
    with pytest.raises(FrameErrors, match="corrupt snappy data"):
        preprocessors(["decompress"]).process(bytes(flipped))
    with pytest.raises(FrameErrors, match="br data"):
        preprocessors(decompress("br")).process(b"not brotli at all")


def test_decompress_after_length_prefixed_framing() -> None:
    post = postprocessors([*compress("zstd"), "length-prefixed"])
    wire = b"".join(post.process(frame)[0] for frame in [b"one", b"two" * 100])
    pre = preprocessors(["length-prefixed", "decompress"])
    assert pre.process(wire[:5]) + pre.process(wire[5:]) == [b"one", b"two" * 100]


def stream_through(decompressor: StreamDecompressor, chunks: list[bytes]) -> bytes:
    return b"".join(decompressor.decompress(chunk) for chunk in chunks) + decompressor.finish()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=15, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_stream_decompressor_handles_any_chunking(algorithm: str, cuts: list[int]) -> None:
    stream = FOREIGN[algorithm] * 2  # two members, as `cat a.gz b.gz` makes
    assert stream_through(StreamDecompressor(), split_at(stream, cuts)) == PAYLOAD * 2
    assert stream_through(StreamDecompressor(algorithm), split_at(stream, cuts)) == PAYLOAD * 2


@pytest.mark.parametrize("data", [b"", b"abc", b"plain text, not compressed\n"])
def test_stream_decompressor_passes_plain_streams_through(data: bytes) -> None:
    assert stream_through(StreamDecompressor(), [data[:2], data[2:]]) == data


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_stream_decompressor_reports_a_truncated_stream_at_finish(algorithm: str) -> None:
    decompressor = StreamDecompressor()
    decompressor.decompress(FOREIGN[algorithm][:-4])
    with pytest.raises(CodecError, match="compressed stream is truncated"):
        decompressor.finish()


def test_stream_decompressor_reports_corrupt_data() -> None:
    with pytest.raises(CodecError, match="corrupt gzip data"):
        StreamDecompressor().decompress(FOREIGN["gzip"][:10] + bytes(50))
    with pytest.raises(CodecError, match="corrupt snappy data: reserved snappy chunk type 0x02"):
        StreamDecompressor().decompress(b"\xff\x06\x00\x00sNaPpY\x02\x00\x00\x00")


def test_stream_decompressor_refuses_brotli() -> None:
    with pytest.raises(ConfigError, match="br decompresses whole payloads only"):
        StreamDecompressor("br")


def test_stream_decompressor_rejects_unknown_algorithms() -> None:
    with pytest.raises(ConfigError, match="unknown compression algorithm 'gz'"):
        StreamDecompressor("gz")
