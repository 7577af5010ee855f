"""`contraflow run` rejects mistakes before starting anything: one `error:` line, non-zero exit."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli_process import run_cli

GOOD_HEAD = """
define flow main
flow
  define connector out from file with config = {"path": "out.jsonl", "mode": "append"} end;
  define connector src from metronome with config = {"interval": 1000000} end;
  create connector ticks from src;
  define pipeline pass pipeline select event from in into out; end;
  create pipeline pass;
  connect /connector/ticks to /pipeline/pass;
"""


def run(tmp_path: Path, troy: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    if troy is not None:
        (tmp_path / "flow.troy").write_text(troy)
    return run_cli("run", "flow.troy", "--no-api", "--spu-port", "0", *args, cwd=tmp_path, clean=True)


def test_a_missing_file_is_one_error_line(tmp_path: Path) -> None:
    done = run(tmp_path, None)
    assert done.returncode != 0
    assert done.stderr.strip() == "error: no such file: flow.troy"


def test_a_bad_connector_config_names_the_alias_and_the_key(tmp_path: Path) -> None:
    troy = (
        GOOD_HEAD
        + """
  define connector painter from file with config = {"path": "x", "mode": "append", "colour": "red"} end;
  create connector sink from painter;
  connect /pipeline/pass to /connector/sink;
end;
deploy flow main;
"""
    )
    done = run(tmp_path, troy)
    assert done.returncode != 0, done.stderr
    assert "error: " in done.stderr and "'sink'" in done.stderr and "'colour'" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "contraflow-data").exists()


def test_bad_channel_settings_are_reported_before_starting(tmp_path: Path) -> None:
    troy = (
        GOOD_HEAD.replace(
            "define flow main\n", 'define flow main\nargs\n  channels = {"pass/oops": {"capacity": 1}}\n'
        )
        + """
  create connector sink from out;
  connect /pipeline/pass to /connector/sink;
end;
deploy flow main;
"""
    )
    done = run(tmp_path, troy)
    assert done.returncode != 0
    assert "no channel 'pass/oops'" in done.stderr and "ticks/out" in done.stderr
