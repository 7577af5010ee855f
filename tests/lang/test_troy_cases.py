"""Conformance cases for Troy: tests/lang/cases/troy-*/.

Each case directory holds `flow.troy` (plus any modules it uses; a `search/`
directory is the case's $CONTRAFLOW_PATH) and either `expected.txt`, the exact
`contraflow check` summary, or `error.txt`, one expected substring per line
(`flow.troy:LINE:COL: message`, hints) of the error output.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contraflow.errors import UserError
from contraflow.lang.commands import summarize
from contraflow.lang.troy.compiler import compile_file

CASES = Path(__file__).parent / "cases"
TROY_CASES = sorted(p for p in CASES.glob("troy-*") if p.is_dir())


def run_case(case: Path) -> tuple[str, bool]:
    """(output, ok): the summary when the file compiles, else the rendered errors."""
    search = case / "search"
    try:
        result = compile_file(case / "flow.troy", search_path=[search] if search.is_dir() else [])
    except UserError as err:
        return str(err).replace(f"{case}/", ""), False
    return summarize(result), True


@pytest.mark.parametrize("case", TROY_CASES, ids=[p.name for p in TROY_CASES])
def test_troy_case(case: Path) -> None:
    output, ok = run_case(case)
    error_file = case / "error.txt"
    if error_file.exists():
        assert not ok, f"expected a compile error, got:\n{output}"
        for expected in error_file.read_text().splitlines():
            if expected.strip():
                assert expected in output, f"missing {expected!r} in:\n{output}"
    else:
        assert ok, f"unexpected error:\n{output}"
        assert output == (case / "expected.txt").read_text().rstrip("\n")


def test_there_are_enough_cases() -> None:
    assert len(TROY_CASES) >= 40
    assert sum((p / "error.txt").exists() for p in TROY_CASES) >= 20
