"""`contraflow check` as a user runs it: a real subprocess, real files, exit codes and output."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.cli_process import run_cli

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
use tremor::connectors;
use tremor::pipelines;
define flow main
flow
  create connector io from connectors::console;
  create pipeline pass from pipelines::passthrough;
  connect /connector/io to /pipeline/pass;
  connect /pipeline/pass to /connector/io;
end;
deploy flow main;
"""


def check(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli("check", *args, env=env)


def test_valid_flow_prints_summary_and_exits_0(tmp_path: Path) -> None:
    flow = tmp_path / "good.troy"
    flow.write_text(GOOD)
    result = check(flow)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:3] == [
        "flow main",
        "  connectors:",
        "    io: stdio (from console) codec=json pre=separate post=separate",
    ]
    assert "    /pipeline/pass/out -> /connector/io/in" in result.stdout


def test_errors_print_caret_and_hint_and_exit_1(tmp_path: Path) -> None:
    flow = tmp_path / "bad.troy"
    flow.write_text(GOOD.replace("connectors::console", "connectors::consol"))
    result = check(flow)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == f"error: {flow}:6:28: unknown connector definition 'connectors::consol'"
    assert lines[1] == "   6 |   create connector io from connectors::console;".replace("console", "consol")
    assert lines[2] == " " * (len("   6 | ") + 27) + "^" * len("connectors::consol")
    assert lines[3] == "hint: did you mean 'connectors::console'?"
    assert "Traceback" not in result.stderr


def test_several_files_and_json_output(tmp_path: Path) -> None:
    flow = tmp_path / "good.troy"
    flow.write_text(GOOD)
    query = tmp_path / "count.trickle"
    query.write_text(
        "define window w from tumbling with size = 3 end;\nselect aggr::stats::count() from in[w] into out;\n"
    )
    result = check(flow, query)
    assert result.returncode == 0, result.stderr
    assert f"== {flow}" in result.stdout and f"== {query}" in result.stdout
    assert "count: stateful, in -> out, err" in result.stdout
    as_json = check("--json", query)
    graph = json.loads(as_json.stdout)
    assert graph["stateful"] is True
    assert graph["nodes"]["select_1"]["spec"]["windows"][0]["size"] == 3


def test_one_bad_file_fails_the_run_but_others_are_still_checked(tmp_path: Path) -> None:
    good = tmp_path / "good.troy"
    good.write_text(GOOD)
    missing = tmp_path / "missing.troy"
    result = check(missing, good)
    assert result.returncode == 1
    assert f"{missing}: no such file" in result.stderr
    assert "flow main" in result.stdout


def test_contraflow_path_is_searched(tmp_path: Path) -> None:
    lib = tmp_path / "lib" / "acme"
    lib.mkdir(parents=True)
    (lib / "sinks.troy").write_text(
        'define connector out from file with config = {"path": "o", "mode": "write"} end;\n'
    )
    flow = tmp_path / "app" / "flow.troy"
    flow.parent.mkdir()
    flow.write_text(
        "use acme::sinks;\ndefine flow f flow create connector out from sinks::out; end;\ndeploy flow f;\n"
    )
    assert check(flow).returncode == 1
    result = check(flow, env={"CONTRAFLOW_PATH": f"/nonexistent{os.pathsep}{tmp_path / 'lib'}"})
    assert result.returncode == 0, result.stderr
    assert 'out: file config={"path": "o", "mode": "write"}' in result.stdout


def test_deep_nesting_is_a_one_line_error_not_a_traceback(tmp_path: Path) -> None:
    """Issue 17 #3: `contraflow check` printed a RecursionError traceback."""
    record = '{"a": ' * 300 + "1" + "}" * 300
    flow = tmp_path / "deep.troy"
    flow.write_text(
        GOOD.replace("define flow main\nflow\n", f"define flow main\nargs\n  x = {record}\nflow\n")
    )
    result = check(flow)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    line = flow.read_text().splitlines().index(f"  x = {record}") + 1
    assert result.stderr.startswith(f"error: {flow}:{line}:") and "nested too deeply" in result.stderr
