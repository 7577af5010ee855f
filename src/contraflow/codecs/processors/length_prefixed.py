"""`length-prefixed`: frames preceded by their length as a big-endian unsigned integer.

The prefix is 8 bytes (u64), as in Tremor, so contraflow and Tremor talk to
each other; `length_bytes` (1, 2, 4 or 8) selects a narrower prefix, e.g. 4
for the common u32 framing. `max_length` (default 0, no limit) guards memory
against a corrupt prefix: an oversized frame is reported and its body skipped
as it streams by, which keeps the framing of the frames after it intact.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from contraflow.codecs.config import BadValue
from contraflow.codecs.errors import CodecError, FrameErrors
from contraflow.codecs.processors.processor import Postprocessor, Preprocessor

_FORMATS = {1: ">B", 2: ">H", 4: ">I", 8: ">Q"}


@dataclass(frozen=True)
class LengthPrefixedOptions:
    length_bytes: int = 8
    max_length: int = 0

    def __post_init__(self) -> None:
        if self.length_bytes not in _FORMATS:
            raise BadValue("length_bytes", f"must be one of 1, 2, 4, 8, got {self.length_bytes}")
        if self.max_length < 0:
            raise BadValue("max_length", f"must be 0 (no limit) or positive, got {self.max_length}")


class LengthPrefixedPreprocessor(Preprocessor[LengthPrefixedOptions]):
    name = "length-prefixed"

    def setup(self) -> None:
        header = struct.Struct(_FORMATS[self.options.length_bytes])
        self._unpack_from = header.unpack_from
        self._header = header.size
        self._max = self.options.max_length
        self._buffer = bytearray()  # an incomplete frame (prefix and part of its body)
        self._skip = 0  # body bytes of a rejected oversized frame still to drop

    def process(self, data: bytes) -> list[bytes]:
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        errors: list[CodecError] = []
        if self._buffer:
            self._buffer += data
            frames, used = self._scan(self._buffer, errors)
            del self._buffer[:used]
        else:
            frames, used = self._scan(data, errors)
            if used < len(data):
                self._buffer += memoryview(data)[used:]
        if errors:
            raise FrameErrors(frames, errors)
        return frames

    def finish(self) -> list[bytes]:
        buffered = len(self._buffer)
        self._buffer.clear()
        self._skip = 0
        if buffered:
            raise self.error(f"stream ended inside a frame ({buffered} bytes buffered)")
        return []

    def _scan(self, buffer: bytes | bytearray, errors: list[CodecError]) -> tuple[list[bytes], int]:
        """The complete frames at the start of `buffer` and how many bytes were consumed."""
        frames: list[bytes] = []
        header = self._header
        unpack_from = self._unpack_from
        limit = self._max
        end_of_data = len(buffer)
        pos = 0
        with memoryview(buffer) as view:
            while end_of_data - pos >= header:
                (length,) = unpack_from(view, pos)
                end = pos + header + length
                if limit and length > limit:
                    errors.append(
                        self.error(f"discarded a frame of {length} bytes: longer than max_length {limit}")
                    )
                    self._skip = max(0, end - end_of_data)
                    pos = min(end, end_of_data)
                    continue
                if end > end_of_data:
                    break
                frames.append(view[pos + header : end].tobytes())
                pos = end
        return frames, pos


class LengthPrefixedPostprocessor(Postprocessor[LengthPrefixedOptions]):
    """Prefixes every frame with its length."""

    name = "length-prefixed"

    def setup(self) -> None:
        self._pack = struct.Struct(_FORMATS[self.options.length_bytes]).pack
        self._largest = 256**self.options.length_bytes - 1
        if self.options.max_length:
            self._largest = min(self._largest, self.options.max_length)

    def process(self, data: bytes) -> list[bytes]:
        if len(data) > self._largest:
            raise self.error(f"frame of {len(data)} bytes is longer than the prefix allows ({self._largest})")
        return [self._pack(len(data)) + data]
