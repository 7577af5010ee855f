"""Issue 17: the Troy, Trickle and tremor-script front ends under hypothesis, thousands of
inputs in all (real sources with random edits, and random text): every input either
compiles or is a language error with a position; nothing else escapes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contraflow.errors import UserError
from contraflow.lang.errors import LangError, LangErrors, SourceText
from contraflow.lang.script.parser import parse_script
from contraflow.lang.trickle.parser import parse_trickle
from contraflow.lang.troy.compiler import compile_source

ROOT = Path(__file__).resolve().parents[2]
SEEDS = {
    "troy": sorted((ROOT / "examples").glob("*/*.troy")),
    "trickle": sorted((ROOT / "tests" / "lang" / "cases").glob("*/*.trickle")),
    "tremor": sorted((ROOT / "tests" / "lang" / "cases").glob("*/*.tremor")),
}
# Characters that matter to the grammars, so edits hit interesting places.
ALPHABET = st.sampled_from(list("{}[]()<>\"'#;:,.=+-*/%|&!^~$@ \n\tabcdefghijklmnopqrstuvwxyz0123456789_\\"))
FUZZ = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def front_end(kind: str) -> Callable[[str], Any]:
    if kind == "troy":
        return lambda text: compile_source(text, "fuzz.troy")
    if kind == "trickle":
        return lambda text: parse_trickle(SourceText("fuzz.trickle", text))
    return lambda text: parse_script(text, "fuzz.tremor")


@st.composite
def edited_sources(draw: st.DrawFn, kind: str) -> str:
    """A real source with a few random deletions, insertions and duplications."""
    text = draw(st.sampled_from(SEEDS[kind])).read_text()
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(text)))
        end = draw(st.integers(pos, min(len(text), pos + 12)))
        edit = draw(st.sampled_from(["delete", "insert", "repeat"]))
        if edit == "delete":
            text = text[:pos] + text[end:]
        elif edit == "insert":
            text = text[:pos] + draw(st.text(ALPHABET, min_size=1, max_size=8)) + text[pos:]
        else:
            text = text[:pos] + text[pos:end] * draw(st.integers(2, 40)) + text[end:]
    return text


def compiles_or_is_a_language_error(kind: str, text: str) -> None:
    try:
        front_end(kind)(text)
    except (LangError, LangErrors) as err:
        errors = err.errors if isinstance(err, LangErrors) else [err]
        assert all(e.position.line >= 1 and e.position.column >= 1 for e in errors)
    except UserError:
        pass  # e.g. a `use` of a module that does not exist: one line, no traceback


@pytest.mark.parametrize("kind", ["troy", "trickle", "tremor"])
def test_seeds_exist(kind: str) -> None:
    assert SEEDS[kind], f"no {kind} sources to start from"


@FUZZ
@given(data=st.data(), kind=st.sampled_from(["troy", "trickle", "tremor"]))
def test_edited_sources_never_crash_a_front_end(data: st.DataObject, kind: str) -> None:
    compiles_or_is_a_language_error(kind, data.draw(edited_sources(kind)))


@FUZZ
@given(text=st.text(ALPHABET, max_size=120), kind=st.sampled_from(["troy", "trickle", "tremor"]))
def test_random_text_never_crashes_a_front_end(text: str, kind: str) -> None:
    compiles_or_is_a_language_error(kind, text)
