"""Issue 17 #5: with CONTRAFLOW_TOKEN set, `contraflow run`'s SPU requires it, and every
client of the runtime (connectors, the Spark source and sink) presents it."""

from __future__ import annotations

from pathlib import Path

from contraflow.discovery import read_runtime_info
from tests.cli_process import run_cli
from tests.e2e.run_process import RunProcess
from tests.runtime.harness import JSON_LINES, read_events, write_events

TOKEN = "e2e-token"
EVENTS = 200


def test_a_flow_runs_end_to_end_behind_the_token(tmp_path: Path) -> None:
    write_events(tmp_path / "in.jsonl", EVENTS)
    flow = tmp_path / "flow.troy"
    flow.write_text(
        f"""
define flow guarded
flow
{JSON_LINES}
  create connector input from lines with path = "{tmp_path}/in.jsonl" end;
  create connector output from lines with path = "{tmp_path}/out.jsonl", mode = "append" end;
  create pipeline pass;
  connect /connector/input to /pipeline/pass;
  connect /pipeline/pass to /connector/output;
end;
deploy flow guarded;
"""
    )
    data_dir = tmp_path / "data"
    run = RunProcess(flow, data_dir, tmp_path, tmp_path / "run.log", env={"CONTRAFLOW_TOKEN": TOKEN})
    try:
        run.wait_until(lambda: len(read_events(tmp_path / "out.jsonl")) >= EVENTS, 150, "every event")
        info = read_runtime_info(data_dir)
        assert info is not None
        refused = run_cli("topic", "list", "--spu", info.spu, clean=True)
        assert refused.returncode != 0 and "token" in refused.stderr, refused.stderr
        listed = run_cli("topic", "list", "--spu", info.spu, env={"CONTRAFLOW_TOKEN": TOKEN})
        assert listed.returncode == 0 and listed.stdout.strip(), listed.stderr
        assert run.terminate() == 0, run.tail()
    finally:
        run.kill()
    assert sorted(e["n"] for e in read_events(tmp_path / "out.jsonl")) == list(range(EVENTS))
