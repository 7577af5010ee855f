"""The `tremor` codec: Tremor's binary value format, for Tremor-to-Tremor (and contraflow) links.

A u16 version (0), then the value, big-endian: a type byte, 0 null, 1 true,
2 false, 3 i64, 4 u64, 5 f64 (8 bytes each), 6 string and 7 bytes (u64 length,
then the bytes), 8 array (u64 count, then the values), 9 record (u64 count,
then per entry a u64-length key and the value). Integers that fit i64 are
written as i64, larger ones up to 2**64 - 1 as u64, as Tremor does.

Decoding walks the frame with `struct.unpack_from` and an explicit stack, so a
deeply nested frame cannot exhaust Python's recursion limit.
"""

from __future__ import annotations

import struct
from typing import Any

from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError

NULL, TRUE, FALSE, I64, U64, F64, STRING, BYTES, ARRAY, RECORD = range(10)
_VERSION = struct.Struct(">H")
_LENGTH = struct.Struct(">Q")
_NUMBERS = {I64: struct.Struct(">q"), U64: struct.Struct(">Q"), F64: struct.Struct(">d")}
_TYPE_AND_LENGTH = struct.Struct(">BQ")
_TYPE_AND_NUMBER = {kind: struct.Struct(">B" + layout.format[1:]) for kind, layout in _NUMBERS.items()}
_CONSTANTS: dict[int, Any] = {NULL: None, TRUE: True, FALSE: False}
_I64_RANGE = range(-(2**63), 2**63)
_U64_RANGE = range(2**63, 2**64)
_MAX_DEPTH = 255  # as deep as orjson goes; the encoder recurses


class _Bad(Exception):
    """The frame is not a value of the format; the message says why."""


class TremorCodec(Codec):
    name = "tremor"
    mime_types = ("application/octet-stream",)

    def decode(self, data: bytes) -> Any:
        data = bytes(data)
        try:
            if len(data) < 2:
                raise _Bad("frame shorter than its version")
            (version,) = _VERSION.unpack_from(data)
            if version != 0:
                raise _Bad(f"unknown version {version} (only 0 exists)")
            value, end = _decode(data, 2)
        except _Bad as err:
            raise CodecError("tremor", str(err)) from None
        except struct.error:
            raise CodecError("tremor", "frame ends inside a value") from None
        if end != len(data):
            raise CodecError("tremor", f"{len(data) - end} bytes after the value")
        return value

    def encode(self, value: Any) -> bytes:
        out = bytearray(_VERSION.pack(0))
        try:
            _encode(value, out, 0)
        except _Bad as err:
            raise CodecError("tremor", str(err)) from None
        return bytes(out)


def _decode(data: bytes, pos: int) -> tuple[Any, int]:
    """The value at `pos` and the position after it."""
    # Each open container: [the container, entries still to read, key for the next record entry].
    stack: list[list[Any]] = []
    while True:
        key = None
        if stack and isinstance(stack[-1][0], dict):
            (size,) = _LENGTH.unpack_from(data, pos)
            key = _text(data, pos + 8, size)
            pos += 8 + size
        kind = data[pos] if pos < len(data) else _missing()
        pos += 1
        value: Any
        if kind in _CONSTANTS:
            value = _CONSTANTS[kind]
        elif kind in _NUMBERS:
            (value,) = _NUMBERS[kind].unpack_from(data, pos)
            pos += 8
        elif kind in (STRING, BYTES):
            (size,) = _LENGTH.unpack_from(data, pos)
            value = _text(data, pos + 8, size) if kind == STRING else _slice(data, pos + 8, size)
            pos += 8 + size
        elif kind in (ARRAY, RECORD):
            (count,) = _LENGTH.unpack_from(data, pos)
            pos += 8
            if count > len(data) - pos:  # every entry takes at least a byte: a corrupt count
                raise _Bad(f"container of {count} entries in {len(data) - pos} bytes")
            container: Any = [] if kind == ARRAY else {}
            if count:
                if len(stack) >= _MAX_DEPTH:
                    raise _Bad(f"nested deeper than {_MAX_DEPTH} levels")
                _add(stack, key, container)
                stack.append([container, count])
                continue
            value = container
        else:
            raise _Bad(f"unknown type byte {kind} at byte {pos - 1}")
        if not stack:
            return value, pos
        _add(stack, key, value)
        while stack and stack[-1][1] == 0:
            done = stack.pop()[0]
            if not stack:
                return done, pos


def _add(stack: list[list[Any]], key: str | None, value: Any) -> None:
    """Put `value` into the innermost open container, if any, and count it."""
    if not stack:
        return
    top = stack[-1]
    if key is None:
        top[0].append(value)
    else:
        top[0][key] = value
    top[1] -= 1


def _missing() -> int:
    raise _Bad("frame ends before a value")


def _slice(data: bytes, start: int, size: int) -> bytes:
    if start + size > len(data):
        raise _Bad("frame ends inside a string or bytes value")
    return data[start : start + size]


def _text(data: bytes, start: int, size: int) -> str:
    try:
        return str(_slice(data, start, size), "utf-8")
    except UnicodeDecodeError as err:
        raise _Bad(f"invalid UTF-8 in a string: {err.reason}") from None


def _encode(value: Any, out: bytearray, depth: int) -> None:
    if value is None or value is True or value is False:
        out.append(NULL if value is None else TRUE if value else FALSE)
    elif isinstance(value, int):
        kind = I64 if value in _I64_RANGE else U64 if value in _U64_RANGE else None
        if kind is None:
            raise _Bad(f"integer {value} does not fit 64 bits")
        out += _TYPE_AND_NUMBER[kind].pack(kind, value)
    elif isinstance(value, float):
        out += _TYPE_AND_NUMBER[F64].pack(F64, value)
    elif isinstance(value, str):
        raw = _utf8(value)
        out += _TYPE_AND_LENGTH.pack(STRING, len(raw))
        out += raw
    elif isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        out += _TYPE_AND_LENGTH.pack(BYTES, len(raw))
        out += raw
    elif isinstance(value, list | tuple):
        _deeper(depth)
        out += _TYPE_AND_LENGTH.pack(ARRAY, len(value))
        for item in value:
            _encode(item, out, depth + 1)
    elif isinstance(value, dict):
        _deeper(depth)
        out += _TYPE_AND_LENGTH.pack(RECORD, len(value))
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Bad(f"record keys must be strings, got {type(key).__name__}")
            raw = _utf8(key)
            out += _LENGTH.pack(len(raw))
            out += raw
            _encode(item, out, depth + 1)
    else:
        raise _Bad(f"cannot encode value of type {type(value).__name__}")


def _deeper(depth: int) -> None:
    if depth >= _MAX_DEPTH:
        raise _Bad(f"nested deeper than {_MAX_DEPTH} levels")


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise _Bad(f"cannot encode string as UTF-8 at index {err.start}: {err.reason}") from None
