"""`string::` functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import fail, to_text


@tremor_fn("string::len")
def len_(s: Any) -> int:
    """Length in characters (Unicode code points)."""
    return len(want(s, str, "string::len"))


@tremor_fn("string::bytes")
def bytes_(s: Any) -> int:
    return len(want(s, str, "string::bytes").encode("utf-8"))


@tremor_fn("string::is_empty")
def is_empty(s: Any) -> bool:
    return want(s, str, "string::is_empty") == ""


@tremor_fn("string::replace")
def replace(s: Any, old: Any, new: Any) -> str:
    return want(s, str, "string::replace").replace(
        want(old, str, "string::replace"), want(new, str, "string::replace")
    )


def _text_method(name: str, method: Callable[[str], str]) -> Callable[[Any], str]:
    def call(s: Any) -> str:
        return method(want(s, str, name))

    return call


# `string::<name>`: one `str` method on a string argument.
for _name, _method in (
    ("trim", str.strip),
    ("trim_start", str.lstrip),
    ("trim_end", str.rstrip),
    ("lowercase", str.lower),
    ("uppercase", str.upper),
):
    tremor_fn(f"string::{_name}")(_text_method(f"string::{_name}", _method))


@tremor_fn("string::capitalize")
def capitalize(s: Any) -> str:
    text = want(s, str, "string::capitalize")
    return text[:1].upper() + text[1:]


@tremor_fn("string::substr")
def substr(s: Any, start: Any, end: Any) -> str:
    """Characters from `start` (inclusive) to `end` (exclusive)."""
    text = want(s, str, "string::substr")
    a, b = want(start, int, "string::substr", "start"), want(end, int, "string::substr", "end")
    if not 0 <= a <= b:
        fail(f"string::substr: invalid range {a}..{b}")
    return text[a:b]


@tremor_fn("string::split")
def split(s: Any, sep: Any) -> list[str]:
    separator = want(sep, str, "string::split", "separator")
    if separator == "":
        fail("string::split: separator must not be empty")
    return want(s, str, "string::split").split(separator)


@tremor_fn("string::contains")
def contains(s: Any, sub: Any) -> bool:
    return want(sub, str, "string::contains") in want(s, str, "string::contains")


@tremor_fn("string::starts_with")
def starts_with(s: Any, prefix: Any) -> bool:
    return want(s, str, "string::starts_with").startswith(want(prefix, str, "string::starts_with"))


@tremor_fn("string::ends_with")
def ends_with(s: Any, suffix: Any) -> bool:
    return want(s, str, "string::ends_with").endswith(want(suffix, str, "string::ends_with"))


@tremor_fn("string::reverse")
def reverse(s: Any) -> str:
    return want(s, str, "string::reverse")[::-1]


@tremor_fn("string::from_utf8_lossy")
def from_utf8_lossy(s: Any) -> str:
    """A binary decoded as UTF-8, invalid sequences replaced (a string is returned as it is)."""
    value = want(s, (bytes, str), "string::from_utf8_lossy")
    return value.decode("utf-8", errors="replace") if type(value) is bytes else value


@tremor_fn("string::into_binary")
def into_binary(s: Any) -> bytes:
    return want(s, str, "string::into_binary").encode("utf-8")


@tremor_fn("string::format")
def format_(fmt: Any, *args: Any) -> str:
    """`{}` placeholders filled in order; `{{` and `}}` are literal braces."""
    text = want(fmt, str, "string::format", "format")
    out: list[str] = []
    rest = list(args)
    i = 0
    while i < len(text):
        two = text[i : i + 2]
        if two in ("{{", "}}"):
            out.append(two[0])
            i += 2
        elif two == "{}":
            if not rest:
                fail("string::format: more placeholders than arguments")
            out.append(to_text(rest.pop(0)))
            i += 2
        else:
            out.append(text[i])
            i += 1
    if rest:
        fail("string::format: more arguments than placeholders")
    return "".join(out)
