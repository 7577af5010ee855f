"""The frame codec and request validation, including hypothesis fuzzing of the decoder."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contraflow.spu.node.partitions import split_batches
from contraflow.spu.protocol import (
    REQUEST_TYPES,
    ApiKey,
    ErrorCode,
    FrameDecoder,
    FramingError,
    SpuError,
    encode_frame,
    parse_request,
    unpack_meta,
)
from contraflow.spu.protocol.batch import encode_batch
from contraflow.spu.protocol.frames import HEADER
from contraflow.spu.protocol.messages import FetchRequest, ProduceRequest

fields_strategy = st.dictionaries(
    st.text(max_size=8),
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=20), st.none()),
    max_size=5,
)


@given(
    api=st.integers(0, 0xFFFF),
    version=st.integers(0, 0xFFFF),
    cid=st.integers(0, 0xFFFFFFFF),
    fields=fields_strategy,
    payload=st.binary(max_size=300),
    cuts=st.lists(st.integers(1, 50), max_size=20),
)
def test_frames_round_trip_through_any_chunking(
    api: int, version: int, cid: int, fields: dict, payload: bytes, cuts: list[int]
) -> None:
    stream = encode_frame(api, version, cid, fields, payload) * 2
    decoder = FrameDecoder()
    frames = []
    pos = 0
    for cut in [*cuts, len(stream)]:
        frames += list(decoder.feed(stream[pos : pos + cut]))
        pos += cut
    frames += list(decoder.feed(stream[pos:]))
    assert len(frames) == 2 and decoder.buffered == 0
    for frame in frames:
        assert (frame.api_key, frame.api_version, frame.correlation_id) == (api, version, cid)
        assert unpack_meta(frame.meta) == fields
        assert bytes(frame.payload) == payload


@settings(max_examples=300)
@given(st.binary(max_size=400))
def test_decoder_on_garbage_yields_frames_or_framing_error_only(data: bytes) -> None:
    """Whatever arrives, the decoder either cuts frames or says the stream is unusable;
    decoding a frame's request either works or gives a MALFORMED/UNSUPPORTED answer."""
    decoder = FrameDecoder(max_frame_bytes=1024)
    try:
        frames = list(decoder.feed(data))
    except FramingError:
        return
    for frame in frames:
        try:
            request_type = REQUEST_TYPES[ApiKey(frame.api_key)]
            parse_request(request_type, unpack_meta(frame.meta))
        except ValueError:
            pass  # unknown api key: the server answers UNSUPPORTED_API
        except SpuError as err:
            assert err.code == ErrorCode.MALFORMED_REQUEST


def test_frame_longer_than_limit_is_a_framing_error() -> None:
    frame = encode_frame(ApiKey.PRODUCE, 0, 1, {}, b"x" * 2000)
    with pytest.raises(FramingError, match="exceeds the limit"):
        list(FrameDecoder(max_frame_bytes=1000).feed(frame))


def test_length_shorter_than_header_is_a_framing_error() -> None:
    with pytest.raises(FramingError, match="shorter than its header"):
        list(FrameDecoder().feed(HEADER.pack(3, 0, 0, 1, 0)))


def test_meta_length_beyond_frame_is_a_framing_error() -> None:
    with pytest.raises(FramingError, match="metadata length"):
        list(FrameDecoder().feed(HEADER.pack(12, 0, 0, 1, 50)))


def test_incomplete_frame_waits_for_more_bytes() -> None:
    frame = encode_frame(ApiKey.FETCH, 0, 9, {"topic": "t"})
    decoder = FrameDecoder()
    assert list(decoder.feed(frame[:-1])) == []
    assert [f.correlation_id for f in decoder.feed(frame[-1:])] == [9]


def test_parse_request_fills_defaults_and_checks_types() -> None:
    request = parse_request(FetchRequest, {"topic": "t", "partition": 0, "offset": 5})
    assert request == FetchRequest("t", 0, 5, 1024 * 1024, "uncommitted")
    with pytest.raises(SpuError, match="missing field 'offset'") as missing:
        parse_request(FetchRequest, {"topic": "t", "partition": 0})
    assert missing.value.code == ErrorCode.MALFORMED_REQUEST
    with pytest.raises(SpuError, match="field 'partition' must be"):
        parse_request(ProduceRequest, {"topic": "t", "partition": True})
    with pytest.raises(SpuError, match="unknown fields"):
        parse_request(ProduceRequest, {"topic": "t", "partition": 0, "bogus": 1})


@pytest.mark.parametrize("meta", [b"\xc1", b"\x93\x01\x02\x03", struct.pack(">B", 0x81) + b"\x01\x02"])
def test_meta_that_is_not_a_string_keyed_map_is_malformed(meta: bytes) -> None:
    with pytest.raises(SpuError) as err:
        unpack_meta(meta)
    assert err.value.code == ErrorCode.MALFORMED_REQUEST


def _valid_frames() -> list[bytes]:
    batch = bytes(encode_batch([b"a", b"bb", b"ccc"], keys=[b"k", None, b"k"]))
    return [
        encode_frame(ApiKey.PRODUCE, 0, 1, {"topic": "t", "partition": 0, "acks": 1}, batch),
        encode_frame(ApiKey.FETCH, 0, 2, {"topic": "t", "partition": 0, "offset": 0}),
        encode_frame(
            ApiKey.TXN_STAGE,
            0,
            3,
            {"producer_id": "p", "batch_id": 1, "topic": "t", "partition": 0},
            batch * 2,
        ),
        encode_frame(ApiKey.AUTHENTICATE, 0, 4, {"token": "x"}),
    ]


@settings(max_examples=3000, deadline=None)
@given(
    frame=st.sampled_from(_valid_frames()),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=6),
    cut=st.integers(0, 10_000),
)
def test_mutated_frames_are_decoded_or_refused_never_crash(
    frame: bytes, flips: list[tuple[int, int]], cut: int
) -> None:
    """Issue 17: 3000 mutated real frames through everything the server does with bytes
    before a handler runs (framing, request fields, batch framing and CRC)."""
    raw = bytearray(frame)
    for pos, mask in flips:
        raw[pos % len(raw)] ^= mask
    decoder = FrameDecoder(max_frame_bytes=4096)
    try:
        frames = list(decoder.feed(bytes(raw[: max(cut, len(raw) // 2)])))
    except FramingError:
        return
    for decoded in frames:
        try:
            request_type = REQUEST_TYPES[ApiKey(decoded.api_key)]
            parse_request(request_type, unpack_meta(decoded.meta))
            if decoded.payload:
                split_batches(memoryview(decoded.payload), verify=True)
        except ValueError:
            pass  # unknown api key: UNSUPPORTED_API
        except SpuError as err:
            assert err.code in (
                ErrorCode.MALFORMED_REQUEST,
                ErrorCode.CORRUPT_BATCH,
                ErrorCode.INVALID_ARGUMENT,
            )
