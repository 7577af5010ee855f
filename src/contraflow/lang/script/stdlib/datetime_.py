"""`datetime::` functions over nanoseconds since the Unix epoch (UTC), as Tremor represents time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import fail

_NS = 1_000_000_000


def to_nanos(dt: datetime) -> int:
    """Nanoseconds since the epoch; naive datetimes are taken as UTC."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * _NS + delta.microseconds * 1_000


def _dt(ns: Any, fn: str) -> datetime:
    value = want(ns, int, fn, "nanoseconds")
    return datetime.fromtimestamp(value // _NS, tz=UTC).replace(microsecond=(value % _NS) // 1_000)


@tremor_fn("datetime::parse")
def parse(s: Any, fmt: Any) -> int:
    """Parse with a strftime-style format (`%Y-%m-%d %H:%M:%S`, `%z`...)."""
    text, pattern = want(s, str, "datetime::parse"), want(fmt, str, "datetime::parse", "format")
    try:
        return to_nanos(datetime.strptime(text, pattern))
    except ValueError as exc:
        fail(f"datetime::parse: {exc}")


@tremor_fn("datetime::format")
def format_(ns: Any, fmt: Any) -> str:
    return _dt(ns, "datetime::format").strftime(want(fmt, str, "datetime::format", "format"))


@tremor_fn("datetime::iso8601")
def iso8601(ns: Any) -> str:
    """RFC 3339 / ISO 8601 with nanosecond precision, e.g. 2021-01-02T03:04:05.000000006Z."""
    value = want(ns, int, "datetime::iso8601", "nanoseconds")
    return _dt(value, "datetime::iso8601").strftime("%Y-%m-%dT%H:%M:%S") + f".{value % _NS:09d}Z"


@tremor_fn("datetime::rfc3339")
def rfc3339(ns: Any) -> str:
    return iso8601(ns)


@tremor_fn("datetime::from_iso8601")
def from_iso8601(s: Any) -> int:
    text = want(s, str, "datetime::from_iso8601")
    try:
        return to_nanos(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError as exc:
        fail(f"datetime::from_iso8601: {exc}")


def _part(name: str, get: Any) -> None:
    def part(ns: Any) -> int:
        return int(get(_dt(ns, f"datetime::{name}"), ns))

    part.__name__ = name
    tremor_fn(f"datetime::{name}")(part)


_part("year", lambda d, ns: d.year)
_part("month", lambda d, ns: d.month)
_part("day", lambda d, ns: d.day)
_part("hour", lambda d, ns: d.hour)
_part("minute", lambda d, ns: d.minute)
_part("second", lambda d, ns: d.second)
_part("millisecond", lambda d, ns: (ns % _NS) // 1_000_000)
_part("microsecond", lambda d, ns: (ns % _NS) // 1_000)
_part("nanosecond", lambda d, ns: ns % _NS)
_part("day_of_week", lambda d, ns: d.isoweekday())
_part("day_of_year", lambda d, ns: d.timetuple().tm_yday)


@tremor_fn("datetime::with_seconds")
def with_seconds(n: Any) -> int:
    return want(n, int, "datetime::with_seconds") * _NS


@tremor_fn("datetime::with_milliseconds")
def with_milliseconds(n: Any) -> int:
    return want(n, int, "datetime::with_milliseconds") * 1_000_000
