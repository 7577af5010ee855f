"""The topic/produce/consume commands against a running SPU (--spu / $CONTRAFLOW_SPU)
behave exactly as against a data directory."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli_process import run_cli
from tests.spu.spu_harness import running_spu


def cli(*args: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, stdin=stdin, env=env)


def session(target: list[str], env: dict[str, str] | None = None) -> list[tuple[int, str, str]]:
    """The same command sequence; returns (exit code, stdout, stderr) of each step."""
    steps = [
        (["topic", "create", "lines", "--partitions", "2"], ""),
        (["produce", "lines", "--key-separator", ":"], "a:1\nb:2\nc:3\nd:4\n"),
        (["produce", "lines", "--partition", "1"], "x\ny\n"),
        (["consume", "lines", "-B", "-d", "--partition", "1"], ""),
        (["consume", "lines", "--offset", "1", "-d", "--partition", "1"], ""),
        (["consume", "nope", "-B", "-d"], ""),
        (["consume", "lines", "--offset", "99", "-d", "--partition", "0"], ""),
        (["topic", "list"], ""),
    ]
    out = []
    for args, stdin in steps:
        result = cli(*args, *target, stdin=stdin, env=env)
        out.append((result.returncode, result.stdout, result.stderr))
    return out


def test_cli_against_an_spu_matches_the_data_directory(tmp_path: Path) -> None:
    local = session(["--data-dir", str(tmp_path / "local")])
    with running_spu(tmp_path / "served") as spu:
        remote = session(["--spu", spu.addr])
    with running_spu(tmp_path / "served-env") as spu:
        from_env = session(
            [], env={"CONTRAFLOW_SPU": spu.addr, "CONTRAFLOW_DATA_DIR": str(tmp_path / "unused")}
        )
    assert remote == local
    assert from_env == local
    assert [code for code, _, _ in local] == [0, 0, 0, 0, 0, 2, 2, 0]
    assert local[3][1].splitlines()[-2:] == ["x", "y"]
    assert local[5][0] != 0 and local[5][2].startswith("error: unknown topic 'nope'")
    assert "Traceback" not in "".join(r[2] for r in remote)
    assert not (tmp_path / "unused").exists()


def test_cli_reports_an_unreachable_spu_in_one_line(tmp_path: Path) -> None:
    result = cli("topic", "list", "--spu", "127.0.0.1:1")
    assert result.returncode != 0
    assert result.stderr.startswith("error: cannot connect to SPU at 127.0.0.1:1")
    assert result.stderr.count("\n") == 1


def test_spu_run_rejects_a_bad_address() -> None:
    result = cli("spu", "run", "--public-addr", "nonsense")
    assert (
        result.returncode != 0
        and result.stderr.strip() == "error: SPU address must be HOST:PORT, got 'nonsense'"
    )


def test_spu_run_on_a_taken_port_fails_in_one_line_and_frees_the_directory(tmp_path: Path) -> None:
    with running_spu(tmp_path / "first") as spu:
        result = cli("spu", "run", "--data-dir", str(tmp_path / "second"), "--public-addr", spu.addr)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith("error: cannot start the SPU:")
    assert "Traceback" not in result.stderr
    with running_spu(tmp_path / "second"):  # the data-directory lock was released
        pass
