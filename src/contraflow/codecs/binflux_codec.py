"""The `binflux` codec: Tremor's binary form of an influx record, big-endian throughout.

Layout: u16 version (0); u16-length measurement; u64 timestamp; u16 tag
count, each tag a u16-length key and value; u16 field count, each field a
u16-length key, a type byte and the value (0 i64, 1 f64, 2 u16-length string,
3 true, 4 false). Strings are UTF-8. The format has no framing of its own:
put a `length-prefixed` processor around it.
"""

from __future__ import annotations

import struct
from typing import Any

from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError

_I64, _F64, _STRING, _TRUE, _FALSE = range(5)
_U16 = struct.Struct(">H")
_HEAD = struct.Struct(">HH")  # version, measurement length
_U64 = struct.Struct(">Q")
_I64_VALUE = struct.Struct(">q")
_F64_VALUE = struct.Struct(">d")
_I64_RANGE = range(-(2**63), 2**63)
_U64_MAX = 2**64 - 1
_U16_MAX = 2**16 - 1


class _Truncated(Exception):
    """The frame ends inside a value."""


class _Reader:
    """A cursor over one frame; every read checks the frame is long enough."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, layout: struct.Struct) -> Any:
        end = self.pos + layout.size
        if end > len(self.data):
            raise _Truncated
        (value,) = layout.unpack_from(self.data, self.pos)
        self.pos = end
        return value

    def string(self) -> str:
        length = self.unpack(_U16)
        end = self.pos + length
        if end > len(self.data):
            raise _Truncated
        text = str(self.data[self.pos : end], "utf-8")
        self.pos = end
        return text

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise _Truncated
        self.pos += 1
        return self.data[self.pos - 1]


class BinfluxCodec(Codec):
    name = "binflux"
    mime_types = ("application/octet-stream",)

    def decode(self, data: bytes) -> Any:
        reader = _Reader(bytes(data))
        try:
            version = reader.unpack(_U16)
            if version != 0:
                raise CodecError("binflux", f"unknown version {version} (only 0 exists)")
            measurement = reader.string()
            timestamp = reader.unpack(_U64)
            tags = {reader.string(): reader.string() for _ in range(reader.unpack(_U16))}
            fields = {}
            for _ in range(reader.unpack(_U16)):
                key = reader.string()
                fields[key] = self._field(reader)
        except _Truncated:
            raise CodecError("binflux", f"frame ends inside a value at byte {reader.pos}") from None
        except UnicodeDecodeError as err:
            raise CodecError("binflux", f"invalid UTF-8 in a string: {err.reason}") from None
        if reader.pos != len(reader.data):
            raise CodecError("binflux", f"{len(reader.data) - reader.pos} bytes after the record")
        return {"measurement": measurement, "tags": tags, "fields": fields, "timestamp": timestamp}

    @staticmethod
    def _field(reader: _Reader) -> Any:
        kind = reader.byte()
        if kind == _I64:
            return reader.unpack(_I64_VALUE)
        if kind == _F64:
            return reader.unpack(_F64_VALUE)
        if kind == _STRING:
            return reader.string()
        if kind == _TRUE:
            return True
        if kind == _FALSE:
            return False
        raise CodecError("binflux", f"unknown field type {kind}")

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, dict):
            raise CodecError("binflux", f"expected an influx record, got {type(value).__name__}")
        out = bytearray(_U16.pack(0))
        measurement = value.get("measurement")
        if not isinstance(measurement, str):
            raise CodecError("binflux", "measurement missing")
        _string(out, measurement)
        timestamp = value.get("timestamp")
        if type(timestamp) is not int or not 0 <= timestamp <= _U64_MAX:
            raise CodecError("binflux", "timestamp missing (an unsigned 64-bit integer)")
        out += _U64.pack(timestamp)
        tags = _record(value, "tags")
        out += _count(len(tags), "tags")
        for key, tag in tags.items():
            if not isinstance(tag, str):
                raise CodecError("binflux", f"tag {key!r} must be a string, got {type(tag).__name__}")
            _string(out, key)
            _string(out, tag)
        fields = _record(value, "fields")
        out += _count(len(fields), "fields")
        for key, field in fields.items():
            _string(out, key)
            _write_field(out, key, field)
        return bytes(out)


def _record(value: dict[str, Any], key: str) -> dict[str, Any]:
    found = value.get(key, {})
    if not isinstance(found, dict):
        raise CodecError("binflux", f"{key!r} must be a record, got {type(found).__name__}")
    return found


def _count(count: int, what: str) -> bytes:
    if count > _U16_MAX:
        raise CodecError("binflux", f"too many {what} ({count}; at most {_U16_MAX})")
    return _U16.pack(count)


def _string(out: bytearray, text: str) -> None:
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise CodecError("binflux", f"cannot encode string as UTF-8: {err.reason}") from None
    if len(raw) > _U16_MAX:
        raise CodecError("binflux", f"string too long ({len(raw)} bytes; at most {_U16_MAX})")
    out += _U16.pack(len(raw))
    out += raw


def _write_field(out: bytearray, key: str, field: Any) -> None:
    if field is True or field is False:
        out.append(_TRUE if field else _FALSE)
    elif isinstance(field, int):
        if field not in _I64_RANGE:
            raise CodecError("binflux", f"field {key!r}: integer {field} does not fit 64 bits")
        out.append(_I64)
        out += _I64_VALUE.pack(field)
    elif isinstance(field, float):
        out.append(_F64)
        out += _F64_VALUE.pack(field)
    elif isinstance(field, str):
        out.append(_STRING)
        _string(out, field)
    else:
        raise CodecError("binflux", f"Unknown type as influx line value: {type(field).__name__} in {key!r}")
