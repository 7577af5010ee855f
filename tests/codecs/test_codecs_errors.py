"""Bad data: every codec raises `CodecError` naming itself and the reason, never another exception."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from codecs_support import RELAXED
from hypothesis import given
from hypothesis import strategies as st

from contraflow.codecs import CODECS, CodecError, ConfigError, FrameErrors, codec


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("json", b'{"a": ', "unexpected end of data"),
        ("json", b"[1, 2] x", "unexpected content after document"),
        ("json", b"", "empty document"),
        ("string", b"ok \xff\xfe", "invalid UTF-8 at byte 3"),
        ("csv", b"a,\xff", "invalid UTF-8 at byte 2"),
        ("msgpack", b"\x92\x01", "incomplete"),
        ("msgpack", b"\x01\x02", "extra data"),
        ("msgpack", b"\xd4\x05\x00", "unsupported MessagePack extension type 5"),
        ("msgpack", b"\xc1", "invalid MessagePack data (FormatError)"),
        ("msgpack", b"\x81\x01\xa1x", "int is not allowed for map key"),
        ("yaml", b"a: [1, 2", "did not find expected ',' or ']'"),
        ("yaml", b"key: value\n- item", "did not find expected key at line 2, column 1"),
        ("influx", b"weather", "expected `measurement[,tags] fields [timestamp]`"),
        ("influx", b"m,t v=1 1", "tag 't' has no value"),
        ("influx", b"m,t=a=b v=1 1", "unescaped '='"),
        ("influx", b"m v=abc 1", "'abc' is not a number"),
        ("influx", b'm v="open 1', "unterminated string"),
        ("influx", b"m v=1 -5", "not an unsigned 64-bit integer"),
        ("influx", b"m v=1i2 1", "is not a number"),
        ("influx", b"m v=99999999999999999999i 1", "does not fit 64 bits"),
        ("influx", b"m\xff v=1", "invalid UTF-8 at byte 1"),
        ("binflux", b"\x00\x01", "unknown version 1"),
        ("binflux", b"\x00\x00\x00\x05ab", "frame ends inside a value"),
        (
            "binflux",
            b"\x00\x00\x00\x01m" + bytes(8) + b"\x00\x00\x00\x01\x00\x01f\x09",
            "unknown field type 9",
        ),
        ("binflux", b"\x00\x00\x00\x01m" + bytes(8) + b"\x00\x00\x00\x00!", "1 bytes after the record"),
        ("statsd", b"dog", "no ':'"),
        ("statsd", b"dog:1", "no '|'"),
        ("statsd", b"dog:1|x", "unknown type 'x'"),
        ("statsd", b"dog:1|c|x", "unexpected"),
        ("statsd", b"dog:1e|c", "not a number"),
        ("dogstatsd", b"dog:111", "no '|'"),
        ("dogstatsd", b"dog:1|count", "unknown metric type 'count'"),
        ("dogstatsd", b"_e{9,1}:short|x", "do not match their lengths"),
        ("dogstatsd", b"_sc|name|7", "status '7'"),
        ("dogstatsd", b"_sc|name|1|d:x", "timestamp 'x'"),
        ("syslog", b"<13>1 \xff", "invalid UTF-8 at byte 6"),
        ("tremor", b"\x00", "shorter than its version"),
        ("tremor", b"\x00\x01\x00", "unknown version 1"),
        ("tremor", b"\x00\x00\x0a", "unknown type byte 10"),
        ("tremor", b"\x00\x00\x06" + (9).to_bytes(8, "big") + b"abc", "ends inside a string"),
        ("tremor", b"\x00\x00\x08" + (2**40).to_bytes(8, "big"), "container of 1099511627776 entries"),
        ("tremor", b"\x00\x00\x00\x00", "1 bytes after the value"),
        ("yaml", b"a: !!python/object:os.system x", "could not determine a constructor for the tag"),
    ],
)
def test_corrupt_input_raises_codec_error_with_reason(name: str, data: bytes, reason: str) -> None:
    with pytest.raises(CodecError) as caught:
        codec(name).decode(data)
    err = caught.value
    assert err.codec == name and err.name == name and err.kind == "codec"
    assert reason in err.reason
    assert str(err).startswith(f"codec {name!r}: ")


@pytest.mark.parametrize("name", sorted(CODECS))
@RELAXED
@given(data=st.binary(max_size=64))
def test_no_input_crashes_a_decoder(name: str, data: bytes) -> None:
    try:
        codec(name).decode(data)
    except CodecError as err:
        assert err.codec == name


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("json", {1: "int key"}, "cannot encode value"),
        ("json", 2**70, "cannot encode value"),
        ("json", object(), "cannot encode value"),
        ("msgpack", object(), "cannot encode value"),
        ("msgpack", 2**70, "cannot encode value"),
        ("yaml", object(), "cannot encode value"),
        ("csv", {"not": "an array"}, "only arrays can be encoded as a CSV line, got dict"),
        ("string", "lone surrogate \ud800", "cannot encode string as UTF-8 at index 15"),
        ("binary", object(), "cannot encode value"),
        ("tremor", 2**64, "does not fit 64 bits"),
        (
            "influx",
            {"tags": {}, "fields": {"v": 1}, "timestamp": 1},
            "'measurement' must be a non-empty string",
        ),
        ("influx", {"measurement": "m", "fields": {}, "timestamp": 1}, "at least one field"),
        (
            "influx",
            {"measurement": "m", "fields": {"v": [1]}, "timestamp": 1},
            "a number, a boolean or a string",
        ),
        (
            "influx",
            {"measurement": "m", "tags": {"t": 1}, "fields": {"v": 1}, "timestamp": 1},
            "tag 't' must be",
        ),
        ("influx", {"measurement": "m", "fields": {"v": 1}, "timestamp": -1}, "unsigned 64-bit"),
        (
            "binflux",
            {"measurement": "m", "fields": {"v": [1]}, "timestamp": 1},
            "Unknown type as influx line value",
        ),
        ("statsd", {"metric": "m", "type": "c", "value": "7"}, "numeric 'value'"),
        ("dogstatsd", {"metric": {"metric": "m", "type": "c", "values": []}}, "non-empty array of numbers"),
        ("dogstatsd", {"service_check": {"name": "n", "status": 9}}, "'status' must be 0, 1, 2 or 3"),
        ("syslog", {}, "facility missing"),
        ("syslog", {"facility": "cron"}, "severity missing"),
        (
            "syslog",
            {"facility": "cron", "severity": "info", "structured_data": "sd"},
            "structured data not an object",
        ),
        ("syslog", {"facility": "snot", "severity": "info"}, "invalid facility 'snot'"),
        ("syslog", {"facility": "cron", "severity": "snot"}, "invalid severity 'snot'"),
        (
            "syslog",
            {"facility": "cron", "severity": "info", "protocol": "RFC5424"},
            "missing protocol version",
        ),
        ("syslog", {"facility": "cron", "severity": "info", "protocol_version": 1}, "missing protocol type"),
        ("syslog", {"facility": "cron", "severity": "info", "protocol": "snot"}, "invalid protocol type"),
    ],
)
def test_unencodable_values_raise_codec_error(name: str, value: Any, reason: str) -> None:
    with pytest.raises(CodecError) as caught:
        codec(name).encode(value)
    assert caught.value.codec == name
    assert reason in caught.value.reason


def test_msgpack_packer_recovers_after_a_failed_encode() -> None:
    msgpack = codec("msgpack")
    with pytest.raises(CodecError):
        msgpack.encode([1, object()])
    assert msgpack.decode(msgpack.encode([1, 2])) == [1, 2]


def test_errors_survive_pickling_across_processes() -> None:
    err = CodecError("json", "unexpected end of data")
    copy = pickle.loads(pickle.dumps(err))
    assert (type(copy), copy.name, copy.reason, copy.kind, str(copy)) == (
        CodecError,
        "json",
        "unexpected end of data",
        "codec",
        str(err),
    )
    frames = FrameErrors([b"good"], [CodecError("separate", "too long", kind="preprocessor")])
    copy_frames = pickle.loads(pickle.dumps(frames))
    assert copy_frames.frames == [b"good"] and str(copy_frames) == str(frames)
    assert copy_frames.errors[0].kind == "preprocessor"
    config = ConfigError("unknown codec 'x'", kind="codec", name="x", valid=["json"])
    copy_config = pickle.loads(pickle.dumps(config))
    assert (str(copy_config), copy_config.kind, copy_config.name, copy_config.valid) == (
        "unknown codec 'x'",
        "codec",
        "x",
        ("json",),
    )
