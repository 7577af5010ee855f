"""Framing: any way of chunking a stream yields the same frames; limits, flushes and chains."""

from __future__ import annotations

import struct
import time
from typing import Any

import pytest
from codecs_support import MODEST, RELAXED, run, split_at
from hypothesis import given
from hypothesis import strategies as st

from contraflow.codecs import CodecError, FrameErrors, postprocessors, preprocessors

LINES = st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=20)
CUTS = st.lists(st.integers(min_value=0, max_value=700), max_size=12)


def separate(**config: object) -> list[object]:
    return [{"name": "separate", "config": config}]


@RELAXED
@given(lines=LINES, trailing=st.binary(max_size=10).map(lambda b: b.replace(b"\n", b"")), cuts=CUTS)
def test_separate_frames_do_not_depend_on_chunking(
    lines: list[bytes], trailing: bytes, cuts: list[int]
) -> None:
    stream = b"".join(line + b"\n" for line in lines) + trailing
    expected = lines + ([trailing] if trailing else [])
    assert run(preprocessors(separate(max_length=0)), split_at(stream, cuts)) == (expected, [])


@RELAXED
@given(lines=LINES, cuts=CUTS, limit=st.integers(min_value=1, max_value=40))
def test_separate_drops_exactly_the_overlong_frames_however_chunked(
    lines: list[bytes], cuts: list[int], limit: int
) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    frames, errors = run(preprocessors(separate(max_length=limit)), split_at(stream, cuts))
    assert frames == [line for line in lines if len(line) <= limit]
    assert len(errors) == sum(len(line) > limit for line in lines)


@RELAXED
@given(chunks=st.lists(st.binary(max_size=60), max_size=8), limit=st.integers(min_value=1, max_value=20))
def test_separate_unbuffered_splits_each_chunk_on_its_own(chunks: list[bytes], limit: int) -> None:
    expected = [frame for chunk in chunks for frame in chunk.split(b"\n")]
    frames, errors = run(preprocessors(separate(buffered=False, max_length=limit)), chunks)
    assert frames == [frame for frame in expected if len(frame) <= limit]
    assert len(errors) == sum(len(frame) > limit for frame in expected)


def test_separate_reports_overlong_frames_and_keeps_the_good_ones() -> None:
    pre = preprocessors(separate(max_length=10))
    with pytest.raises(FrameErrors) as caught:
        pre.process(b"012345\n0123456789A\n0123456789\n")
    assert caught.value.frames == [b"012345", b"0123456789"]
    assert [str(e) for e in caught.value.errors] == [
        "preprocessor 'separate': discarded a frame of 11 bytes: longer than max_length 10"
    ]


def test_separate_discards_an_overlong_fragment_up_to_its_separator() -> None:
    pre = preprocessors(separate(max_length=10))
    assert pre.process(b"ok\n012345") == [b"ok"]
    with pytest.raises(FrameErrors) as caught:
        pre.process(b"6789AB")
    assert caught.value.frames == []
    assert "discarded a frame of 12 bytes without a separator: longer than max_length 10" in str(caught.value)
    assert pre.process(b"still the same long frame") == []
    assert pre.process(b"end\nnext\n") == [b"next"]


def test_separate_default_max_length_is_tremors_8192() -> None:
    pre = preprocessors(["separate"])
    assert pre.process(b"x" * 8192 + b"\n") == [b"x" * 8192]
    with pytest.raises(FrameErrors):
        pre.process(b"x" * 8193 + b"\n")


def test_separate_flushes_the_last_fragment_at_end_of_stream_and_keeps_empty_frames() -> None:
    pre = preprocessors(["separate"])
    assert pre.process(b"a\n\nb") == [b"a", b""]
    assert pre.finish() == [b"b"]
    assert pre.finish() == []


def test_separate_custom_separator() -> None:
    pre = preprocessors(separate(separator="|"))
    assert pre.process(b"a|b\n|c") == [b"a", b"b\n"]
    assert pre.finish() == [b"c"]


