"""The `syslog` codec: RFC 5424 (IETF) and RFC 3164 (BSD) lines, with Tremor's record shape.

Decoding is `syslog_message.parse_syslog` (loose: nothing is rejected). Encoding
follows Tremor: `protocol` "RFC5424" needs `protocol_version`; neither given
means RFC 5424 version 1. RFC 5424 needs `facility` and `severity` and writes
`-` for each missing header field and the time with its shortest exact
fraction (`2003-10-11T22:14:15.003+00:00`); RFC 3164 writes
`<pri>Mmm dd hh:mm:ss host app[procid]: msg` with pri 13 (user.notice) when
facility or severity is missing, and the current time when there is none.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError
from contraflow.codecs.string_codec import text, utf8
from contraflow.codecs.syslog_message import FACILITIES, MONTHS, SEVERITIES, parse_syslog

_DEFAULT_PRI = 13
_NS = 1_000_000_000
_U32_MAX = 2**32 - 1
_I64 = range(-(2**63), 2**63)


def _now() -> datetime:
    return datetime.now(UTC)


def _invalid(reason: str) -> CodecError:
    return CodecError("syslog", f"invalid syslog data: {reason}")


class SyslogCodec(Codec):
    name = "syslog"
    mime_types = ("text/plain",)

    def decode(self, data: bytes) -> dict[str, Any]:
        return parse_syslog(text("syslog", data), _now)

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, dict):
            raise _invalid(f"expected a record, got {type(value).__name__}")
        protocol, found = value.get("protocol"), value.get("protocol_version")
        version = found if type(found) is int and 0 <= found <= _U32_MAX else None
        if protocol == "RFC3164":
            parts = _rfc3164(value)
        elif protocol == "RFC5424" and version is not None:
            parts = _rfc5424(value, version)
        elif protocol == "RFC5424":
            raise _invalid("missing protocol version")
        elif protocol is None and version is not None:
            raise _invalid("missing protocol type")
        elif protocol is not None:
            raise _invalid("invalid protocol type (RFC3164 or RFC5424)")
        else:
            parts = _rfc5424(value, 1)
        return utf8("syslog", " ".join(parts))


def _pri(value: dict[str, Any], required: bool) -> int:
    facility, severity = value.get("facility"), value.get("severity")
    if not required and not (isinstance(facility, str) and isinstance(severity, str)):
        return _DEFAULT_PRI
    if not isinstance(facility, str):
        raise _invalid("facility missing")
    if not isinstance(severity, str):
        raise _invalid("severity missing")
    if facility not in FACILITIES:
        raise _invalid(f"invalid facility {facility!r}")
    if severity not in SEVERITIES:
        raise _invalid(f"invalid severity {severity!r}")
    return FACILITIES.index(facility) * 8 + SEVERITIES.index(severity)


def _timestamp(value: dict[str, Any]) -> int | None:
    stamp = value.get("timestamp")
    return stamp if type(stamp) is int and stamp in _I64 else None


def _text(value: dict[str, Any], key: str) -> str | None:
    found = value.get(key)
    if key == "procid" and type(found) is int:
        return str(found)
    return found if isinstance(found, str) else None


def _rfc3164(value: dict[str, Any]) -> list[str]:
    stamp = _timestamp(value)
    seconds = time.time_ns() // _NS if stamp is None else stamp // _NS
    moment = datetime.fromtimestamp(seconds, UTC)
    month = MONTHS[moment.month - 1].capitalize()
    parts = [f"<{_pri(value, required=False)}>{month} {moment.day:2d} {moment:%H:%M:%S}"]
    parts.append(_text(value, "hostname") or "-")
    appname, procid = _text(value, "appname"), _text(value, "procid")
    if appname is None:
        parts.append(":")
    else:
        parts.append(f"{appname}:" if procid is None else f"{appname}[{procid}]:")
    if "structured_data" in value:
        parts.append(_structured_data(value["structured_data"]))
    msg = _text(value, "msg")
    if msg is not None:
        parts.append(msg)
    return parts


def _rfc5424(value: dict[str, Any], version: int) -> list[str]:
    parts = [f"<{_pri(value, required=True)}>{version}"]
    stamp = _timestamp(value)
    parts.append("-" if stamp is None else rfc3339(stamp))
    parts.extend(_text(value, key) or "-" for key in ("hostname", "appname", "procid", "msgid"))
    sd = value.get("structured_data")
    parts.append("-" if sd is None or sd == {} else _structured_data(sd))
    msg = _text(value, "msg")
    if msg is not None:
        parts.append(msg)
    return parts


def rfc3339(stamp: int) -> str:
    """UTC with the shortest of 0, 3, 6 or 9 fraction digits that is exact, as chrono writes it."""
    seconds, nanos = divmod(stamp, _NS)
    text = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if nanos:
        digits = 3 if nanos % 1_000_000 == 0 else 6 if nanos % 1000 == 0 else 9
        text += "." + f"{nanos:09d}"[:digits]
    return text + "+00:00"


def _structured_data(sd: Any) -> str:
    """`[id name="value" ...]` per element, adjacent; values are written as they are (escapes kept)."""
    if not isinstance(sd, dict):
        raise _invalid("Invalid structured data: structured data not an object")
    out = []
    for ident, params in sd.items():
        out.append(f"[{ident}")
        if not isinstance(params, list):
            raise _invalid("Invalid structured data: params not an array of objects")
        for pair in params:
            if not isinstance(pair, dict):
                raise _invalid("Invalid structured data: param's key value pair not an object")
            for name, param in pair.items():
                if not isinstance(param, str):
                    raise _invalid(f"Invalid structured data: param {name!r} is not a string")
                out.append(f' {name}="{param}"')
        out.append("]")
    return "".join(out)
