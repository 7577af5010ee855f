"""The runtime killed with SIGKILL mid-stream, then stopped with SIGTERM mid-stream, then run to the end.

file -> pipeline -> file sink (at least once) and -> log sink (exactly once). The pipeline
only routes but runs as a Spark query in both sizes (`route_in_log = 0`): aliased
(`runtime.aliases`, its sinks reading the source's channel) a quiet box delivers the large
size's 100,000 events in a fifth of a second, before a poll can see the first step and kill
it mid-stream. Small channels keep the flow slow enough to be interrupted in the middle. Two sizes: small
pulls and batches, and large ones (the file source's 1 MiB pulls of ~30k events each,
micro-batches of up to 20k events, sinks writing whole fetches at once).

The small size also runs an event-time pipeline on the same input (a late-tolerant
tumbling window, a session window and a left join, on times that go back): its outputs and late errors
are exactly those of one uninterrupted run, and late events show on `/metrics` per
node (in the first run, and in the last exactly those it sent to `err`).

The flow the small size deploys through the API routes a metronome's ticks aliased (its
sinks read the metronome's channel, no Spark query): it never ends, so it too is killed
mid-stream once its file sink wrote a tick, however fast or loaded the box. Its log sink ends
up holding that channel exactly once and in order, its file sink each tick at least once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.local import compile_query
from contraflow.runtime.aliases import ran_aliased, ran_as_query
from contraflow.runtime.channels import channel_topic
from contraflow.spu.api import LocalLog
from contraflow.spu.protocol.topics import TopicConfig
from tests.e2e.run_process import RunProcess
from tests.runtime.harness import JSON_LINES, read_events, write_events
from tests.runtime.test_contraflow import free_port

LOG_TOPIC = "crash-out"
KEPT_LOG_TOPIC = "kept-out"
EVENT_TIME_TOPICS = {"out": "crash-event-time-out", "err": "crash-event-time-err"}
# Times go back by up to 12 every four events: some events are late for the window (lateness 5)
# and for the join (within 5).
EVENT_TIME_PIPELINE = """
define window tens from tumbling with interval = 10, lateness = 5 script event.n + 12 - event.n % 4 * 4 end;
create stream orders;
create stream payments;
select event from in where event.n % 3 != 0 into orders;
select event from in where event.n % 3 == 0 into payments;
select {"order": left.n, "payment": right}
from orders with time = event.n + 12 - event.n % 4 * 4 left join payments with time = event.n + 12 - event.n % 4 * 4
on left.n % 7 == right.n % 7 within 5 into out;
select {"events": aggr::stats::count(), "first": aggr::win::first(event.n)} from in[tens] into out;
define window visits from session with gap = 5, max_duration = 30, lateness = 5
script event.n + 12 - event.n % 4 * 4 end;
select {"visit": aggr::stats::count(), "last": aggr::win::last(event.n)} from in[visits] into out;
"""


@dataclass(frozen=True)
class Size:
    events: int
    capacity: int  # events per channel: how far the source runs ahead, and the largest micro-batch
    step: int  # delivered events to wait for before each interruption


SMALL = Size(3000, 250, 300)
LARGE = Size(100_000, 20_000, 20_000)


def flow_source(tmp: Path, capacity: int, event_time: bool) -> str:
    return f"""
define flow crash
args
  channels = {{"default": {{"capacity": {capacity}}}}},
  pipelines = {{"pass": {{"route_in_log": 0}}}}
flow
{JSON_LINES}
{event_time_flow(tmp) if event_time else ""}
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


