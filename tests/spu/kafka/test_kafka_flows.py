"""Flows with kafka connectors under `contraflow run --kafka-addr` (the runtime's embedded SPU
serves Kafka). One runtime start costs Spark's start-up, so one test covers Tremor's scaling
example and the crash: both need the same flow."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kafka_harness import create_topic, produce
from tests.e2e.run_process import RunProcess
from tests.runtime.harness import read_events

from contraflow.spu.api import LocalLog

TOPIC = "tremor_test"
GROUP = "group"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def consumer_flow(brokers: str, mode: str, deploys: dict[str, Path]) -> str:
    """Tremor's kafka_consumer example: one flow definition, deployed once per output file."""
    deployments = "\n".join(
        f'deploy flow {name} from kafka_consume with out = "{path}" end;' for name, path in deploys.items()
    )
    return f"""
define flow kafka_consume
args
  out = "out.jsonl"
flow
  define connector consumer from kafka_consumer
  with
    codec = "json",
    config = {{
      "brokers": ["{brokers}"],
      "group_id": "{GROUP}",
      "topics": ["{TOPIC}"],
      "mode": "{mode}"
    }}
  end;
  define connector output from file
  args path
  with
    codec = "json",
    postprocessors = ["separate"],
    config = {{"path": args.path, "mode": "append"}}
  end;
  define pipeline pass
  pipeline
    select event from in into out;
  end;
  create connector consumer;
  create connector output with path = args.out end;
  create pipeline pass;
  connect /connector/consumer to /pipeline/pass;
  connect /pipeline/pass to /connector/output;
end;
{deployments}
"""


def records(count: int) -> list[tuple[bytes | None, bytes]]:
    return [(str(i).encode(), f'{{"n": {i}, "msg": "record {i}"}}'.encode()) for i in range(count)]


def wait_for_group(brokers: str, members: int, timeout_s: float = 120) -> None:
    admin = AdminClient({"bootstrap.servers": brokers})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            description = admin.describe_consumer_groups([GROUP])[GROUP].result(10)
            if description.state.name == "STABLE" and len(description.members) == members:
                return
        except Exception:  # the listener is not up yet
            pass
        time.sleep(0.3)
    raise AssertionError(f"group {GROUP} never had {members} stable members")


class BackgroundProducer:
    """Produces records n = start, start+1, ... in small bursts until stopped; remembers where
    each acknowledged record landed (partition, offset)."""

    def __init__(self, brokers: str, start: int) -> None:
        self.landed: dict[int, tuple[int, int]] = {}
        self._next = start
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": brokers, "linger.ms": 5, "message.timeout.ms": 5000})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(100):
                n = self._next
                self._next += 1
                self._producer.produce(
                    TOPIC, f'{{"n": {n}}}'.encode(), str(n).encode(), on_delivery=self._report(n)
                )
            self._producer.poll(0.05)

    def _report(self, n: int) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is None:
                self.landed[n] = (msg.partition(), msg.offset())

        return report

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._producer.flush(10)  # reports for what the killed SPU never acknowledged are errors


def committed_offsets(data_dir: Path, partitions: int) -> dict[int, int]:
    """The group's committed offsets, read from the SPU's data directory (the runtime is dead)."""
    with LocalLog(data_dir / "spu", read_only=True) as log:
        return {p: log.fetch_offset(GROUP, TOPIC, p) or 0 for p in range(partitions)}


@pytest.mark.timeout(900)  # two runtime starts (Spark each time) on a loaded box
def test_three_deployments_share_a_group_and_a_sigkill_never_commits_ahead(tmp_path: Path) -> None:
    """Tremor's scaling example (three kafka_consumer deployments, one group): every record
    exactly once across the three; then the runtime is SIGKILLed mid-stream: no committed
    offset is ahead of what reached the file sinks, and the restarted runtime delivers every
    acknowledged record at least once."""
    brokers = f"127.0.0.1:{free_port()}"
    outputs = {f"kafka_consume{i}": tmp_path / f"out{i}.jsonl" for i in (1, 2, 3)}
    flow = tmp_path / "flow.troy"
    flow.write_text(consumer_flow(brokers, "transactional", outputs))
    data_dir = tmp_path / "data"
    partitions, first_count = 6, 3000

    def delivered() -> list[int]:
        return [e["n"] for path in outputs.values() for e in read_events(path)]

    run = RunProcess(flow, data_dir, tmp_path, tmp_path / "run1.log", "--kafka-addr", brokers)
    try:
        run.wait_until(run.running, 150, "the flows to start")
        create_topic(brokers, TOPIC, partitions=partitions)
        wait_for_group(brokers, 3)
        produce(brokers, TOPIC, records(first_count))
        run.wait_until(lambda: len(delivered()) >= first_count, 120, "every record in the output files")
        time.sleep(1.0)  # anything delivered twice would show up by now
        seen = Counter(delivered())
        assert set(seen) == set(range(first_count)) and set(seen.values()) == {1}, "each record exactly once"
        assert all(read_events(path) for path in outputs.values()), "all three deployments took part"

        stream = BackgroundProducer(brokers, first_count)
        run.wait_until(lambda: len(delivered()) >= first_count + 1000, 120, "records of the stream")
    finally:
        run.kill()
    stream.stop()
    at_kill = set(delivered())
    landed = dict(stream.landed)
    assert not set(landed) <= at_kill, "the stream ended before the runtime was killed"
    committed = committed_offsets(data_dir, partitions)
    ahead = [n for n, (p, offset) in landed.items() if offset < committed[p] and n not in at_kill]
    assert ahead == [], "offsets were committed ahead of delivery"

    restarted = RunProcess(flow, data_dir, tmp_path, tmp_path / "run2.log", "--kafka-addr", brokers)
    try:
        restarted.wait_until(lambda: set(delivered()) >= set(landed), 150, "every record after the restart")
        assert restarted.terminate() == 0, restarted.tail()
    finally:
        restarted.kill()
