"""A partition's offset checkpoints: one offset per small file, written whole (`contraflow.atomic_files`)."""

from __future__ import annotations

from pathlib import Path

from contraflow.atomic_files import write_atomic


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