def event_time_flow(tmp: Path) -> str:
    """The event-time pipeline with its sinks: the log (exactly once) and a file (to watch it run)."""
    return f"""
  define pipeline event_time
  pipeline
{EVENT_TIME_PIPELINE}
  end;
  define connector event_time_out from log with codec = "json", config = {{"topic": "{EVENT_TIME_TOPICS["out"]}"}} end;
  define connector event_time_err from log with codec = "json", config = {{"topic": "{EVENT_TIME_TOPICS["err"]}"}} end;
  create connector event_time_out;
  create connector event_time_err;
  create connector event_time_file from lines with path = "{tmp}/event_time.jsonl", mode = "append" end;
  create pipeline event_time;
  connect /connector/input to /pipeline/event_time;
  connect /pipeline/event_time/out to /connector/event_time_out;
  connect /pipeline/event_time/out to /connector/event_time_file;
  connect /pipeline/event_time/err to /connector/event_time_err;
"""


# Deployed through the API during the first run: `path` comes in as an arg of its `deploy flow`.
KEPT_FLOW = f"""
define flow ticker
args
  path = "nowhere.jsonl"
flow
{JSON_LINES}
  define connector ticks from metronome with config = {{"interval": 20000000}} end;
  define connector logged from log with codec = "json", config = {{"topic": "{KEPT_LOG_TOPIC}"}} end;
  create connector ticks;
  create connector out from lines with path = args.path, mode = "append" end;
  create connector logged;
  create pipeline pass;
  connect /connector/ticks to /pipeline/pass;
  connect /pipeline/pass to /connector/out;
  connect /pipeline/pass to /connector/logged;
end;
deploy flow kept from ticker with path = "KEPT_PATH" end;
"""


def log_values(data_dir: Path) -> list[int]:
    return [value["n"] for value in log_records(data_dir, LOG_TOPIC)]


def log_records(data_dir: Path, topic: str) -> list[Any]:
    """Every value in `topic`'s partition 0, in order (read while no runtime holds the log)."""
    log = LocalLog(data_dir / "spu", read_only=True)
    try:
        values, offset = [], 0
        while True:
            result = log.fetch(topic, 0, offset)
            records = [r for b in result.batches for r in b.records(start_offset=offset)]
            if not records:
                return values
            values += [orjson.loads(r.value) for r in records]
            offset = records[-1].offset + 1
    finally:
        log.close()


def uninterrupted(tmp: Path) -> dict[str, list[Any]]:
    """What the event-time pipeline gives on the whole input (`tmp`/in.jsonl) in one run and one
    batch of the executor, ingest times 0, 1, 2, ..."""
    values = (tmp / "in.jsonl").read_bytes().splitlines()
    columns = PipelineExecutor(compile_query(EVENT_TIME_PIPELINE)).process_values(
        "in", values, None, list(range(len(values)))
    )
    return {
        port: [orjson.loads(value) for value in columns.get(port, ([], []))[0]] for port in ("out", "err")
    }