def test_separate_unbuffered_ends_a_frame_at_every_chunk_like_tremor() -> None:
    pre = preprocessors(separate(buffered=False))
    assert pre.process(b"hello\nworld") == [b"hello", b"world"]
    assert pre.process(b"again\n") == [b"again", b""]
    assert pre.finish() == []


def test_separate_postprocessor_appends_the_separator() -> None:
    assert postprocessors(["separate"]).process(b"event") == [b"event\n"]
    assert postprocessors([{"name": "separate", "config": {"separator": "\0"}}]).process(b"e") == [b"e\0"]


FRAMES = st.lists(st.binary(max_size=40), max_size=12)


@pytest.mark.parametrize("length_bytes", [1, 2, 4, 8])
@RELAXED
@given(frames=FRAMES, cuts=CUTS)
def test_length_prefixed_round_trip_however_chunked(
    length_bytes: int, frames: list[bytes], cuts: list[int]
) -> None:
    spec = [{"name": "length-prefixed", "config": {"length_bytes": length_bytes}}]
    post = postprocessors(spec)
    stream = b"".join(wire for frame in frames for wire in post.process(frame))
    assert run(preprocessors(spec), split_at(stream, cuts)) == (frames, [])


def test_length_prefixed_default_is_tremors_u64_big_endian() -> None:
    assert postprocessors(["length-prefixed"]).process(b"abc") == [b"\0\0\0\0\0\0\0\x03abc"]
    pre = preprocessors(["length-prefixed"])
    assert pre.process(
        struct.pack(">Q", 2) + b"hi" + struct.pack(">Q", 0) + struct.pack(">Q", 5) + b"he"
    ) == [b"hi", b""]
    assert pre.process(b"llo") == [b"hello"]


def test_length_prefixed_u32() -> None:
    spec = [{"name": "length-prefixed", "config": {"length_bytes": 4}}]
    assert postprocessors(spec).process(b"abc") == [b"\0\0\0\x03abc"]
    assert preprocessors(spec).process(b"\0\0\0\x02hi\0\0") == [b"hi"]


def test_length_prefixed_stream_ending_inside_a_frame_is_an_error() -> None:
    pre = preprocessors(["length-prefixed"])
    assert pre.process(struct.pack(">Q", 10) + b"abc") == []
    with pytest.raises(FrameErrors) as caught:
        pre.finish()
    assert (
        str(caught.value.errors[0])
        == "preprocessor 'length-prefixed': stream ended inside a frame (11 bytes buffered)"
    )
    assert pre.finish() == []


@RELAXED
@given(cuts=CUTS)
def test_length_prefixed_max_length_skips_the_oversized_body_and_keeps_framing(cuts: list[int]) -> None:
    spec = [{"name": "length-prefixed", "config": {"length_bytes": 2, "max_length": 4}}]
    post = postprocessors([{"name": "length-prefixed", "config": {"length_bytes": 2}}])
    frames = [b"ok", b"far too long", b"", b"fine", b"12345", b"end"]
    stream = b"".join(post.process(frame)[0] for frame in frames)
    got, errors = run(preprocessors(spec), split_at(stream, cuts))
    assert got == [b"ok", b"", b"fine", b"end"]
    assert errors == [
        "preprocessor 'length-prefixed': discarded a frame of 12 bytes: longer than max_length 4",
        "preprocessor 'length-prefixed': discarded a frame of 5 bytes: longer than max_length 4",
    ]


def test_length_prefixed_postprocessor_rejects_frames_the_prefix_cannot_hold() -> None:
    post = postprocessors([{"name": "length-prefixed", "config": {"length_bytes": 1}}])
    assert post.process(b"x" * 255)[0][:1] == b"\xff"
    with pytest.raises(FrameErrors, match="frame of 256 bytes is longer than the prefix allows"):
        post.process(b"x" * 256)


