"""Tilde extractors: `glob|...|`, `re|...|`, `json||`, `base64||`, `kv||`, `datetime|fmt|`.

An extractor is a test and a transformation in one: in a pattern it matches
when it can extract something from the value, and a bound pattern sees the
extracted value in place of the original field. Each extractor is built once
at compile time into a function `value -> extracted | MISSING`.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson

from contraflow.lang.script.values import MISSING

Extractor = Callable[[Any], Any]


def _glob(text: str) -> Extractor:
    rx = re.compile(fnmatch.translate(text), re.DOTALL)

    def run(value: Any) -> Any:
        return value if type(value) is str and rx.match(value) else MISSING

    return run


def _regex(text: str) -> Extractor:
    rx = re.compile(text)

    def run(value: Any) -> Any:
        if type(value) is not str:
            return MISSING
        m = rx.search(value)
        if m is None:
            return MISSING
        return {k: v for k, v in m.groupdict().items() if v is not None}

    return run


def _json(text: str) -> Extractor:
    def run(value: Any) -> Any:
        if type(value) is not str:
            return MISSING
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return MISSING

    return run


def _base64(text: str) -> Extractor:
    def run(value: Any) -> Any:
        if type(value) is not str:
            return MISSING
        try:
            return base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return MISSING

    return run


def _kv(text: str) -> Extractor:
    """`key=value` pairs separated by whitespace (the common `kv||` form)."""

    def run(value: Any) -> Any:
        if type(value) is not str:
            return MISSING
        out: dict[str, str] = {}
        for part in value.split():
            key, sep, val = part.partition("=")
            if not sep or not key:
                return MISSING
            out[key] = val
        return out if out else MISSING

    return run


def _datetime(text: str) -> Extractor:
    """Parse with a strftime format; yields nanoseconds since the epoch."""

    def run(value: Any) -> Any:
        if type(value) is not str:
            return MISSING
        try:
            parsed = datetime.strptime(value, text)
        except ValueError:
            return MISSING
        from contraflow.lang.script.stdlib.datetime_ import to_nanos

        return to_nanos(parsed)

    return run


EXTRACTORS: dict[str, Callable[[str], Extractor]] = {
    "glob": _glob,
    "re": _regex,
    "rerg": _regex,
    "json": _json,
    "base64": _base64,
    "kv": _kv,
    "datetime": _datetime,
}


def build_extractor(kind: str, text: str) -> Extractor:
    """The extractor function for `kind|text|`; raises KeyError for unknown kinds, re.error for bad regexes."""
    return EXTRACTORS[kind](text)
