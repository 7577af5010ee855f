"""Language error rendering: file:line:col, the source line, a caret, a hint."""

from __future__ import annotations

from contraflow.lang.errors import LangError, ScriptRuntimeError, SourceText


def test_lang_error_points_at_column_with_caret_and_hint() -> None:
    src = SourceText("flow.troy", "define flow f\nflow\n  create connector c from nope;\nend;\n")
    err = LangError(
        "unknown connector kind 'nope'", src.position(3, 27, 4), src, hint="known kinds: file, stdio"
    )
    lines = str(err).splitlines()
    assert lines[0] == "flow.troy:3:27: unknown connector kind 'nope'"
    assert lines[1] == "   3 |   create connector c from nope;"
    assert lines[2].index("^") == lines[1].index("nope")
    assert lines[2].strip() == "^^^^"
    assert lines[3] == "hint: known kinds: file, stdio"
    assert err.exit_code == 1


def test_error_past_end_of_input_has_no_source_line() -> None:
    src = SourceText("q.trickle", "select event")
    err = LangError("unexpected end of input", src.position(2, 1), src)
    assert str(err) == "q.trickle:2:1: unexpected end of input"


def test_runtime_error_names_node_and_position() -> None:
    src = SourceText("s.tremor", "event.a + 1")
    err = ScriptRuntimeError("cannot add string and integer", src.position(1, 9), node="classify")
    assert str(err) == "cannot add string and integer in node 'classify' at s.tremor:1:9"
