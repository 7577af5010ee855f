"""Tremor's formats inside the runtime's decoder: bad frames become `err` events with the reason and the
frame itself (bytes when it is not text), frames without an event (influx comments) leave no trace."""

from __future__ import annotations

from typing import Any

from contraflow.codecs import codec
from contraflow.connectors.base import SourceData
from contraflow.events import decode_value
from contraflow.runtime.wire import Decoded, SourceDecoder
from tests.connectors.support import make


def decode(codec_name: str, preprocessors: list[Any], data: bytes) -> Decoded:
    connector = make(
        "file", {"path": "unused", "mode": "read"}, codec=codec_name, preprocessors=preprocessors
    )
    return SourceDecoder(connector.ctx, structured=False).decode(SourceData(data=data, end_stream=True))


def values(decoded: Decoded) -> list[Any]:
    return [decode_value(value) for run in decoded.runs for value in run.values]


def errors(decoded: Decoded) -> list[Any]:
    assert all(error.port == "err" for error in decoded.errors)
    return [decode_value(error.value) for error in decoded.errors]


def test_influx_comments_carry_no_event_and_a_bad_line_is_an_error_with_its_text() -> None:
    lines = b"# measurements of the day\n\nweather temp=82 1\nweather temp=hot 2\ncpu load=1i 3\n"
    decoded = decode("influx", ["separate"], lines)
    assert [value["measurement"] for value in values(decoded)] == ["weather", "cpu"]
    (error,) = errors(decoded)
    assert error["data"] == "weather temp=hot 2"
    assert "codec 'influx'" in error["error"] and "'hot' is not a number" in error["error"]


def test_a_bad_binary_frame_is_an_error_carrying_its_raw_bytes() -> None:
    binflux = codec("binflux")
    good = binflux.encode({"measurement": "m", "tags": {}, "fields": {"v": 1.5}, "timestamp": 7})
    bad = b"\x00\x07\xff\xfe"
    framed = b"".join(len(frame).to_bytes(4, "big") + frame for frame in (good, bad, good))
    decoded = decode("binflux", [("length-prefixed", {"length_bytes": 4})], framed)
    assert len(values(decoded)) == 2
    (error,) = errors(decoded)
    assert error["data"] == bad and "unknown version 7" in error["error"]


def test_a_frame_a_preprocessor_refuses_is_an_error_carrying_that_frame() -> None:
    decoded = decode("string", ["separate", "base64"], b"aGk=\n!not base64!\nYm9i\n")
    assert values(decoded) == ["hi", "bob"]
    (error,) = errors(decoded)
    assert error["data"] == "!not base64!" and "preprocessor 'base64': invalid base64" in error["error"]
