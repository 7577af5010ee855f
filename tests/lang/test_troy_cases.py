"""Conformance cases for Troy: tests/lang/cases/troy-*/.

Each case directory holds `flow.troy` (plus any modules it uses; a `search/`
directory is the case's $CONTRAFLOW_PATH) and either `expected.txt`, the exact
`contraflow check` summary, or `error.txt`, one expected substring per line
(`flow.troy:LINE:COL: message`, hints) of the error output.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.lang.compile_cases import check_case, compile_output

from contraflow.lang.commands import summarize
from contraflow.lang.troy.compiler import compile_file

CASES = Path(__file__).parent / "cases"
TROY_CASES = sorted(p for p in CASES.glob("troy-*") if p.is_dir())


def run_case(case: Path) -> tuple[str, bool]:
    """(output, ok): the summary when the file compiles, else the rendered errors."""
    search = case / "search"
    search_path = [search] if search.is_dir() else []
    return compile_output(case, lambda: summarize(compile_file(case / "flow.troy", search_path=search_path)))


@pytest.mark.parametrize("case", TROY_CASES, ids=[p.name for p in TROY_CASES])
def test_troy_case(case: Path) -> None:
    check_case(case, *run_case(case))


def test_there_are_enough_cases() -> None:
    assert len(TROY_CASES) >= 40
    assert sum((p / "error.txt").exists() for p in TROY_CASES) >= 20
