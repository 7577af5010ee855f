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
