"""What a Troy or Trickle conformance case expects, checked the same way for both languages.

A case directory holds either `error.txt` (lines that must all appear in the
rendered compile errors) or `expected.txt` (the exact `contraflow check` summary).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from contraflow.errors import UserError

# The first line of a rendered error: `file:line:col: message`.
_ERROR_LINE = re.compile(r"^\S+:\d+:\d+: ")


def compile_output(case: Path, compile_and_summarize: Callable[[], str]) -> tuple[str, bool]:
    """(output, ok): the summary when the source compiles, else the rendered errors."""
    try:
        return compile_and_summarize(), True
    except UserError as err:
        return str(err).replace(f"{case}/", ""), False


def check_case(case: Path, output: str, ok: bool) -> None:
    error_file = case / "error.txt"
    if error_file.exists():
        assert not ok, f"expected a compile error, got:\n{output}"
        expected_lines = [line for line in error_file.read_text().splitlines() if line.strip()]
        for expected in expected_lines:
            assert expected in output, f"missing {expected!r} in:\n{output}"
        # One mistake, one error: every error reported must be one the case expects.
        reported = [line for line in output.splitlines() if _ERROR_LINE.match(line)]
        listed = [line for line in expected_lines if _ERROR_LINE.match(line)]
        if listed:  # a case listing positioned errors lists all of them
            assert len(reported) == len(listed), f"expected {len(listed)} error(s), got:\n{output}"
    else:
        assert ok, f"unexpected error:\n{output}"
        assert output == (case / "expected.txt").read_text().rstrip("\n")