def late_events_shown(api: str) -> Counter[str]:
    """The event-time pipeline's late events per node on the runtime's `/metrics`."""
    text = httpx.get(f"http://{api}/metrics", timeout=30).text
    return Counter(
        {
            sample.labels["node"]: int(sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "contraflow_pipeline_late_events_total"
            and sample.labels["pipeline"] == "event_time"
        }
    )


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["small-batches", "large-batches"])
def test_sigkill_then_sigterm_then_restart_loses_nothing(tmp_path: Path, size: Size) -> None:
    events = size.events
    write_events(tmp_path / "in.jsonl", events)
    flow = tmp_path / "flow.troy"
    event_time = size is SMALL  # one size is enough for the event-time pipeline
    flow.write_text(flow_source(tmp_path, size.capacity, event_time))
    data_dir = tmp_path / "data"
    with LocalLog(data_dir / "spu") as log:
        for topic in [LOG_TOPIC, *(EVENT_TIME_TOPICS.values() if event_time else ()), KEPT_LOG_TOPIC]:
            log.create_topic(topic, TopicConfig(partitions=1))
    out = tmp_path / "out.jsonl"

    def delivered() -> int:
        return len(read_events(out))

    api = f"127.0.0.1:{free_port()}" if size is SMALL else None  # one size is enough for the API
    kept = tmp_path / "kept.jsonl"

    first = RunProcess(flow, data_dir, tmp_path, tmp_path / "run1.log", api=api)
    want = uninterrupted(tmp_path) if event_time else {}  # once, while the runtime starts
    if api:
        first.wait_until(first.running, 150, "the first run to start")
        deployed = httpx.post(f"http://{api}/v1/flows", content=KEPT_FLOW.replace("KEPT_PATH", str(kept)))
        assert deployed.status_code == 201, deployed.text
        first.wait_until(lambda: len(read_events(kept)) > 0, 150, "the API's flow to run")
    first.wait_until(lambda: delivered() >= size.step, 150, "the first events")
    if event_time:  # its sinks may start later than the other pipeline's; both nodes meet late events
        first.wait_until(lambda: len(read_events(tmp_path / "event_time.jsonl")) >= 100, 150, "joins")
        nodes = {e["node"] for e in want["err"]}  # the join and the windows
        first.wait_until(lambda: set(late_events_shown(str(api))) == nodes, 150, "late events on /metrics")
    first.kill()
    killed_at = delivered()
    assert killed_at < events, "the flow finished before it could be killed mid-stream"
    if event_time:  # the event-time pipeline too (the source runs at most a channel ahead of it)
        assert len(log_records(data_dir, EVENT_TIME_TOPICS["out"])) < len(want["out"])

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

    late_before = len(log_records(data_dir, EVENT_TIME_TOPICS["err"])) if event_time else 0

    third = RunProcess(flow, data_dir, tmp_path, tmp_path / "run3.log", api=api)
    third.wait_until(third.running, 150, "the third run to start")
    third.wait_until(lambda: {e["n"] for e in read_events(out)} >= set(range(events)), 150, "every event")
    if event_time:
        late_this_run = len(want["err"]) - late_before

        def all_late_shown() -> bool:
            return late_events_shown(str(api)).total() == late_this_run

        third.wait_until(all_late_shown, 150, "the last run's late events on /metrics")
        shown = late_events_shown(str(api))
    assert third.terminate() == 0, third.tail()
    if event_time:  # exactly once, as one run gave them, and the last run's late events counted
        assert log_records(data_dir, EVENT_TIME_TOPICS["out"]) == want["out"]
        errors = log_records(data_dir, EVENT_TIME_TOPICS["err"])
        assert errors == want["err"] and all(e["late"] for e in errors)
        assert shown == Counter(e["node"] for e in errors[late_before:])

    in_file = Counter(e["n"] for e in read_events(out))
    assert set(in_file) == set(range(events))  # at least once
    assert stopped_at < events or killed_at > 0
    in_log = log_values(data_dir)
    assert sorted(in_log) == list(range(events)), "the log sink must hold every event exactly once"
    assert ran_as_query(data_dir, "crash", "pass") and not ran_aliased(data_dir, "crash", "pass")
    if api:
        assert_kept_flow_delivered_its_channel(data_dir, kept)


def assert_kept_flow_delivered_its_channel(data_dir: Path, file_sink: Path) -> None:
    """The aliased `kept` flow, killed, stopped and restarted with the rest: its log sink holds
    the metronome's channel exactly once and in order, its file sink each tick at least once and
    in order (a file sink rewrites what it wrote but had not committed when killed)."""
    assert ran_aliased(data_dir, "kept", "pass") and not ran_as_query(data_dir, "kept", "pass")
    ticks = log_records(data_dir, channel_topic("kept", "ticks", "out"))
    stamps = [tick["ingest_ns"] for tick in ticks]
    assert stamps == sorted(set(stamps)), "distinct ticks of three runs"
    assert log_records(data_dir, KEPT_LOG_TOPIC) == ticks, "the log sink holds its channel exactly once"
    first_writes: dict[int, Any] = {}
    for tick in read_events(file_sink):
        first_writes.setdefault(tick["ingest_ns"], tick)
    assert list(first_writes.values()) == ticks, "the file sink wrote every tick, in order"
