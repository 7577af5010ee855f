"""A flow run by `contraflow run --spu A,B,C` against an SPU cluster, fed while SPUs die.

The flow reads topic `in` (a `log` source), passes every event through to
topic `passed` and counts each group's events in tumbling windows of 10 into
topic `counted` (a stateful pipeline: its group key set by a `python::batch`, each event
numbered within its group by a `python::map` keeping the numbers as state, one event failing
in the map and going to topic `errors`), all through `log` sinks (exactly once). The test writes the input at a steady rate from a thread, so the flow
is mid-stream whenever something is killed.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path

import orjson
from tests.e2e.run_process import RunProcess

from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import Acks, ErrorCode, SpuError
from contraflow.spu.protocol.topics import TopicConfig

GROUPS = 4
WINDOW = 10
TOPICS = ("in", "passed", "counted", "errors")
FAILING = 7  # the event the python::map raises on
WARM_UP = 100
HELD = 500  # events fed only after the kills

FLOW = """
define flow clustered
flow
  define connector input from log with codec = "json", config = {"topic": "in"} end;
  define connector passed from log with codec = "json", config = {"topic": "passed"} end;
  define connector counted from log with codec = "json", config = {"topic": "counted"} end;
  define connector errors from log with codec = "json", config = {"topic": "errors"} end;
  define pipeline pass
  pipeline
    select event from in into out;
  end;
  define pipeline count
  pipeline
    define operator keyed from python::batch with module = "cluster_keys", function = "group_key" end;
    define operator numbered from python::map with module = "cluster_keys", function = "number" end;
    create operator keyed;
    create operator numbered;
    define window tens from tumbling with size = WINDOW_SIZE end;
    select event from in into keyed;
    select event from keyed into numbered;
    select {"g": group[0], "count": aggr::stats::count(), "min": aggr::stats::min(event.n),
            "max": aggr::stats::max(event.n), "numbered": aggr::stats::max(event.number)}
    from numbered[tens] group by set(event.key) into out;
  end;
  create connector input;
  create connector passed;
  create connector counted;
  create connector errors;
  create pipeline pass;
  create pipeline count;
  connect /connector/input to /pipeline/pass;
  connect /connector/input to /pipeline/count;
  connect /pipeline/pass to /connector/passed;
  connect /pipeline/count to /connector/counted;
  connect /pipeline/count/err to /connector/errors;
end;
deploy flow clustered;
""".replace("WINDOW_SIZE", str(WINDOW))


# The count pipeline's Python operators, next to the flow file: each event's group as `key`,
# and its number within the group (the count so far, in the map's state).
KEYS_MODULE = """
def group_key(table, ctx):
    if SHIPPED and ".zip" not in __file__:
        raise RuntimeError(f"imported from {__file__}, not from the zip the runtime shipped")
    return table.append_column("key", table["g"])


def number(event, ctx):
    if SHIPPED and ".zip" not in __file__:
        raise RuntimeError(f"imported from {__file__}, not from the zip the runtime shipped")
    if event["n"] == FAILING:
        raise ValueError(f"event {FAILING} fails")
    numbers = ctx.state or {}
    numbers[event["key"]] = numbers.get(event["key"], 0) + 1
    ctx.state = numbers
    return {**event, "number": numbers[event["key"]]}
