"""What a Troy or Trickle conformance case expects, checked the same way for both languages.

A case directory holds either `error.txt` (lines that must all appear in the
rendered compile errors) or `expected.txt` (the exact `contraflow check` summary).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from contraflow.errors import UserError


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
        for expected in error_file.read_text().splitlines():
            if expected.strip():
                assert expected in output, f"missing {expected!r} in:\n{output}"
    else:
        assert ok, f"unexpected error:\n{output}"
        assert output == (case / "expected.txt").read_text().rstrip("\n")
