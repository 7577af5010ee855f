"""Kafka's wire primitives: the typed fields every request and response is made of.

Kafka frames are a big-endian i32 size followed by the message. Requests start
with a header (api_key i16, api_version i16, correlation_id i32, client_id
nullable string, and tagged fields in flexible versions); responses start with
the correlation id. Only ApiVersions is served in a flexible (compact) version
here, so the compact forms are limited to what it needs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from contraflow.spu.protocol.batch import WireBuffer

T = TypeVar("T")

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
SIZE_PREFIX = _I32.size


class MalformedRequestError(ValueError):
    """A request that does not parse as the version it claims."""


class Reader:
    """Reads fields in order from one request body."""

    __slots__ = ("_buf", "_pos")

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self._buf = memoryview(buf)
        self._pos = pos

    def _fixed(self, codec: struct.Struct) -> int:
        try:
            (value,) = codec.unpack_from(self._buf, self._pos)
        except struct.error:
            raise MalformedRequestError(f"request ends inside a field at byte {self._pos}") from None
        self._pos += codec.size
        return int(value)

    def int8(self) -> int:
        return self._fixed(_I8)

    def int16(self) -> int:
        return self._fixed(_I16)

    def int32(self) -> int:
        return self._fixed(_I32)

    def int64(self) -> int:
        return self._fixed(_I64)

    def boolean(self) -> bool:
        return self.int8() != 0

    def unsigned_varint(self) -> int:
        value = shift = 0
        while True:
            if self._pos >= len(self._buf) or shift > 63:
                raise MalformedRequestError(f"bad varint at byte {self._pos}")
            byte = self._buf[self._pos]
            self._pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def _take(self, size: int) -> memoryview:
        end = self._pos + size
        if size < 0 or end > len(self._buf):
            raise MalformedRequestError(f"field of {size} bytes overruns the request at byte {self._pos}")
        view = self._buf[self._pos : end]
        self._pos = end
        return view

    def nullable_string(self) -> str | None:
        size = self.int16()
        return None if size < 0 else self._decode(self._take(size))

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise MalformedRequestError(f"null string where one is required (byte {self._pos})")
        return value

    def compact_nullable_string(self) -> str | None:
        size = self.unsigned_varint() - 1
        return None if size < 0 else self._decode(self._take(size))

    def nullable_bytes(self) -> memoryview | None:
        size = self.int32()
        return None if size < 0 else self._take(size)

    def bytes_(self) -> memoryview:
        return self.nullable_bytes() or memoryview(b"")

    def nullable_array(self, item: Callable[[Reader], T]) -> list[T] | None:
        count = self.int32()
        if count < 0:
            return None
        if count > len(self._buf) - self._pos:  # every item takes at least one byte
            raise MalformedRequestError(f"array of {count} items cannot fit the request")
        return [item(self) for _ in range(count)]

    def array(self, item: Callable[[Reader], T]) -> list[T]:
        return self.nullable_array(item) or []

    def skip_tagged_fields(self) -> None:
        for _ in range(self.unsigned_varint()):
            self.unsigned_varint()  # tag
            self._take(self.unsigned_varint())

    @staticmethod
    def _decode(raw: memoryview) -> str:
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            raise MalformedRequestError("a string field is not UTF-8") from None


class Writer:
    """Builds one response body as a list of parts (record data is not copied)."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes | bytearray | memoryview] = []

    def _fixed(self, codec: struct.Struct, value: int) -> Writer:
        self.parts.append(codec.pack(value))
        return self

    def int8(self, value: int) -> Writer:
        return self._fixed(_I8, value)

    def int16(self, value: int) -> Writer:
        return self._fixed(_I16, value)

    def int32(self, value: int) -> Writer:
        return self._fixed(_I32, value)

    def int64(self, value: int) -> Writer:
        return self._fixed(_I64, value)

    def boolean(self, value: bool) -> Writer:
        return self.int8(1 if value else 0)

    def unsigned_varint(self, value: int) -> Writer:
        out = bytearray()
        while value > 0x7F:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        self.parts.append(bytes(out))
        return self

    def string(self, value: str | None) -> Writer:
        if value is None:
            return self.int16(-1)
        raw = value.encode()
        self.int16(len(raw))
        self.parts.append(raw)
        return self

    def bytes_(self, value: bytes | bytearray | memoryview | None) -> Writer:
        if value is None:
            return self.int32(-1)
        self.int32(len(value))
        self.parts.append(value)
        return self

    def byte_parts(self, parts: list[WireBuffer]) -> Writer:
        """A bytes field whose content is several buffers back to back (a fetch's batches)."""
        self.int32(sum(len(p) for p in parts))
        self.parts.extend(parts)
        return self

    def array(self, items: Iterable[T] | None, item: Callable[[Writer, T], object]) -> Writer:
        if items is None:
            return self.int32(-1)
        listed = list(items)
        self.int32(len(listed))
        for value in listed:
            item(self, value)
        return self

    def int32_array(self, values: Iterable[int]) -> Writer:
        return self.array(values, Writer.int32)

    def compact_array(self, items: Iterable[T], item: Callable[[Writer, T], object]) -> Writer:
        listed = list(items)
        self.unsigned_varint(len(listed) + 1)
        for value in listed:
            item(self, value)
        return self

    def empty_tagged_fields(self) -> Writer:
        return self.unsigned_varint(0)

    def size(self) -> int:
        return sum(len(p) for p in self.parts)


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def read_request_header(reader: Reader, flexible: bool) -> RequestHeader:
    """Header v1 (v2 adds tagged fields in flexible versions); api key and version come first
    in every version, so the caller peeks them to decide `flexible`."""
    header = RequestHeader(reader.int16(), reader.int16(), reader.int32(), reader.nullable_string())
    if flexible:
        reader.skip_tagged_fields()
    return header


def peek_api(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame body, or raise."""
    if len(frame) < 8:
        raise MalformedRequestError(f"request of {len(frame)} bytes has no header")
    api_key, api_version = struct.unpack_from(">hh", frame, 0)
    (correlation_id,) = _I32.unpack_from(frame, 4)
    return int(api_key), int(api_version), int(correlation_id)


def frame_response(correlation_id: int, body: Writer) -> list[bytes | bytearray | memoryview]:
    """Size prefix + response header v0 + body, as parts to write."""
    size = _I32.size + body.size()
    return [_I32.pack(size) + _I32.pack(correlation_id), *body.parts]
