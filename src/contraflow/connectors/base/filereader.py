"""Reading a file as content chunks that end on frame boundaries, with byte positions.

Positions count *content* bytes: for a plain file they are file offsets (a
resume seeks), for a compressed file (detected by its magic bytes, as Tremor's
file connector does) they are offsets in the decompressed stream (a resume
decompresses from the start and skips). Chunks end just after the last
separator they contain, so a position that is acknowledged never falls inside
a line: a restart resumes exactly after the last delivered line.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from contraflow.codecs.processors.compress import StreamDecompressor
from contraflow.compression import MAGIC_BYTES, detect
from contraflow.lang.graph import PluginRef


def leading_separator(preprocessors: Sequence[PluginRef]) -> bytes | None:
    """The separator byte when the chain starts with `separate`: chunks may then end after any separator."""
    if preprocessors and preprocessors[0].name == "separate":
        return str(preprocessors[0].config.get("separator", "\n")).encode()
    return None


@dataclass(frozen=True)
class Chunk:
    data: bytes
    start: int
    end: int


@dataclass(frozen=True)
class FileIdentity:
    """Which file a position belongs to: a replaced or truncated file starts over."""

    device: int
    inode: int
    size: int

    @classmethod
    def of(cls, path: Path) -> FileIdentity:
        st = os.stat(path)
        return cls(st.st_dev, st.st_ino, st.st_size)

    def same_file(self, device: int, inode: int) -> bool:
        return (self.device, self.inode) == (device, inode)


class ContentReader:
    """Blocking reader of a file's content; run its calls in a worker thread."""

    def __init__(self, path: Path, chunk_size: int, algorithm: str = "autodetect") -> None:
        self.path = path
        self.chunk_size = chunk_size
        self.algorithm = algorithm
        self._file: BinaryIO | None = None
        self._decompressor: StreamDecompressor | None = None
        self.compressed = False
        self._done = False
        self._carry = b""  # content already decompressed past a resume position

    def open(self, position: int) -> None:
        """(Re)open positioned at content offset `position`."""
        self.close()
        self._file = open(self.path, "rb")  # noqa: SIM115 - kept open across calls
        self._done = False
        head = self._file.read(MAGIC_BYTES)
        self._file.seek(0)
        self.compressed = self.algorithm != "autodetect" or detect(head) is not None
        self._carry = b""
        self._decompressor = StreamDecompressor(self.algorithm) if self.compressed else None
        if not self.compressed:
            self._file.seek(position)
            return
        skip = position
        while skip > 0:
            content = self.read()
            if not content:
                break
            if len(content) > skip:  # keep the part after the position for the next read
                self._carry = content[skip:]
            skip -= len(content)

    def read(self, size: int | None = None) -> bytes:
        """The next content bytes (from `size` bytes of the file, default `chunk_size`); b"" at the end."""
        if self._carry:
            carry, self._carry = self._carry, b""
            return carry
        assert self._file is not None
        while not self._done:
            raw = self._file.read(size or self.chunk_size)
            if self._decompressor is None:
                self._done = not raw
                return raw
            if not raw:
                self._done = True
                return self._decompressor.finish()
            content = self._decompressor.decompress(raw)
            if content:
                return content
        return b""

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class AlignedChunks:
    """Content chunks cut after the last separator; the unterminated tail comes last, at EOF.

    Calls run in worker threads; a lock keeps a read that outlived its
    cancelled caller from racing a seek or close.
    """

    def __init__(self, reader: ContentReader, separator: bytes | None) -> None:
        self.reader = reader
        self.separator = separator
        self._pending = b""
        self.position = 0
        self._lock = threading.Lock()

    def seek(self, position: int) -> None:
        with self._lock:
            self.reader.open(position)
            self._pending = b""
            self.position = position

    def close(self) -> None:
        with self._lock:
            self.reader.close()

    def next(self) -> Chunk | None:
        """The next chunk; None at the end of the file."""
        with self._lock:
            return self._next()

    def next_many(self, count: int) -> list[Chunk]:
        """Up to `count` next chunks (fewer at the end of the file, none after it): one thread hop for many.

        Plain content cut at a separator is read as one chunk of `count` reads' bytes: the
        same bytes and the same cut after the last separator as `count` chunks merged, without
        a Python step (a read, a search, a concatenation) per `chunk_size` bytes."""
        with self._lock:
            if self.separator is not None and not self.reader.compressed:
                chunk = self._next(count * self.reader.chunk_size)
                return [] if chunk is None else [chunk]
            chunks: list[Chunk] = []
            while len(chunks) < count and (chunk := self._next()) is not None:
                chunks.append(chunk)
            return chunks

    def _next(self, size: int | None = None) -> Chunk | None:
        while True:
            data = self.reader.read(size)
            if not data:
                tail, self._pending = self._pending, b""
                return self._emit(tail) if tail else None
            if self.separator is None:
                return self._emit(data)
            cut = data.rfind(self.separator)
            if cut < 0:
                self._pending += data
                continue
            # one copy of the pull (a slice and a concatenation were two)
            head = (
                b"".join((self._pending, memoryview(data)[: cut + 1]))
                if self._pending or cut + 1 < len(data)
                else data
            )
            self._pending = data[cut + 1 :]
            return self._emit(head)

    def _emit(self, data: bytes) -> Chunk:
        chunk = Chunk(data, self.position, self.position + len(data))
        self.position = chunk.end
        return chunk