"""


def write_flow(directory: Path, shipped: bool = False) -> Path:
    """The flow file and its Python module; `shipped`: the module fails unless it was imported from
    the zip a run on a Spark cluster ships to the executors."""
    (directory / "cluster_keys.py").write_text(f"SHIPPED = {shipped}\nFAILING = {FAILING}\n{KEYS_MODULE}")
    path = directory / "clustered.troy"
    path.write_text(FLOW)
    return path


def create_topics(client: SpuClient) -> None:
    config = client.replicated_config(TopicConfig(partitions=1))
    assert config.replication_factor == 3 and config.min_in_sync_replicas == 2
    for topic in TOPICS:
        client.create_topic(topic, config)


def event(n: int) -> dict[str, object]:
    return {"n": n, "g": f"g{n % GROUPS}"}


# How long a produce waits for the in-sync set to grow back (the cluster's sessions are 1 s, and
# a restarted SPU rejoins once it has caught up).
SHRINK_WAIT_S = 60.0


def produce_through_shrinks(client: SpuClient, values: list[bytes]) -> None:
    """Produce with acks=all as a Kafka producer does: a refusal for want of in-sync replicas
    wrote nothing (the leader checks before it appends), so the batch is sent again until the set
    has grown back. The set shrinks when a follower is killed, and also when a live SPU misses its
    1 s session on a loaded box (seen in a full suite: SPU 2 dropped 1.1 s after the kill of
    SPU 1, leaving `in` one replica)."""
    deadline = time.monotonic() + SHRINK_WAIT_S
    while True:
        try:
            client.produce("in", 0, values, acks=Acks.COMMITTED)
            return
        except SpuError as err:
            if err.code is not ErrorCode.NOT_ENOUGH_REPLICAS or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Feeder(threading.Thread):
    """Produces events start..count-1 to `in` (acks=all, idempotent) at `per_second`; with
    `held` > 0 it writes the last `held` events only once `finish` is called (after the
    kills), so the input goes on after them however slowly the flow ran before."""

    def __init__(self, bootstrap: str, start: int, count: int, per_second: float, held: int = 0) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.first, self.count, self.per_second = bootstrap, start, count, per_second
        self.held_from = count - held
        self.release = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        chunk = 10
        try:
            with SpuClient(self.bootstrap) as client:
                began = time.monotonic()
                for first in range(self.first, self.count, chunk):
                    if first >= self.held_from and not self.release.is_set():
                        self.release.wait()
                        began = time.monotonic() - (first - self.first) / self.per_second
                    values = [orjson.dumps(event(n)) for n in range(first, min(first + chunk, self.count))]
                    produce_through_shrinks(client, values)
                    delay = began + (first + chunk - self.first) / self.per_second - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
        except BaseException as err:
            self.error = err

    def finish(self, timeout_s: float) -> None:
        self.release.set()
        self.join(timeout_s)
        assert not self.is_alive(), "the feeder did not finish"
        assert self.error is None, f"the feeder failed: {self.error!r}"


def warm_up(bootstrap: str, run: RunProcess, client: SpuClient) -> None:
    """The first WARM_UP events through the flow: its queries and Spark's executors and Python
    workers are up, so what follows streams (a first micro-batch takes many seconds)."""
    feeder = Feeder(bootstrap, 0, WARM_UP, per_second=1000)
    feeder.start()
    feeder.finish(60)
    run.wait_until(lambda: len(passed_numbers(client)) >= WARM_UP, 300, "the first events")


def feed_mid_stream(
    bootstrap: str, run: RunProcess, client: SpuClient, count: int, first: int = WARM_UP, held: int = HELD
) -> Feeder:
    """Feed events first..count-1 at 100/s, the last `held` of them only once `finish` is
    called; return once the flow has output WARM_UP of them: the moment to kill things (the
    input goes on after them)."""
    feeder = Feeder(bootstrap, first, count, per_second=100, held=held)
    feeder.start()
    run.wait_until(lambda: len(passed_numbers(client)) >= first + WARM_UP, 120, "events mid-stream")
    assert feeder.is_alive(), "the input ended before anything was killed"
    return feeder


def read_topic(client: SpuClient, topic: str) -> list[dict[str, object]]:
    """Every committed record of the topic's partition 0, decoded."""
    out: list[dict[str, object]] = []
    offset = 0
    while True:
        result = client.fetch(topic, 0, offset)
        records = [r for b in result.batches for r in b.records(start_offset=offset)]
        if not records:
            return out
        out += [orjson.loads(r.value) for r in records]
        offset = records[-1].offset + 1


def passed_numbers(client: SpuClient) -> list[int]:
    return [int(e["n"]) for e in read_topic(client, "passed")]  # type: ignore[call-overload]


Window = tuple[int, int, int, int]


def expected_windows(count: int) -> dict[str, list[Window]]:
    """Per group, the (count, min, max, last number in the group) of each full window of its
    events but the failing one, in order."""
    numbers: dict[str, list[int]] = defaultdict(list)
    for n in range(count):
        if n != FAILING:
            numbers[f"g{n % GROUPS}"].append(n)
    return {
        g: [(WINDOW, ns[i], ns[i + WINDOW - 1], i + WINDOW) for i in range(0, len(ns) - WINDOW + 1, WINDOW)]
        for g, ns in numbers.items()
    }


def counted_windows(client: SpuClient) -> dict[str, list[Window]]:
    windows: dict[str, list[Window]] = defaultdict(list)
    for e in read_topic(client, "counted"):
        fields = (e["count"], e["min"], e["max"], e["numbered"])
        windows[str(e["g"])].append(tuple(int(f) for f in fields))  # type: ignore[arg-type, call-overload]
    return dict(windows)


def everything_out(client: SpuClient, count: int) -> bool:
    """As many events passed and windows counted as the input makes (or more: duplicates)."""
    windows = sum(len(w) for w in counted_windows(client).values())
    return len(passed_numbers(client)) >= count and windows >= sum(map(len, expected_windows(count).values()))


def assert_exactly_once(client: SpuClient, count: int) -> None:
    """Input, pass-through output and windows: each event and each window once, none missing."""
    assert [int(e["n"]) for e in read_topic(client, "in")] == list(range(count)), "input"  # type: ignore[call-overload]
    passed = passed_numbers(client)
    assert len(passed) == len(set(passed)), f"{len(passed) - len(set(passed))} events passed twice"
    assert sorted(passed) == list(range(count)), f"{count - len(set(passed))} events missing"
    windows = counted_windows(client)
    for group, expected in expected_windows(count).items():
        got = windows.get(group, [])
        # the counts and the map's numbers continued through the kills: every window full, none
        # twice, none lost
        assert sorted(got) == expected, f"{group}: {sorted(got)[:5]}... != {expected[:5]}..."
    errors = read_topic(client, "errors")  # the map's exception, as an err event, once
    assert [(e["type"], e["operator"], e["event"]["n"]) for e in errors] == [
        ("ValueError", "python::map", FAILING)
    ]  # type: ignore[index]
