"""`separate`: split a byte stream into frames at a one-byte separator, and join them back.

Tremor's semantics: `separator` (default `"\n"`, exactly one byte), `max_length`
(default 8192 bytes, 0 for no limit) and `buffered` (default true: a fragment
after the last separator waits for the next chunk; false: every chunk ends a
frame). The end of the stream flushes a buffered fragment as a last frame.

Unlike Tremor, a frame longer than `max_length` is reported (a `CodecError`
per frame, never silently dropped) and discarded *whole*, up to its separator,
so the frames that follow are the same however the stream was chunked.

The hot path is one `bytes.split` per chunk: frames are the split's own
slices, and only a frame that straddles chunks is copied (joined once).
"""

from __future__ import annotations

from dataclasses import dataclass

from contraflow.codecs.config import BadValue
from contraflow.codecs.errors import CodecError, FrameErrors
from contraflow.codecs.processors.processor import Postprocessor, Preprocessor

DEFAULT_MAX_LENGTH = 8192


def _separator_byte(separator: str) -> bytes:
    raw = separator.encode("utf-8")
    if len(raw) != 1:
        raise BadValue("separator", f"must be exactly one byte, got {separator!r}")
    return raw


@dataclass(frozen=True)
class SeparateOptions:
    separator: str = "\n"
    max_length: int = DEFAULT_MAX_LENGTH
    buffered: bool = True

    def __post_init__(self) -> None:
        _separator_byte(self.separator)
        if self.max_length < 0:
            raise BadValue("max_length", f"must be 0 (no limit) or positive, got {self.max_length}")


@dataclass(frozen=True)
class SeparatorOptions:
    separator: str = "\n"

    def __post_init__(self) -> None:
        _separator_byte(self.separator)


class SeparatePreprocessor(Preprocessor[SeparateOptions]):
    name = "separate"

    def setup(self) -> None:
        self._sep = _separator_byte(self.options.separator)
        self._max = self.options.max_length
        self._buffered = self.options.buffered
        self._pending: list[bytes] = []  # fragments of the frame not yet ended by a separator
        self._pending_len = 0
        self._skipping = False  # inside an overlong frame: drop bytes up to the next separator

    def whole_lines_limit(self) -> int | None:
        """`max_length` when the next chunk, if it ends with a newline, splits into exactly its own
        lines (newline separator, buffered, nothing held from an earlier chunk); else None."""
        if self._sep != b"\n" or not self._buffered or self._pending or self._skipping:
            return None
        return self._max

    def process(self, data: bytes) -> list[bytes]:
        parts = data.split(self._sep)
        if not self._buffered:
            return self._checked(parts, self._overlong(data, 0, len(data)), [])
        tail = parts.pop()
        errors: list[CodecError] = []
        if not parts:  # no separator: the whole chunk continues the current frame
            if data:
                self._hold(data, errors)
            return self._checked(parts, False, errors)
        # Frames wholly inside this chunk lie between its first and last separator.
        overlong = self._overlong(data, len(parts[0]) + 1, len(data) - len(tail))
        if self._skipping:
            del parts[0]  # the end of a frame already reported as too long
            self._skipping = False
        elif self._pending:
            self._pending.append(parts[0])
            parts[0] = b"".join(self._pending)
            self._pending = []
            self._pending_len = 0
        if self._max and parts and len(parts[0]) > self._max:
            overlong = True
        if tail:
            self._hold(tail, errors)
        return self._checked(parts, overlong, errors)

    def finish(self) -> list[bytes]:
        self._skipping = False
        if not self._pending:
            return []
        frame = b"".join(self._pending)
        self._pending = []
        self._pending_len = 0
        return [frame]

    def _overlong(self, data: bytes, start: int, end: int) -> bool:
        """Whether `data[start:end]` holds a frame over `max_length`, in O(size / max_length) steps.

        Checking every frame's length costs a quarter of the split itself; instead
        hop from separator to separator at most `max_length` bytes apart: only a
        window of `max_length + 1` bytes without a separator means a long frame.
        """
        limit = self._max
        if not limit:
            return False
        sep = self._sep
        pos = start
        while end - pos > limit:
            found = data.rfind(sep, pos, pos + limit + 1)
            if found < 0:
                return True
            pos = found + 1
        return False

    def _hold(self, fragment: bytes, errors: list[CodecError]) -> None:
        """Keep a fragment until its separator arrives, unless the frame is already too long."""
        if self._skipping:
            return
        held = self._pending_len + len(fragment)
        if self._max and held > self._max:
            errors.append(self._too_long(f"{held} bytes without a separator"))
            self._pending = []
            self._pending_len = 0
            self._skipping = True
        else:
            self._pending.append(fragment)
            self._pending_len = held

    def _checked(self, frames: list[bytes], overlong: bool, errors: list[CodecError]) -> list[bytes]:
        """`frames` minus those over `max_length` (only scanned when `overlong` says there are some)."""
        if overlong:
            limit = self._max
            errors.extend(self._too_long(f"{len(f)} bytes") for f in frames if len(f) > limit)
            frames = [f for f in frames if len(f) <= limit]
        if errors:
            raise FrameErrors(frames, errors)
        return frames

    def _too_long(self, what: str) -> CodecError:
        return self.error(f"discarded a frame of {what}: longer than max_length {self._max}")


class SeparatePostprocessor(Postprocessor[SeparatorOptions]):
    """Ends every frame with the separator (default newline)."""

    name = "separate"

    def setup(self) -> None:
        self._sep = _separator_byte(self.options.separator)

    @property
    def separator(self) -> bytes:
        """The byte every frame ends with (lets a sink join many frames in one step)."""
        return self._sep

    def process(self, data: bytes) -> list[bytes]:
        return [data + self._sep]
