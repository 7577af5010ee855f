"""`contraflow script FILE.tremor [--state]` run as a real subprocess, as a user would."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
from click.testing import CliRunner
from tests.cli_process import ROOT, run_cli

from contraflow.lang.script.commands import script_command


def _run(args: list[str], stdin: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("script", *args, stdin=stdin, cwd=cwd)


def test_runs_each_json_line_and_keeps_state(tmp_path: Path) -> None:
    script = tmp_path / "count.tremor"
    script.write_text(
        "let state = match state of case null => 1 default => state + 1 end;\n"
        'match event of case %{ alert == true } => emit event => "alerts" case %{ skip == true } => drop '
        'default => {"n": state, "event": event} end\n'
    )
    lines = '{"a": 1}\n{"alert": true}\n\n{"skip": true}\n[2]\n'
    proc = _run([str(script), "--state"], lines, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = [orjson.loads(line) for line in proc.stdout.splitlines()]
    assert out == [  # the dropped {"skip": true} prints nothing
        {"n": 1, "event": {"a": 1}},
        {"$port": "alerts", "event": {"alert": True}},
        {"n": 4, "event": [2]},
        {"$state": 4},
    ]


def test_show_drops_prints_the_marker_for_a_dropped_event(tmp_path: Path) -> None:
    """The subprocess test above shows a drop prints nothing; the flag, in process (no second start)."""
    script = tmp_path / "keep.tremor"
    script.write_text("match event of case %{ keep == true } => event default => drop end")
    lines = '{"keep": true, "n": 1}\n{"n": 2}\n{"keep": true, "n": 3}\n'
    result = CliRunner().invoke(script_command, [str(script), "--show-drops"], input=lines)
    assert result.exit_code == 0, result.output
    assert [orjson.loads(line) for line in result.output.splitlines()] == [
        {"keep": True, "n": 1},
        {"$dropped": True},
        {"keep": True, "n": 3},
    ]


def test_without_state_each_event_starts_from_null(tmp_path: Path) -> None:
    script = tmp_path / "s.tremor"
    script.write_text("state")
    proc = _run([str(script)], "1\n2\n", tmp_path)
    assert proc.stdout.splitlines() == ["null", "null"]


def test_bad_json_and_runtime_errors_report_line_numbers_and_continue(tmp_path: Path) -> None:
    script = tmp_path / "s.tremor"
    script.write_text("event.a")
    proc = _run([str(script)], '{"a": 1}\nnot json\n{}\n{"a": 3}\n', tmp_path)
    assert proc.returncode == 1
    out = [orjson.loads(line) for line in proc.stdout.splitlines()]
    assert out[0] == 1 and out[3] == 3
    assert out[1]["$error"].startswith("invalid JSON")
    assert "non-existing key `a`" in out[2]["$error"]
    assert "error: line 2: invalid JSON" in proc.stderr
    assert "s.tremor:1:1: trying to access a non-existing key `a`" in proc.stderr.split("error: line 3: ")[1]
    assert out[2]["$error"].splitlines()[1:] == ["   1 | event.a", "       ^^^^^^^"]  # line and caret


def test_syntax_error_is_one_clean_message_with_caret(tmp_path: Path) -> None:
    script = tmp_path / "bad.tremor"
    script.write_text("match event of\n  case 1 => 2\n")
    proc = _run([str(script)], "", tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "bad.tremor:2:14: unexpected end of script" in proc.stderr
    assert "hint: expected 'end' to close the 'match' started at 1:1" in proc.stderr


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    proc = _run([str(tmp_path / "nope.tremor")], "", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: cannot read")


def test_args_from_the_command_line_and_modules_next_to_the_script(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "units.tremor").write_text("const FACTOR = 10;\nfn scale(x) with x * FACTOR end;\n")
    script = tmp_path / "limit.tremor"
    script.write_text(
        "use lib::units;\n"
        "match units::scale(event) > args.limit of\n"
        '  case true => {"over": args.label, "tags": args.tags}\n'
        "  default => units::scale(event)\n"
        "end\n"
    )
    proc = _run(
        [str(script), "--arg", "limit=25", "--arg", "label=web", "--arg", 'tags=["a", 1]'], "2\n3\n", tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert [orjson.loads(line) for line in proc.stdout.splitlines()] == [
        20,
        {"over": "web", "tags": ["a", 1]},
    ]


def test_arg_sets_args_with_json_values_and_plain_strings(tmp_path: Path) -> None:
    script = tmp_path / "args.tremor"
    script.write_text('{"rate": args.rate, "tags": args.tags, "class": args.class, "event": event}\n')
    proc = _run(
        [str(script), "--arg", "rate=1000", "--arg", 'tags=["a", "b"]', "--arg", "class=info"],
        '{"x": 1}\n',
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert orjson.loads(proc.stdout) == {"rate": 1000, "tags": ["a", "b"], "class": "info", "event": {"x": 1}}


def test_arg_without_equals_is_one_error_line(tmp_path: Path) -> None:
    script = tmp_path / "args.tremor"
    script.write_text("event\n")
    proc = _run([str(script), "--arg", "rate"], "{}\n", tmp_path)
    assert proc.returncode != 0
    assert proc.stderr.strip() == "error: --arg 'rate': expected NAME=VALUE, e.g. --arg error_rate=1000"


def test_the_classify_example_script_runs_on_its_sample(tmp_path: Path) -> None:
    example = Path(ROOT) / "examples" / "classify"
    sample = (example / "sample.jsonl").read_text()
    plain = _run([str(example / "classify.tremor")], sample, tmp_path)
    assert plain.returncode == 0, plain.stderr
    classes = [orjson.loads(line)["class"] for line in plain.stdout.splitlines()]
    assert len(classes) == len(sample.splitlines())
    assert {"error", "info", "server_error", "warn:billing"} == set(classes)
