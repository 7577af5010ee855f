"""The tremor-script conformance suite: one directory per case under `cases/script-*`.

A case holds `script.tremor` and either `error.txt` (text the compile error
must contain) or `in.jsonl` + `out.jsonl`: one expected result per input event,
in the format `contraflow script --show-drops` prints (`{"$port": ...}`, `{"$dropped": true}`,
and `{"$error": "..."}` where the actual error must contain the expected text).
State carries from one event to the next. Every case also runs through the
reference interpreter, which must agree with the compiler.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from contraflow.events import encode_value
from contraflow.lang.errors import LangError, ScriptRuntimeError
from contraflow.lang.script.commands import format_error, format_result
from contraflow.lang.script.compiler import compile_script
from contraflow.lang.script.interpreter import Interpreter
from contraflow.lang.script.modules import file_resolver
from contraflow.lang.script.parser import parse_script

CASES = sorted(p for p in (Path(__file__).parent / "cases").glob("script-*") if p.is_dir())


def _canonical(value: Any) -> bytes:
    """JSON with sorted keys: tells 1 from 1.0 and true from 1, ignores key order."""
    return orjson.dumps(orjson.loads(encode_value(value)), option=orjson.OPT_SORT_KEYS)


def _run_all(runner: Any, events: list[Any]) -> list[Any]:
    state: Any = None
    out = []
    for event in events:
        try:
            result = runner.run(event, {}, state)
        except ScriptRuntimeError as err:
            out.append(format_error(err))
            continue
        state = result.state
        out.append(format_result(result))
    return out


def _load_jsonl(path: Path) -> list[Any]:
    return [orjson.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_suite_is_large_enough() -> None:
    assert len(CASES) >= 110


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Path) -> None:
    text = (case / "script.tremor").read_text()
    error_file = case / "error.txt"
    modules = file_resolver([case])  # `use lib::x;` finds lib/x.tremor in the case directory
    if error_file.exists():
        expected_error = error_file.read_text().rstrip("\n")
        with pytest.raises(LangError) as info:
            compile_script(parse_script(text, "script.tremor"), name=case.name, modules=modules)
        assert expected_error in info.value.render()
        return
    script = parse_script(text, "script.tremor")
    compiled = compile_script(script, name=case.name, modules=modules)
    events = _load_jsonl(case / "in.jsonl")
    expected = _load_jsonl(case / "out.jsonl")
    actual = _run_all(compiled, events)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        if isinstance(want, dict) and set(want) == {"$error"}:
            assert isinstance(got, dict) and "$error" in got, got
            assert want["$error"] in got["$error"]
        else:
            assert _canonical(got) == _canonical(want)
    reference = _run_all(
        Interpreter(parse_script(text, "script.tremor"), name=case.name, modules=modules),
        _load_jsonl(case / "in.jsonl"),
    )
    assert [_canonical(r) for r in reference] == [_canonical(a) for a in actual]
