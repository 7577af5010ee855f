"""`std::url::` functions: percent-encoding of URL components."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want


@tremor_fn("url::encode")
def encode(s: Any) -> str:
    return quote(want(s, str, "url::encode"), safe="")


@tremor_fn("url::decode")
def decode(s: Any) -> str:
    return unquote(want(s, str, "url::decode"))
