"""The `contraflow` command shell: version, help, user errors."""

from __future__ import annotations

import click
import pytest

from contraflow import __version__, cli
from contraflow.errors import UserError
from tests.cli_process import run_cli


def test_version_prints_package_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert __version__ in result.stdout


def test_unknown_command_fails_without_traceback() -> None:
    result = run_cli("no-such-command")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "no-such-command" in result.stderr


def test_user_error_is_one_line_and_exit_code(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    @click.command()
    def boom() -> None:
        raise UserError("unknown topic 'x'", exit_code=3)

    monkeypatch.setitem(cli.COMMANDS, "boom", f"{__name__}:_boom")
    globals()["_boom"] = boom
    with pytest.raises(SystemExit) as exited:
        cli.main(["boom"])
    assert exited.value.code == 3
    assert capsys.readouterr().err == "error: unknown topic 'x'\n"
