"""`textual-length-prefixed`: frames as `<length in ASCII digits><space><bytes>`.

The octet-counting framing of syslog over TCP/TLS (RFC 5425, RFC 6587), named
as in Tremor. Like Tremor, any ASCII whitespace ends the length. A prefix that
is not a number cannot be resynchronised, so it is an error that drops what
is buffered; the stream continues with the next chunk.
"""

from __future__ import annotations

import re

from contraflow.codecs.errors import CodecError, FrameErrors
from contraflow.codecs.processors.processor import Postprocessor, Preprocessor

_WHITESPACE = re.compile(rb"[ \t\n\r\f\v]")
_MAX_DIGITS = 20


class TextualLengthPrefixedPreprocessor(Preprocessor):
    name = "textual-length-prefixed"

    def setup(self) -> None:
        self._buffer = bytearray()
        self._length: int | None = None  # of the frame whose body is being received

    def process(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        buffer += data
        frames: list[bytes] = []
        pos = 0
        try:
            while True:
                if self._length is None:
                    found = _WHITESPACE.search(buffer, pos, pos + _MAX_DIGITS + 1)
                    if found is None:
                        if len(buffer) - pos > _MAX_DIGITS:
                            raise self._bad_prefix(bytes(buffer[pos : pos + _MAX_DIGITS]))
                        break
                    digits = bytes(buffer[pos : found.start()])
                    if not digits.isdigit():
                        raise self._bad_prefix(digits)
                    self._length = int(digits)
                    pos = found.end()
                end = pos + self._length
                if end > len(buffer):
                    break
                frames.append(bytes(buffer[pos:end]))
                pos = end
                self._length = None
        except CodecError as err:
            buffer.clear()
            self._length = None
            raise FrameErrors(frames, [err]) from None
        del buffer[:pos]
        return frames

    def finish(self) -> list[bytes]:
        buffered = len(self._buffer)
        self._buffer.clear()
        self._length = None
        if buffered:
            raise self.error(f"stream ended inside a frame ({buffered} bytes buffered)")
        return []

    def _bad_prefix(self, prefix: bytes) -> CodecError:
        return self.error(f"expected a length in ASCII digits and a space, got {prefix!r}; buffer dropped")


class TextualLengthPrefixedPostprocessor(Postprocessor):
    name = "textual-length-prefixed"

    def process(self, data: bytes) -> list[bytes]:
        return [b"%d %b" % (len(data), data)]
