"""Every shell command of the README's first-day section, run as written against the running
classify example in a copy of the checkout's layout, each checked against what the README says
it shows; then Ctrl-C (SIGINT) drains the runtime and it exits 0.

The only rewrites: the REST API's port (a free one instead of 9898, so parallel runs on one
machine do not collide) and `. .venv/bin/activate`, which the test's PATH stands for.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from tests.cli_process import ROOT, child_env, start_cli

README = Path(ROOT) / "README.md"
ACTIVATE = ". .venv/bin/activate"


def first_day_commands() -> list[str]:
    """The lines of the README's first-day block, comments stripped."""
    text = README.read_text()
    block = text.split("<!-- first-day")[1].split("<!-- /first-day -->")[0]
    body = block.split("```sh\n")[1].split("```")[0]
    lines = [re.sub(r"\s{2,}#.*$", "", line).strip() for line in body.splitlines()]
    return [line for line in lines if line]


def json_lines(text: str) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


def flows_listed(out: str) -> bool:
    flows = orjson.loads(out)
    return any(f["alias"] == "classify" and f["status"] == "running" and f["connectors"] for f in flows)


def query_output(out: str) -> bool:
    events = json_lines(out)
    classified = [e for e in events if "id" in e]
    return len(classified) == 12 and {"class": "info", "count": 5} in events


CHANNELS = {
    "classify.events.out",
    "classify.classify.out",
    "classify.classify.counts",
    "classify.classify.err",
}

# What each documented command must show (the README's comments say the same in words).
EXPECTED: dict[str, Callable[[str], bool]] = {
    ACTIVATE: lambda out: True,
    "curl localhost:9898/v1/flows": flows_listed,
    "curl localhost:9898/metrics": lambda out: 'flow="classify"' in out and "contraflow_" in out,
    'curl -XPATCH localhost:9898/v1/flows/classify -d \'{"status":"paused"}\'': lambda out: (
        orjson.loads(out)["status"] == "paused"
    ),
    'curl -XPATCH localhost:9898/v1/flows/classify -d \'{"status":"running"}\'': lambda out: (
        orjson.loads(out)["status"] == "running"
    ),
    "contraflow topic list": lambda out: set(out.split()) == CHANNELS | {"contraflow.events"},
    "contraflow consume classify.events.out -B -d": lambda out: (
        [e["id"] for e in json_lines(out)] == list(range(60))
    ),
    "cp -r examples/classify my-flow && cd my-flow": lambda out: True,
    "contraflow check flow.troy": lambda out: out.startswith("flow classify"),
    "contraflow script classify.tremor < sample.jsonl": lambda out: (
        len(json_lines(out)) == 12 and all("class" in e for e in json_lines(out))
    ),
    "contraflow query pipeline.trickle < sample.jsonl": query_output,
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(check: Callable[[], bool], process: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + 300
    while not check():
        assert process.poll() is None, f"contraflow run exited before {what}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def line_count(path: Path) -> int:
    return len(path.read_bytes().splitlines()) if path.exists() else 0


def run_shell(command: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, Path]:
    """`command` in bash from `cwd`: (exit status, stdout, the directory it ended in)."""
    script = f'{command}\nstatus=$?\nprintf "\\n@cwd=%s" "$PWD"\nexit $status\n'
    done = subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    out, _, where = done.stdout.rpartition("\n@cwd=")
    assert done.returncode == 0, f"`{command}` failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.returncode, out, Path(where)


@pytest.mark.timeout(900)  # a Spark start and `contraflow query`'s own: minutes on a loaded 2-core box
def test_the_first_day_commands_work_as_written(tmp_path: Path) -> None:
    commands = first_day_commands()
    assert commands == list(EXPECTED), "the README's first-day commands and this test drifted apart"
    checkout = tmp_path / "checkout"
    shutil.copytree(Path(ROOT) / "examples", checkout / "examples", ignore=shutil.ignore_patterns("out"))
    api = f"127.0.0.1:{free_port()}"
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        runtime = start_cli(
            "run",
            "examples/classify/flow.troy",
            "--api",
            api,
            "--spu-port",
            "0",
            cwd=checkout,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        classified = checkout / "examples" / "classify" / "out" / "classified.jsonl"
        counts = classified.with_name("counts.jsonl")
        wait_for(lambda: line_count(classified) == 36 and line_count(counts) == 6, runtime, log, "the output")
        env = child_env()
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
        cwd = checkout
        for command in commands:
            if command == ACTIVATE:
                continue  # the PATH above is what activating does
            _, shown, cwd = run_shell(command.replace("localhost:9898", api), cwd, env)
            assert EXPECTED[command](shown), f"`{command}` showed:\n{shown}"
        runtime.send_signal(signal.SIGINT)  # Ctrl-C
        assert runtime.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if runtime.poll() is None:
            os.killpg(runtime.pid, signal.SIGKILL)
            runtime.wait()
    assert (line_count(classified), line_count(counts)) == (36, 6)
