"""The runtime killed with SIGKILL mid-stream, then stopped with SIGTERM mid-stream, then run to the end.

file -> pipeline -> file sink (at least once) and -> log sink (exactly once). Small
channels keep the flow slow enough to be interrupted in the middle. Two sizes: small
pulls and batches, and large ones (the file source's 1 MiB pulls of ~30k events each,
micro-batches of up to 20k events, sinks writing whole fetches at once).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest

from contraflow.spu.api import LocalLog
from contraflow.spu.protocol.topics import TopicConfig
from tests.e2e.run_process import RunProcess
from tests.runtime.harness import JSON_LINES, read_events, write_events
from tests.runtime.test_contraflow import free_port

LOG_TOPIC = "crash-out"


@dataclass(frozen=True)
class Size:
    events: int
    capacity: int  # events per channel: how far the source runs ahead, and the largest micro-batch
    step: int  # delivered events to wait for before each interruption


SMALL = Size(3000, 250, 300)
LARGE = Size(100_000, 20_000, 20_000)


def flow_source(tmp: Path, capacity: int) -> str:
    return f"""
define flow crash
args
  channels = {{"default": {{"capacity": {capacity}}}}}
flow
{JSON_LINES}
  define connector logged from log with codec = "json", config = {{"topic": "{LOG_TOPIC}"}} end;
  create connector input from lines with path = "{tmp}/in.jsonl" end;
  create connector output from lines with path = "{tmp}/out.jsonl", mode = "append" end;
  create connector logged;
  create pipeline pass;
  connect /connector/input to /pipeline/pass;
  connect /pipeline/pass to /connector/output;
  connect /pipeline/pass to /connector/logged;
end;
deploy flow crash;
"""


# Deployed through the API during the first run: `path` comes in as an arg of its `deploy flow`.
KEPT_FLOW = f"""
define flow ticker
args
  path = "nowhere.jsonl"
flow
{JSON_LINES}
  define connector ticks from metronome with config = {{"interval": 20000000}} end;
  create connector ticks;
  create connector out from lines with path = args.path, mode = "append" end;
  create pipeline pass;
  connect /connector/ticks to /pipeline/pass;
  connect /pipeline/pass to /connector/out;
end;
deploy flow kept from ticker with path = "KEPT_PATH" end;
"""


def log_values(data_dir: Path) -> list[int]:
    log = LocalLog(data_dir / "spu", read_only=True)
    try:
        values, offset = [], 0
        while True:
            result = log.fetch(LOG_TOPIC, 0, offset)
            records = [r for b in result.batches for r in b.records(start_offset=offset)]
            if not records:
                return values
            values += [orjson.loads(r.value)["n"] for r in records]
            offset = records[-1].offset + 1
    finally:
        log.close()


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["small-batches", "large-batches"])
def test_sigkill_then_sigterm_then_restart_loses_nothing(tmp_path: Path, size: Size) -> None:
    events = size.events
    write_events(tmp_path / "in.jsonl", events)
    flow = tmp_path / "flow.troy"
    flow.write_text(flow_source(tmp_path, size.capacity))
    data_dir = tmp_path / "data"
    with LocalLog(data_dir / "spu") as log:
        log.create_topic(LOG_TOPIC, TopicConfig(partitions=1))
    out = tmp_path / "out.jsonl"

    def delivered() -> int:
        return len(read_events(out))

    api = f"127.0.0.1:{free_port()}" if size is SMALL else None  # one size is enough for the API
    kept = tmp_path / "kept.jsonl"

    first = RunProcess(flow, data_dir, tmp_path, tmp_path / "run1.log", api=api)
    if api:
        first.wait_until(first.running, 150, "the first run to start")
        deployed = httpx.post(f"http://{api}/v1/flows", content=KEPT_FLOW.replace("KEPT_PATH", str(kept)))
        assert deployed.status_code == 201, deployed.text
        first.wait_until(lambda: len(read_events(kept)) > 0, 150, "the API's flow to run")
    first.wait_until(lambda: delivered() >= size.step, 150, "the first events")
    first.kill()
    killed_at = delivered()
    assert killed_at < events, "the flow finished before it could be killed mid-stream"

    second = RunProcess(flow, data_dir, tmp_path, tmp_path / "run2.log", api=api)
    second.wait_until(lambda: delivered() >= killed_at + size.step, 150, "events after the restart")
    if api:  # Issue 32: a flow deployed through the API survives the SIGKILL, with its args
        ticked = len(read_events(kept))
        second.wait_until(lambda: len(read_events(kept)) > ticked + 10, 150, "the API's flow to run again")
        assert httpx.get(f"http://{api}/v1/flows/kept").json()["status"] == "running"
        assert "redeployed kept" in second.tail()
    assert second.terminate() == 0, second.tail()
    stopped_at = delivered()
    # Quiescence drained what the source had read: the log sink holds the same events as the file.
    assert set(log_values(data_dir)) == {e["n"] for e in read_events(out)}

    third = RunProcess(flow, data_dir, tmp_path, tmp_path / "run3.log")
    third.wait_until(third.running, 150, "the third run to start")
    third.wait_until(lambda: {e["n"] for e in read_events(out)} >= set(range(events)), 150, "every event")
    assert third.terminate() == 0, third.tail()

    in_file = Counter(e["n"] for e in read_events(out))
    assert set(in_file) == set(range(events))  # at least once
    assert stopped_at < events or killed_at > 0
    in_log = log_values(data_dir)
    assert sorted(in_log) == list(range(events)), "the log sink must hold every event exactly once"
