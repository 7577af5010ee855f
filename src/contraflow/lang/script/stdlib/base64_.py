"""`base64::` functions (standard alphabet, padded)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import fail


@tremor_fn("base64::encode")
def encode(s: Any) -> str:
    data = want(s, (str, bytes), "base64::encode")
    raw = data.encode("utf-8") if type(data) is str else data
    return base64.b64encode(raw).decode("ascii")


@tremor_fn("base64::decode")
def decode(s: Any) -> str:
    try:
        return base64.b64decode(want(s, str, "base64::decode"), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        fail(f"base64::decode: invalid input: {exc}")
