"""Small durable files: write to a temp file, fsync, rename, fsync the directory.

A reader sees either the old or the new content, never a torn mix, and a
checkpoint that `write_atomic` returned from survives power loss.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_offset(path: Path, offset: int) -> None:
    write_atomic(path, f"{offset}\n".encode())


def read_offset(path: Path) -> int | None:
    """The stored offset, or None if the file is missing or unreadable as one."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        return int(text)
    except ValueError:
        return None
