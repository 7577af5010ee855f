"""`json::` functions."""

from __future__ import annotations

from typing import Any

import orjson

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import fail


@tremor_fn("json::decode")
def decode(s: Any) -> Any:
    try:
        return orjson.loads(want(s, str, "json::decode"))
    except orjson.JSONDecodeError as exc:
        fail(f"json::decode: invalid JSON: {exc}")


@tremor_fn("json::encode")
def encode(v: Any) -> str:
    try:
        return orjson.dumps(v).decode()
    except TypeError as exc:
        fail(f"json::encode: {exc}")


@tremor_fn("json::encode_pretty")
def encode_pretty(v: Any) -> str:
    try:
        return orjson.dumps(v, option=orjson.OPT_INDENT_2).decode()
    except TypeError as exc:
        fail(f"json::encode_pretty: {exc}")