@RELAXED
@given(st.binary(max_size=100))
def test_base64_round_trip(data: bytes) -> None:
    wire = postprocessors(["base64"]).process(data)
    assert b"\n" not in wire[0]
    assert preprocessors(["base64"]).process(wire[0]) == [data]


def test_base64_rejects_invalid_input() -> None:
    with pytest.raises(FrameErrors) as caught:
        preprocessors(["base64"]).process(b"not base64!")
    err = caught.value.errors[0]
    assert (err.kind, err.name) == ("preprocessor", "base64")
    assert err.reason.startswith("invalid base64: ")


def test_chain_keeps_good_frames_when_one_fails() -> None:
    pre = preprocessors(["separate", "base64"])
    with pytest.raises(FrameErrors) as caught:
        pre.process(b"aGVsbG8=\n!!!\nd29ybGQ=\n")
    assert caught.value.frames == [b"hello", b"world"]
    assert len(caught.value.errors) == 1
    assert isinstance(caught.value, CodecError) and caught.value.name == "base64"


def test_chain_finish_passes_flushed_frames_through_later_stages() -> None:
    pre = preprocessors(["separate", "base64"])
    assert pre.process(b"aGVsbG8=\nd29y") == [b"hello"]
    assert pre.finish() == [b"wor"]


def test_chain_stacks_stages_in_order_both_ways() -> None:
    post_spec = ["base64", "separate"]
    post = postprocessors(post_spec)
    wire = b"".join(post.process(frame)[0] for frame in [b"\x00\x01", b"two"])
    assert wire == b"AAE=\ndHdv\n"
    pre = preprocessors(["separate", "base64"])
    assert pre.process(wire) == [b"\x00\x01", b"two"]
    assert post.finish() == [] and pre.finish() == []


def test_empty_chain_passes_chunks_through() -> None:
    assert preprocessors([]).process(b"as is") == [b"as is"]
    assert postprocessors(None).process(b"as is") == [b"as is"]


def test_remove_empty_drops_blank_frames() -> None:
    pre = preprocessors(["separate", "remove-empty"])
    assert pre.process(b"a\n\n\nb\n\n") == [b"a", b"b"]


@RELAXED
@given(frames=FRAMES, cuts=CUTS)
def test_textual_length_prefixed_round_trip_however_chunked(frames: list[bytes], cuts: list[int]) -> None:
    post = postprocessors(["textual-length-prefixed"])
    stream = b"".join(wire for frame in frames for wire in post.process(frame))
    assert run(preprocessors(["textual-length-prefixed"]), split_at(stream, cuts)) == (frames, [])


def test_textual_length_prefixed_is_rfc5425_octet_counting() -> None:
    assert postprocessors(["textual-length-prefixed"]).process(b"<34>1 - msg") == [b"11 <34>1 - msg"]
    assert postprocessors(["textual-length-prefixed"]).process(b"") == [b"0 "]
    pre = preprocessors(["textual-length-prefixed"])
    assert pre.process(b"3 abc5\thello0 2 h") == [b"abc", b"hello", b""]
    assert pre.process(b"i") == [b"hi"]


def test_textual_length_prefixed_rejects_a_prefix_that_is_not_a_number() -> None:
    pre = preprocessors(["textual-length-prefixed"])
    with pytest.raises(FrameErrors) as caught:
        pre.process(b"2 ok<34> no length")
    assert caught.value.frames == [b"ok"]
    assert str(caught.value.errors[0]) == (
        "preprocessor 'textual-length-prefixed': expected a length in ASCII digits and a space, "
        "got b'<34>'; buffer dropped"
    )
    assert pre.process(b"2 ok") == [b"ok"]
    with pytest.raises(FrameErrors, match="got b'1111111111"):
        pre.process(b"1" * 30)
    with pytest.raises(FrameErrors, match="stream ended inside a frame"):
        pre.process(b"5 abc")
        pre.finish()


