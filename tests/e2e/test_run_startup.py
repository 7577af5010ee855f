"""`contraflow run`: only flows that run a query wait for Spark (`runtime.spark_on_demand`).

Spark's start is made to fail or to never end with SPARK_HOME (what PySpark launches the driver
from): a directory without Spark, where any start fails at once, or one whose `spark-submit` is a
stand-in that waits for ever. No JVM starts in these tests; the in-process runtime tests
(tests/runtime/test_spark_on_demand.py) show a deployment waiting for a real session.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx

from tests.cli_process import run_cli
from tests.e2e.run_process import RunProcess
from tests.runtime.harness import free_port, read_events

TICKS = """
  define connector ticks from metronome with config = {{"interval": 50000000}} end;
  define connector out from file
  with codec = "json", postprocessors = ["separate"], config = {{"path": "{out}", "mode": "append"}} end;
  define pipeline pass pipeline select event from in into out; end;
  create connector ticks;
  create connector out;
"""


def flow(name: str, out: Path, body: str, args: str = "") -> str:
    return f"define flow {name}\n{args}flow\n{TICKS.format(out=out)}{body}end;\ndeploy flow {name};\n"


def aliased(name: str, out: Path) -> str:
    """Its routing-only pipeline runs aliased: no query."""
    body = "  create pipeline pass;\n  connect /connector/ticks to /pipeline/pass;\n"
    return flow(name, out, body + "  connect /pipeline/pass to /connector/out;\n")


def connectors_only(name: str, out: Path) -> str:
    """No pipeline at all (nothing to connect: Troy connects connectors through pipelines only)."""
    return flow(name, out, "")


def query(name: str, out: Path) -> str:
    """The same routing-only pipeline as a Spark query."""
    args = 'args\n  pipelines = {"pass": {"route_in_log": 0}}\n'
    body = "  create pipeline pass;\n  connect /connector/ticks to /pipeline/pass;\n"
    return flow(name, out, body + "  connect /pipeline/pass to /connector/out;\n", args)


def no_spark(tmp_path: Path) -> dict[str, str]:
    """SPARK_HOME without Spark: any start of Spark fails at once."""
    return {"SPARK_HOME": str(tmp_path / "no-spark")}


def endless_spark(tmp_path: Path) -> dict[str, str]:
    """SPARK_HOME whose `spark-submit` (the driver JVM, as PySpark launches it) never reports back."""
    script = tmp_path / "endless-spark" / "bin" / "spark-submit"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\nexec sleep 600\n")
    script.chmod(0o755)
    return {"SPARK_HOME": str(script.parent.parent)}


def group_members(pgid: int) -> list[str]:
    """The command lines of the processes in process group `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if entry.name.isdigit() and int(fields[2]) == pgid:
                members.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, IndexError):
            continue
    return members


def run_with_api(tmp_path: Path, flows: str, spark_home: dict[str, str]) -> tuple[RunProcess, str]:
    """`contraflow run` of `flows` with the REST API on a free port, once its aliased flow `quick`
    delivered: (the run, the API's address)."""
    (tmp_path / "flows.troy").write_text(flows)
    api = f"127.0.0.1:{free_port()}"
    run = RunProcess(tmp_path / "flows.troy", tmp_path / "data", tmp_path, tmp_path / "run.log",
                     env=spark_home, api=api)  # fmt: skip
    run.wait_until(lambda: bool(read_events(tmp_path / "quick.jsonl")), 120, "the aliased flow's events")
    return run, api


def test_flows_without_a_query_run_when_spark_does_not_start_and_what_needs_it_is_refused(
    tmp_path: Path,
) -> None:
    flows = aliased("quick", tmp_path / "quick.jsonl") + connectors_only("bare", tmp_path / "bare.jsonl")
    run, api = run_with_api(tmp_path, flows, no_spark(tmp_path))
    try:
        run.wait_until(run.running, 120, "the flows to run")
        status = httpx.get(f"http://{api}/v1/status", timeout=30)
        assert status.status_code == 200, status.text
        assert status.json()["spark"] == "failed"
        assert status.json()["flow_status"] == {"quick": "running", "bare": "running"}
        refused = httpx.post(
            f"http://{api}/v1/flows", content=query("late", tmp_path / "late.jsonl"), timeout=60
        )
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"].startswith("Spark did not start: "), refused.text
        assert httpx.get(f"http://{api}/v1/status", timeout=30).json()["num_flows"] == 2
        assert run.terminate() == 0, run.tail()
    finally:
        run.kill()
    said = run.tail()
    assert said.count("Spark did not start: ") == 1 and "(its output is in " in said, said  # said once
    assert "Traceback" not in said


def test_a_run_whose_flow_needs_spark_stops_with_an_error_when_spark_does_not_start(tmp_path: Path) -> None:
    (tmp_path / "flows.troy").write_text(
        aliased("quick", tmp_path / "quick.jsonl") + query("slow", tmp_path / "slow.jsonl")
    )
    done = run_cli(
        "run", "flows.troy", "--no-api", "--no-status", "--spu-port", "0",
        cwd=tmp_path, env=no_spark(tmp_path), timeout=120,
    )  # fmt: skip
    assert done.returncode != 0, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: slow not started: Spark did not start: "), done.stderr
    assert last.endswith("(Spark's output is in contraflow-data/logs/run.log)"), done.stderr
    assert done.stderr.count("Spark did not start") == 1 and "Traceback" not in done.stderr


def test_a_stop_while_spark_starts_ends_its_launch_and_flows_without_a_query_ran_meanwhile(
    tmp_path: Path,
) -> None:
    flows = aliased("quick", tmp_path / "quick.jsonl") + query("slow", tmp_path / "slow.jsonl")
    run, api = run_with_api(tmp_path, flows, endless_spark(tmp_path))
    pgid = run.process.pid
    try:
        run.wait_until(lambda: any("sleep 600" in m for m in group_members(pgid)), 60, "Spark's launch")
        status = httpx.get(f"http://{api}/v1/status", timeout=30)
        assert status.status_code == 200, status.text
        assert status.json()["spark"] == "starting" and status.json()["flow_status"] == {"quick": "running"}
        assert "running quick; waiting for Spark: slow" in run.tail()
        run.process.send_signal(signal.SIGTERM)
        assert run.process.wait(120) == 0, run.tail()
        deadline = time.monotonic() + 30
        while group_members(pgid) and time.monotonic() < deadline:  # what it started is ending
            time.sleep(0.1)
        assert group_members(pgid) == []
    finally:
        run.kill()
    assert "Spark did not start" not in run.tail() and "Traceback" not in run.tail()
    assert not os.path.exists(tmp_path / "slow.jsonl")
