"""The read task of hot_path's w1 on one micro-batch, stage by stage, in one process.

Prints one JSON object. Usage: python benchmarks/read_task.py [EVENTS] [--rounds=N] [--stamp=ROWS]
[--baseline=SRC]

What one read task of the split w1 runs (`PackEvents._envelopes`: the
columnar prefix, partial aggregation, the envelopes) over EVENTS source rows
(default 330,000: one micro-batch of `hot_path.py 3000000`), in pieces of
`ARROW_ROWS_PER_BATCH` rows as the source hands them over, log timestamps
shared by STAMP rows (default 20,000: one 4 MiB pull of the file source). CPU
µs per source event (process time, so pyarrow's threads count), the minimum of
N rounds (default 5; the box is shared), of:

- `parse`: `parse_values` (JSON reader and exactness prefilter);
- `route_outputs`: the prefix's output rows built from its columns;
- `prefix`: all of `ColumnarPlan.run` (parse and routing included);
- `fold`: `PartialAggregation.collapse` (`columnar_fold`);
- `envelopes`: the rest (group streams, split by key, Arrow IPC);
- `total`: the whole read task;

with the rows left to cross the shuffle and a digest of the envelopes' events
(equal digests: identical output across code versions). With `--baseline`
(e.g. an untouched checkout's `src`), each round runs this checkout and then
the baseline, each in a child process, and both sides are reported with their
ratios (this checkout's CPU / the baseline's).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The code measured: this checkout's, or in a child the `--src` it was given.
SOURCE = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--src=")), str(ROOT / "src"))
sys.path[:0] = [SOURCE, str(ROOT), str(ROOT / "benchmarks")]

from tests.pipeline.spark.partial_harness import SourceBatch, TwoStages  # noqa: E402

from contraflow.pipeline.columnar import plan as columnar_plan  # noqa: E402
from contraflow.pipeline.executor import no_cyclic_gc  # noqa: E402
from contraflow.pipeline.local import compile_query  # noqa: E402
from contraflow.pipeline.spark.envelopes import from_ipc  # noqa: E402
from contraflow.pipeline.spark.partial import PartialAggregation  # noqa: E402
from contraflow.spark.datasource import ARROW_ROWS_PER_BATCH  # noqa: E402
from hot_path import W1_QUERY, make_events  # noqa: E402


def option(name: str, default: int) -> int:
    return next((int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith(f"--{name}=")), default)


class Clocks:
    """CPU seconds spent inside some functions, summed over calls (outermost call only)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def timing(self, owner: Any, attribute: str, name: str) -> Iterator[None]:
        original: Callable[..., Any] = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.process_time() - started

        setattr(owner, attribute, timed)
        try:
            yield
        finally:
            setattr(owner, attribute, original)


def one_round(stages: TwoStages, batches: list[Any]) -> tuple[dict[str, float], int, str]:
    """CPU seconds per stage over all batches, the rows left to cross, the envelopes' digest."""
    clocks = Clocks()
    digest = hashlib.sha256()
    crossed = 0
    with (
        clocks.timing(columnar_plan, "parse_values", "parse"),
        clocks.timing(columnar_plan.ColumnarPlan, "_route_outputs", "route_outputs"),
        clocks.timing(columnar_plan.ColumnarPlan, "run", "prefix"),
        clocks.timing(PartialAggregation, "collapse", "fold"),
    ):
        for rows in batches:
            started = time.process_time()
            with no_cyclic_gc():
                envelopes = stages.pack._envelopes(rows)
            clocks.seconds["total"] = clocks.seconds.get("total", 0.0) + time.process_time() - started
            for key, events in zip(
                envelopes.column("key").to_pylist(), envelopes.column("events").to_pylist(), strict=True
            ):
                table = from_ipc(events)
                crossed += table.num_rows
                digest.update(key.encode())
                for name in ("target", "offset", "value", "partial"):
                    digest.update(repr(table.column(name).to_pylist()).encode())
    seconds = clocks.seconds
    seconds["envelopes"] = seconds["total"] - seconds["prefix"] - seconds.get("fold", 0.0)
    return seconds, crossed, digest.hexdigest()[:16]


def measure(count: int, stamp: int, rounds: int) -> dict[str, Any]:
    """This process's code over EVENTS events: the minimum of `rounds` rounds per stage."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.json"
        make_events(path, count)
        lines = path.read_bytes().splitlines()
    step = ARROW_ROWS_PER_BATCH
    batches = [
        SourceBatch(
            0, start, lines[start : start + step], [1 + i // stamp for i in range(start, start + step)]
        )
        for start in range(0, count, step)
    ]
    for batch in batches:
        batch.timestamps_ms = batch.timestamps_ms[: len(batch.values)]
    rows = [batch.rows("t") for batch in batches]
    stages = TwoStages(compile_query(W1_QUERY, name="w1.trickle"), fold=True, streams=True)
    stages.pack._envelopes(rows[0])  # warm up: compile, fill caches
    best: dict[str, float] = {}
    crossed, digest = 0, ""
    for _ in range(rounds):
        seconds, crossed, digest = one_round(stages, rows)
        for name, value in seconds.items():
            best[name] = min(best.get(name, value), value)
    return {
        "cpu_us_per_event": {name: round(value / count * 1e6, 3) for name, value in sorted(best.items())},
        "rows_crossed": crossed,
        "envelopes_digest": digest,
    }


def side_by_side(count: int, stamp: int, rounds: int, baseline: str) -> dict[str, Any]:
    """Alternating child processes of this checkout and of `baseline`, the minimum per stage."""
    sides: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        for name, source in (("this", str(ROOT / "src")), ("baseline", baseline)):
            command = [
                sys.executable,
                __file__,
                str(count),
                f"--stamp={stamp}",
                "--rounds=1",
                f"--src={source}",
            ]
            found = json.loads(subprocess.run(command, check=True, capture_output=True).stdout)
            side = sides.setdefault(name, found)
            for stage, value in found["cpu_us_per_event"].items():
                side["cpu_us_per_event"][stage] = min(side["cpu_us_per_event"][stage], value)
    this, base = sides["this"]["cpu_us_per_event"], sides["baseline"]["cpu_us_per_event"]
    sides["ratio"] = {stage: round(this[stage] / base[stage], 3) for stage in this if base.get(stage)}
    sides["same_envelopes"] = sides["this"]["envelopes_digest"] == sides["baseline"]["envelopes_digest"]
    return sides


def main() -> None:
    count = next((int(a) for a in sys.argv[1:] if not a.startswith("--")), 330_000)
    stamp, rounds = option("stamp", 20_000), option("rounds", 5)
    baseline = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--baseline=")), None)
    result: dict[str, Any] = {"events": count, "stamp_rows": stamp, "rows_per_piece": ARROW_ROWS_PER_BATCH}
    if baseline is None:
        result.update(measure(count, stamp, rounds))
    else:
        result.update(side_by_side(count, stamp, rounds, baseline))
    result["load_average"] = os.getloadavg()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
