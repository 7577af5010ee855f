"""Reading a syslog line the way Tremor does (its `syslog_loose` parser): RFC 5424 first, then RFC 3164.

Loose means nothing is rejected: a line that is neither becomes
`{"protocol": "RFC3164", "msg": <the line>}`. The result has Tremor's keys,
each only when the line has it: `hostname`, `severity`, `facility`,
`timestamp` (epoch nanoseconds), `protocol`, `protocol_version` (5424),
`appname`, `msgid`, `structured_data` (`{id: [{name: value}, ...]}`, values
as written, escapes kept), `procid` (a string) and `msg`.

A 3164 timestamp without a year takes the current UTC year (last year for a
December line read in January); times without an offset are UTC.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

FACILITIES = [
    "kern",
    "user",
    "mail",
    "daemon",
    "auth",
    "syslog",
    "lpr",
    "news",
    "uucp",
    "cron",
    "authpriv",
    "ftp",
    "ntp",
    "audit",
    "alert",
    "clockd",
    "local0",
    "local1",
    "local2",
    "local3",
    "local4",
    "local5",
    "local6",
    "local7",
]
SEVERITIES = ["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"]
MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

_PRI = re.compile(r"<(\d+)>")
_SPACES = re.compile(r"[ \t]*")
_5424_HEAD = re.compile(r"(\d+)[ \t]+([^ ]*) ")
_FIELD = re.compile(r"[^\s:]+")  # a header field: no whitespace, no ':'
_APPNAME = re.compile(r"\S+")  # 5424 app names may hold ':'
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)
_3164_DATE = re.compile(r"([A-Za-z]{3})[ \t]+(\d+)[ \t]+(?:(\d+)[ \t]+)?(\d+):(\d+):(\d+):?")
_SD_ID = re.compile(r"\[([^\s\]=]+)[ \t]*")
_SD_PARAM = re.compile(r'([^\]=]+)=[ \t]*"((?:[^\\"]|\\.)*)"', re.DOTALL)
_SYSTAG = re.compile(r"([^\s:\[]*)\[([^\]]+)\]")
_NS = 1_000_000_000
_I64 = range(-(2**63), 2**63)

Element = tuple[str, list[tuple[str, str]]]


def parse_syslog(text: str, now: Callable[[], datetime]) -> dict[str, Any]:
    """The record for one line; `now` gives the year of 3164 dates that have none."""
    line = text.strip()
    record = _rfc5424(line)
    if record is None:
        record = _rfc3164(line, now)
    if record is None:
        return {"protocol": "RFC3164", "msg": text} if text else {"protocol": "RFC3164"}
    return record


def _pri(line: str) -> tuple[dict[str, str], int]:
    """Facility and severity from `<N>` (when there is one that fits a byte) and where the rest starts."""
    found = _PRI.match(line)
    if found is None or int(found.group(1)) > 255:
        return {}, 0
    pri = int(found.group(1))
    names = {"severity": SEVERITIES[pri & 7]}
    if pri >> 3 < len(FACILITIES):
        names["facility"] = FACILITIES[pri >> 3]
    return names, found.end()


def _record(
    pri: dict[str, str],
    timestamp: int | None,
    protocol: str,
    fields: dict[str, Any],
    elements: list[Element],
    msg: str,
) -> dict[str, Any]:
    """The decoded record with Tremor's keys in Tremor's order."""
    out: dict[str, Any] = {}
    if fields.get("hostname") is not None:
        out["hostname"] = fields["hostname"]
    out.update(pri)
    if timestamp is not None:
        out["timestamp"] = timestamp
    out["protocol"] = protocol
    for key in ("protocol_version", "appname", "msgid"):
        if fields.get(key) is not None:
            out[key] = fields[key]
    if elements:
        out["structured_data"] = {
            ident: [{name: value} for name, value in params] for ident, params in elements
        }
    if fields.get("procid") is not None:
        out["procid"] = fields["procid"]
    if msg:
        out["msg"] = msg
    return out


def _rfc5424(line: str) -> dict[str, Any] | None:
    pri, pos = _pri(line)
    head = _5424_HEAD.match(line, pos)
    if head is None or int(head.group(1)) >= 2**32:
        return None
    try:
        timestamp = rfc3339_ns(head.group(2))
    except ValueError:
        return None
    pos = _SPACES.match(line, head.end()).end()  # type: ignore[union-attr]
    fields: dict[str, Any] = {"protocol_version": int(head.group(1))}
    for key, pattern in (("hostname", _FIELD), ("appname", _APPNAME), ("procid", _FIELD), ("msgid", _FIELD)):
        if key != "hostname":
            spaces = _SPACES.match(line, pos).end()  # type: ignore[union-attr]
            if spaces == pos:
                return None
            pos = spaces
        found = pattern.match(line, pos)
        if found is None:
            return None
        fields[key] = None if found.group() == "-" else found.group()
        pos = found.end()
    pos = _SPACES.match(line, pos).end()  # type: ignore[union-attr]
    parsed = _structured_data(line, pos, strict=False)
    if parsed is None:
        return None
    elements, pos = parsed
    pos = _SPACES.match(line, pos).end()  # type: ignore[union-attr]
    return _record(pri, timestamp, "RFC5424", fields, elements, line[pos:])


def _rfc3164(line: str, now: Callable[[], datetime]) -> dict[str, Any] | None:
    pri, pos = _pri(line)
    pos = _SPACES.match(line, pos).end()  # type: ignore[union-attr]
    dated = _3164_timestamp(line, pos, now)
    if dated is None:
        return None
    timestamp, pos = dated
    first, pos = _3164_field(line, pos)
    second, pos = _3164_field(line, pos) if first is not None else (None, pos)
    host, appname, procid = _host_and_tag(first, second)
    pos = _SPACES.match(line, pos).end()  # type: ignore[union-attr]
    if line.startswith(":", pos):
        pos = _SPACES.match(line, pos + 1).end()  # type: ignore[union-attr]
    parsed = _structured_data(line, pos, strict=True)
    elements: list[Element] = []
    if parsed is not None:
        elements, pos = parsed
        pos = _SPACES.match(line, pos).end()  # type: ignore[union-attr]
    fields = {"hostname": host, "appname": appname, "procid": procid}
    return _record(pri, timestamp, "RFC3164", fields, elements, line[pos:])


def _3164_field(line: str, pos: int) -> tuple[str | None, int]:
    """A header field after exactly one space: the field ('-' for a nil one), or None when absent."""
    if not line.startswith(" ", pos):
        return None, pos
    found = _FIELD.match(line, pos + 1)
    return (None, pos) if found is None else (found.group(), found.end())


def _host_and_tag(first: str | None, second: str | None) -> tuple[str | None, str | None, str | None]:
    """Which of the one or two header fields is the host and which the `app[pid]` tag."""
    if first is not None and second is not None and second != "-":
        tag = _SYSTAG.fullmatch(second)
        host = None if first == "-" else first
        return (host, tag.group(1), tag.group(2)) if tag else (host, second, None)
    if first is not None and first != "-" and second is None:
        tag = _SYSTAG.fullmatch(first)
        return (None, tag.group(1), tag.group(2)) if tag else (first, None, None)
    return None, None, None


def _3164_timestamp(line: str, pos: int, now: Callable[[], datetime]) -> tuple[int | None, int] | None:
    """`Mmm dd hh:mm:ss`, `Mmm dd yyyy hh:mm:ss` or an RFC 3339 time, as nanoseconds and the end."""
    found = _3164_DATE.match(line, pos)
    if found is not None and found.group(1).lower() in MONTHS:
        month = MONTHS.index(found.group(1).lower()) + 1
        day, hour, minute, second = (int(found.group(i)) for i in (2, 4, 5, 6))
        if found.group(3) is None:
            today = now()
            year = today.year - 1 if today.month == 1 and month == 12 else today.year
        else:
            year = int(found.group(3))
        stamp = _utc_ns(year, month, day, hour, minute, second, 0)
        if stamp is not None:
            return stamp, found.end()
    end = line.find(" ", pos)
    if end < 0:
        return None
    try:
        return rfc3339_ns(line[pos:end]), end
    except ValueError:
        return None


def rfc3339_ns(text: str) -> int | None:
    """Epoch nanoseconds of an RFC 3339 time, None when out of i64 range; ValueError when not one."""
    found = _RFC3339.fullmatch(text)
    if found is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second = (int(found.group(i)) for i in range(1, 7))
    fraction = int((found.group(7) or "0")[:9].ljust(9, "0"))
    offset = 0
    if found.group(9):
        hours, minutes = int(found.group(10)), int(found.group(11))
        if hours > 23 or minutes > 59:
            raise ValueError(f"offset out of range: {text!r}")
        offset = (hours * 3600 + minutes * 60) * (1 if found.group(9) == "+" else -1)
    stamp = _utc_ns(year, month, day, hour, minute, second, fraction, offset)
    if stamp is None:
        raise ValueError(f"no such date: {text!r}")
    return stamp if stamp in _I64 else None


def _utc_ns(
    year: int, month: int, day: int, hour: int, minute: int, second: int, fraction: int, offset: int = 0
) -> int | None:
    """Nanoseconds since the epoch, or None for a date that does not exist (second 60 is a leap second)."""
    try:
        datetime(year, month, day, hour, minute, min(second, 59), tzinfo=UTC)
    except ValueError:
        return None
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) - offset
    return seconds * _NS + fraction


def _structured_data(line: str, pos: int, strict: bool) -> tuple[list[Element], int] | None:
    """`-` or one or more `[id name="value" ...]` elements: the elements and the end; None if neither.

    RFC 5424 (`strict=False`) keeps elements without parameters and skips
    malformed ones up to their `]`; RFC 3164 takes only well-formed elements
    with parameters (brackets in a 3164 message are usually just text).
    """
    if line.startswith("-", pos):
        return [], pos + 1
    elements: list[Element] = []
    start = pos
    while line.startswith("[", pos):
        element, end = _element(line, pos)
        if element is not None and (element[1] or not strict):
            elements.append(element)
        elif strict:
            break
        else:
            end = line.find("]", pos)
            if end < 0:
                break
            end += 1
        pos = end
    if pos == start:
        return None
    return elements, pos


def _element(line: str, pos: int) -> tuple[Element | None, int]:
    head = _SD_ID.match(line, pos)
    if head is None:
        return None, pos
    params: list[tuple[str, str]] = []
    pos = head.end()
    while True:
        param = _SD_PARAM.match(line, pos)
        if param is None:
            break
        params.append((param.group(1), param.group(2)))
        pos = param.end()
        if not (line.startswith(" ", pos) and _SD_PARAM.match(line, pos + 1)):
            break
        pos += 1
    if not line.startswith("]", pos):
        return None, pos
    return (head.group(1), params), pos + 1