def test_ingest_ns_prepends_the_write_time_and_the_preprocessor_removes_it() -> None:
    before = time.time_ns()
    (framed,) = postprocessors(["ingest-ns"]).process(b"event")
    stamp = int.from_bytes(framed[:8], "big")
    assert before <= stamp <= time.time_ns() and framed[8:] == b"event"
    assert preprocessors(["ingest-ns"]).process(framed) == [b"event"]
    assert preprocessors(["ingest-ns"]).process(bytes(7) + b"\x2a" + b"89") == [b"89"]  # Tremor's example


def test_ingest_ns_reports_frames_too_short_for_a_timestamp() -> None:
    frames, errors = run(preprocessors(["ingest-ns"]), [bytes(7)])
    assert frames == [] and errors == [
        "preprocessor 'ingest-ns': frame of 7 bytes is shorter than its 8-byte timestamp"
    ]


def gelf_chunks(message: bytes, ident: int, count: int) -> list[bytes]:
    """`message` cut into `count` GELF chunks, written here independently of the postprocessor."""
    size = -(-len(message) // count)
    return [
        b"\x1e\x0f" + ident.to_bytes(8, "big") + bytes([seq, count]) + message[seq * size : (seq + 1) * size]
        for seq in range(count)
    ]


@MODEST
@given(message=st.binary(max_size=40_000), order=st.randoms(use_true_random=False))
def test_gelf_chunking_round_trips_in_any_chunk_order(message: bytes, order: Any) -> None:
    chunks = postprocessors(["gelf-chunking"]).process(message)
    assert all(len(chunk) <= 8192 for chunk in chunks)
    order.shuffle(chunks)
    assert run(preprocessors(["gelf-chunking"]), chunks) == ([message], [])


def test_gelf_chunking_passes_whole_messages_and_joins_interleaved_chunks() -> None:
    first, second = gelf_chunks(b'{"short_message": "one"}', 1, 3), gelf_chunks(b'{"m": 2}', 2, 2)
    stream = [first[2], second[0], b'{"whole": true}', b"\x1f\x3c{}", first[0], second[1], first[1]]
    assert run(preprocessors(["gelf-chunking"]), stream) == (
        [b'{"whole": true}', b"{}", b'{"m": 2}', b'{"short_message": "one"}'],
        [],
    )


def test_gelf_chunking_reports_every_loss() -> None:
    pre = preprocessors(["gelf-chunking"])
    stage = pre.stages[0]
    now = [0]
    stage.clock = lambda: now[0]  # type: ignore[attr-defined]
    chunks = gelf_chunks(b"abcdef", 7, 3)
    frames, errors = run(pre, [chunks[0], chunks[0], b"\x00\x01", chunks[1]], finish=False)
    assert frames == []
    assert errors == [
        "preprocessor 'gelf-chunking': duplicate or inconsistent chunk 0 of 3 for message 7: dropped",
        "preprocessor 'gelf-chunking': not a GELF chunk: 2 bytes starting 00 01",
    ]
    now[0] = 6_000_000_000  # past the 5 seconds GELF gives a message to complete
    frames, errors = run(pre, [gelf_chunks(b"xy", 8, 2)[0]], finish=False)
    assert errors == [
        "preprocessor 'gelf-chunking': message 7 incomplete (1 of 3 chunks) when 5 seconds passed"
    ]
    _, errors = run(pre, [])
    assert errors == [
        "preprocessor 'gelf-chunking': message 8 incomplete (1 of 2 chunks) when the stream ended"
    ]


def test_gelf_chunking_refuses_frames_over_128_chunks() -> None:
    frames, errors = run(postprocessors(["gelf-chunking"]), [bytes(129 * 8180)])
    assert frames == [] and errors == [
        "postprocessor 'gelf-chunking': a frame of 1055220 bytes needs 129 chunks; GELF allows 128"
    ]
