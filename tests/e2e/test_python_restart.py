"""Python operators through `contraflow run`, SIGKILLed between two parts of their input (issue 26).

A `python::map` scores each event and counts the events of its key in its state; a
`python::batch` keeps a running total in its state; one event makes the map raise. The test
writes the input in two parts: the first run gets only the first part and is killed once the
pipeline's outputs reach the sink and its query committed a micro-batch; the rest is appended
before the restart. The kill therefore always lands mid-stream, however slow the machine. The
restarted flow must go on from both states, not recompute them: each key counted 1, 2, ...
across the restart, every output exactly once and in order in the log, no event of a committed
micro-batch seen again by the map, the raising event one `err` event.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from contraflow.spark.checkpoint import CHECKPOINTS, has_progress, last_committed_ends
from contraflow.spu.api import LocalLog
from contraflow.spu.protocol.topics import TopicConfig
from tests.e2e.run_process import RunProcess
from tests.e2e.test_crash_restart import log_records
from tests.runtime.harness import JSON_LINES, read_events

FIRST, TOTAL = 200, 400  # events before the kill, events in all
KEYS = 3
FAILING = 250  # after the restart: the map raises on it with its restored state
TOPICS = {"out": "python-restart-out", "err": "python-restart-err"}
STARTUP_S = 240  # a runtime start (Spark's JVM, the query) on a loaded machine

# Next to the flow file, where `contraflow run` finds it.
MODULE = f"""
import os

import pyarrow.compute as pc


def scored(event, ctx):
    with open(os.environ["SCORING_CALLS"], "a") as calls:  # which events this run's map saw
        print(event["n"], file=calls)
    if event["n"] == {FAILING}:
        raise ValueError("cannot score event {FAILING}")
    counts = ctx.state or {{}}
    key = str(event["n"] % {KEYS})
    counts[key] = counts.get(key, 0) + 1
    ctx.state = counts
    return {{"n": event["n"], "key": key, "count": counts[key], "score": event["n"] * ctx.args["weight"]}}


def running_total(table, ctx):
    totals = pc.add(pc.cumulative_sum(table["n"]), ctx.state or 0)
    ctx.state = totals[-1].as_py()
    return table.append_column("total", totals)
"""


def flow_source(tmp: Path) -> str:
    return f"""
define flow scoring
flow
{JSON_LINES}
  define pipeline work
  pipeline
    define operator scored from python::map with module = "scoring_udfs", function = "scored", args = {{"weight": 2}} end;
    define operator total from python::batch with module = "scoring_udfs", function = "running_total" end;
    create operator scored;
    create operator total;
    select event from in into scored;
    select event from scored into total;
    select event from total into out;
  end;
  define connector outputs from log with codec = "json", config = {{"topic": "{TOPICS["out"]}"}} end;
  define connector errors from log with codec = "json", config = {{"topic": "{TOPICS["err"]}"}} end;
  create connector input from lines with path = "{tmp}/in.jsonl" end;
  create connector watched from lines with path = "{tmp}/watched.jsonl", mode = "append" end;
  create connector outputs;
  create connector errors;
  create pipeline work;
  connect /connector/input to /pipeline/work;
  connect /pipeline/work/out to /connector/outputs;
  connect /pipeline/work/err to /connector/errors;
  connect /pipeline/work/out to /connector/watched;
  connect /pipeline/work/err to /connector/watched;
end;
deploy flow scoring;
"""


def append_events(path: Path, start: int, end: int) -> None:
    with path.open("ab") as out:
        out.write(b"".join(orjson.dumps({"n": n}) + b"\n" for n in range(start, end)))


def expected_outputs() -> list[dict[str, Any]]:
    """One uninterrupted run's outputs, in order: per-key counts and the running total."""
    counts: Counter[str] = Counter()
    total, outputs = 0, []
    for n in range(TOTAL):
        if n == FAILING:
            continue
        key = str(n % KEYS)
        counts[key] += 1
        total += n
        outputs.append({"n": n, "key": key, "count": counts[key], "score": 2 * n, "total": total})
    return outputs


def test_python_operator_states_survive_sigkill_and_restart(tmp_path: Path) -> None:
    (tmp_path / "scoring_udfs.py").write_text(MODULE)
    flow = tmp_path / "flow.troy"
    flow.write_text(flow_source(tmp_path))
    source, watched = tmp_path / "in.jsonl", tmp_path / "watched.jsonl"
    append_events(source, 0, FIRST)
    data_dir = tmp_path / "data"
    with LocalLog(data_dir / "spu") as log:
        for topic in TOPICS.values():
            log.create_topic(topic, TopicConfig(partitions=1))

    def seen() -> set[int]:  # outputs and err events alike carry their event's number
        return {e["n"] if "n" in e else e["event"]["n"] for e in read_events(watched)}

    def run(number: int) -> RunProcess:
        calls = {"SCORING_CALLS": str(tmp_path / f"calls{number}.txt")}
        return RunProcess(flow, data_dir, tmp_path, tmp_path / f"run{number}.log", env=calls)

    checkpoint = data_dir / CHECKPOINTS / "scoring" / "work"
    first = run(1)
    want = expected_outputs()  # while the runtime starts
    first.wait_until(lambda: bool(seen()), STARTUP_S, "the Python pipeline's first outputs")
    first.wait_until(lambda: has_progress(checkpoint), STARTUP_S, "a committed micro-batch")
    first.kill()
    (committed,) = last_committed_ends(checkpoint)  # the input channel's events the state holds
    assert committed[0] > 0
    before_restart = log_records(data_dir, TOPICS["out"])
    assert 0 < len(before_restart) <= FIRST
    append_events(source, FIRST, TOTAL)

    second = run(2)
    second.wait_until(lambda: seen() >= set(range(TOTAL)), STARTUP_S, "every event after the restart")
    assert second.terminate() == 0, second.tail()

    # Exactly once, in order, both states carried across the kill: one uninterrupted run's outputs.
    outputs = log_records(data_dir, TOPICS["out"])
    assert outputs[: len(before_restart)] == before_restart
    assert outputs == want
    per_key = Counter(str(n % KEYS) for n in range(TOTAL) if n != FAILING)
    for key, events in per_key.items():  # each key counted 1..n once, across the kill
        assert [e["count"] for e in outputs if e["key"] == key] == list(range(1, events + 1))
    seen_again = {int(n) for n in (tmp_path / "calls2.txt").read_text().split()} & set(range(committed[0]))
    assert not seen_again, "the restarted map recomputed events its restored state already counted"
    errors = log_records(data_dir, TOPICS["err"])
    assert [(e["type"], e["node"], e["event"]) for e in errors] == [("ValueError", "scored", {"n": FAILING})]
