"""`std::test::` functions: Tremor's unit-test helpers (`assert`, and the `suite`/`test` entry points)."""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import fail, to_text


@tremor_fn("test::assert")
def assert_(name: Any, expected: Any, got: Any) -> bool:
    """True when `expected == got`, else an error naming the assertion and both values."""
    label = want(name, str, "test::assert", "name")
    if expected != got or type(expected) is not type(got):
        fail(f"assertion `{label}` failed: expected {to_text(expected)}, got {to_text(got)}")
    return True


@tremor_fn("test::suite")
def suite(*_: Any) -> None:
    """An entry point of Tremor's test runner; it does nothing when a script runs."""


@tremor_fn("test::test")
def test(*_: Any) -> None:
    """An entry point of Tremor's test runner; it does nothing when a script runs."""
