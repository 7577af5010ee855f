"""`datetime::` functions over nanoseconds since the Unix epoch (UTC), as Tremor represents time.

A datetime is an integer (UTC nanoseconds) or, as in Tremor 0.13, the record
`datetime::with_timezone(ns, tz)` makes: `{"timestamp": ns, "tz": tz}`, where
`tz` is an IANA name, a `datetime::timezones::` constant or a fixed offset
(`+01:00`); the calendar parts are then read in that zone.
"""

from __future__ import annotations

import re
import zoneinfo
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any

from contraflow.lang.script.stdlib import tremor_const, tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import fail

_NS = 1_000_000_000


def to_nanos(dt: datetime) -> int:
    """Nanoseconds since the epoch; naive datetimes are taken as UTC."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * _NS + delta.microseconds * 1_000


_OFFSET = re.compile(r"^([+-])(\d{2}):?(\d{2})$")


def _zone(tz: Any, fn: str) -> tzinfo:
    """The zone an IANA name or a fixed offset (`+01:00`, `-0530`) names."""
    name = want(tz, str, fn, "timezone")
    offset = _OFFSET.match(name)
    if offset:
        sign = -1 if offset.group(1) == "-" else 1
        return timezone(sign * timedelta(hours=int(offset.group(2)), minutes=int(offset.group(3))))
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        fail(f"{fn}: unknown timezone {name!r}")


def _nanos(value: Any, fn: str) -> int:
    """The UTC nanoseconds of a datetime (an integer, or a `with_timezone` record)."""
    if type(value) is dict:
        return want(value.get("timestamp"), int, fn, "timestamp")
    return want(value, int, fn, "datetime")


def _dt(value: Any, fn: str) -> datetime:
    ns = _nanos(value, fn)
    utc = datetime.fromtimestamp(ns // _NS, tz=UTC).replace(microsecond=(ns % _NS) // 1_000)
    return utc.astimezone(_zone(value.get("tz"), fn)) if type(value) is dict else utc


# chrono's specifiers that Python's strftime lacks or reads differently (`%f` is nanoseconds there).
_CHRONO = re.compile(r"%(%|\.f|\.[369]f|[369]f|f|:z)")
_FRACTION = re.compile(r"\.(\d{7,9})")


def _chrono_format(dt: datetime, ns: int, fmt: str) -> str:
    """`fmt` with chrono's fraction and offset specifiers filled in, the rest left to strftime."""
    nanos = ns % _NS

    def token(match: re.Match[str]) -> str:
        spec = match.group(1)
        if spec == "%":
            return "%%"
        if spec == ":z":
            offset = dt.strftime("%z")
            return f"{offset[:3]}:{offset[3:]}" if offset else ""
        if spec == ".f":  # as few digits as the value needs: none, 3, 6 or 9
            digits = 0 if not nanos else 3 if not nanos % 1_000_000 else 6 if not nanos % 1_000 else 9
            return f".{nanos:09d}"[: digits + 1] if digits else ""
        width = int(spec[-2]) if len(spec) > 1 and spec[-2].isdigit() else 9
        text = f"{nanos:09d}"[:width]
        return f".{text}" if spec.startswith(".") else text

    return dt.strftime(_CHRONO.sub(token, fmt))


@tremor_fn("datetime::parse")
def parse(s: Any, fmt: Any) -> int:
    """Parse with a strftime-style format (`%Y-%m-%d %H:%M:%S`, `%z`, chrono's `%:z` and `%.f`)."""
    text, pattern = want(s, str, "datetime::parse"), want(fmt, str, "datetime::parse", "format")
    extra = 0
    fraction = _FRACTION.search(text)
    if fraction:  # Python reads at most 6 fraction digits: keep the nanoseconds beyond them
        digits = fraction.group(1).ljust(9, "0")
        extra = int(digits[6:])
        text = text[: fraction.start(1)] + digits[:6] + text[fraction.end(1) :]
    python = re.sub(r"%\.[369]?f", ".%f", pattern).replace("%:z", "%z")
    try:
        return to_nanos(datetime.strptime(text, python)) + extra
    except ValueError as exc:
        fail(f"datetime::parse: {exc}")


@tremor_fn("datetime::format")
def format_(value: Any, fmt: Any) -> str:
    """strftime-style formatting with chrono's extras (`%.f`, `%.3f`, `%f` nanoseconds, `%:z`),
    in the datetime's zone."""
    fn = "datetime::format"
    return _chrono_format(_dt(value, fn), _nanos(value, fn), want(fmt, str, fn, "format"))


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
    def part(value: Any) -> int:
        fn = f"datetime::{name}"
        return int(get(_dt(value, fn), _nanos(value, fn)))

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
_part("day_of_month", lambda d, ns: d.day)
_part("iso_week", lambda d, ns: d.isocalendar().week)
_part("subsecond_millis", lambda d, ns: (ns % _NS) // 1_000_000)
_part("subsecond_micros", lambda d, ns: (ns % _NS) // 1_000)
_part("subsecond_nanos", lambda d, ns: ns % _NS)


@tremor_fn("datetime::with_timezone")
def with_timezone(utc_nanos: Any, tz: Any) -> dict[str, Any]:
    """`{"timestamp", "tz"}`: the datetime the other functions read in zone `tz` (checked here)."""
    fn = "datetime::with_timezone"
    _zone(tz, fn)
    return {"timestamp": want(utc_nanos, int, fn, "utc_nanos"), "tz": tz}


@tremor_fn("datetime::rfc2822")
def rfc2822(value: Any) -> str:
    """`Thu, 01 Jan 1970 00:00:00 +0000`, in the datetime's zone."""
    return _dt(value, "datetime::rfc2822").strftime("%a, %d %b %Y %H:%M:%S %z")


def _timezone_constants() -> None:
    """`datetime::timezones::EUROPE_BERLIN` and the rest: every IANA zone this system knows.

    Tremor's values are indices it tells users never to rely on; here each is the zone's name.
    """
    for name in zoneinfo.available_timezones():
        tremor_const(f"datetime::timezones::{re.sub(r'[/-]', '_', name).upper()}", name)


_timezone_constants()


@tremor_fn("datetime::with_seconds")
def with_seconds(n: Any) -> int:
    return want(n, int, "datetime::with_seconds") * _NS


@tremor_fn("datetime::with_milliseconds")
def with_milliseconds(n: Any) -> int:
    return want(n, int, "datetime::with_milliseconds") * 1_000_000
