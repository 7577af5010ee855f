"""Parsing of the sizes, durations and times users type on the command line."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from contraflow.errors import UserError

_DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 1000,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 1000**2,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 1000**3,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 1000**4,
}
_NUMBER_UNIT = re.compile(r"\s*(\d+)\s*([a-zA-Z]*)\s*")


def parse_duration_ms(text: str, what: str = "duration") -> int:
    """'7d', '12h', '30m', '10s', '500ms' (a bare number is milliseconds) -> ms, > 0."""
    match = _NUMBER_UNIT.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or (unit and unit not in _DURATION_UNITS):
        raise UserError(f"invalid {what} {text!r}: use a number with a unit, e.g. 7d, 12h, 30m, 10s, 500ms")
    value = int(match.group(1)) * _DURATION_UNITS.get(unit, 1)
    if value <= 0:
        raise UserError(f"invalid {what} {text!r}: it must be positive")
    return value


def parse_size(text: str, what: str = "size") -> int:
    """'1048576', '64KiB', '10MB', '1G' (K/M/G are binary, KB/MB/GB decimal) -> bytes, > 0."""
    match = _NUMBER_UNIT.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise UserError(
            f"invalid {what} {text!r}: use bytes, optionally with a unit (e.g. 1048576, 64KiB, 1GB)"
        )
    value = int(match.group(1)) * _SIZE_UNITS[unit]
    if value <= 0:
        raise UserError(f"invalid {what} {text!r}: it must be positive")
    return value


def parse_count(text: str, what: str, minimum: int = 0) -> int:
    """A plain integer >= minimum."""
    try:
        value = int(text)
    except ValueError:
        raise UserError(f"invalid {what} {text!r}: expected an integer") from None
    if value < minimum:
        raise UserError(f"invalid {what} {value}: it must be at least {minimum}")
    return value


def parse_time_ms(text: str) -> int:
    """An ISO-8601 time (UTC unless it names a zone) or epoch milliseconds -> epoch ms."""
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    try:
        moment = datetime.fromisoformat(stripped)
    except ValueError:
        raise UserError(
            f"invalid time {text!r}: use ISO-8601 (2024-05-01T12:00:00Z) or epoch milliseconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)
