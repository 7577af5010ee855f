"""Checked against unchecked reads on the read paths that hand records to consumers.

Part of `benchmarks/log_throughput.py` (its "read_paths" section); run alone
with `python benchmarks/read_paths.py [--records N] [--rounds R] [--no-spark] [--paths fetch,...]`.

A log of 200-byte records in 1000-record batches is written once (a writer's
clean close). Then each read path reads all of it, from a fresh open each
time, in these states of the log, taken in alternation so all see the same load:

- "cold": no CRC check is on record (`crc-checked` removed, as after a
  reboot) and the SPU's background scrub is off (`--no-scrub`), so the read
  path CRC-checks every batch on its first read;
- "cold_scrubbing" (paths through an SPU): the same log, with the SPU
  scrubbing in the background as it does by default, the read starting at
  once (each batch is checked by whichever of the two reaches it first);
- "unchecked": every byte of every segment on record as checked in this boot,
  so the read path checks nothing (a range-set lookup per batch, no CRC).

The pages are in the page cache in every state (the worst case for the
ratio: a read from the disk after a real reboot is slower by itself).

The read paths, each doing the consumer's real work in every state:

- fetch: a `contraflow spu run` child process on loopback, `SpuClient.fetch`
  1 MiB at a time from offset 0 to the end, each batch decoded into a
  `FetchResult` and its records counted (network, framing, decoding);
- stream: the same SPU, `SpuClient.stream` (the server pushes 1 MiB frames
  against 8 MiB of credit);
- consume_dir / consume_spu: the `contraflow consume NAME -B -d` command
  (in this process, without the interpreter's start-up) on the data
  directory / through the SPU, its output written to a file;
- spark_source: a Structured Streaming query reading the topic with the
  `contraflow` source into Spark's `noop` sink (`availableNow`); its time is
  the query's execution (`triggerExecution`), without its fixed start-up.

The SPU is restarted for every sample (its checks are remembered for the
rest of its life). Reported per path: records/s of each state (median over
the rounds, wall time of the read alone), `<state>_vs_unchecked` (the median
of the rounds' own ratios: one round's states run back to back) and
`<state>_vs_unchecked_best` (fastest against fastest: the least disturbed
sample of each, as timeit reports on a busy machine), and for the
paths run in processes this one can measure (fetch, stream, consume) the
same ratios in CPU time, `cpu_<state>_vs_unchecked` (this process plus the
SPU child: the scrubber's CPU counts too); `spu_cpu_s` is the SPU's share, and
`<state>_vs_unchecked_serial_spu_cpu` the ratio if the SPU's extra CPU in
that state were all added to the unchecked read's time (the bound used for
the Spark source, whose JVM and workers this script does not measure).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contraflow.spu.api import LocalLog
from contraflow.spu.app import ServerConfig
from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.protocol.batch import encode_batch
from contraflow.spu.protocol.topics import TopicConfig
from contraflow.spu.storage import boot_checks, scrub
from contraflow.spu.storage.partition import Partition

TOPIC = "bench"
RECORD_BYTES = 200
BATCH_RECORDS = 1000
SEGMENT_BYTES = 16 << 20  # several segments: rolls and per-segment records are part of the path
FETCH_BYTES = 1 << 20
STREAM_CREDIT = 8 << 20
LOCAL_STATES = ("cold", "unchecked")
SPU_STATES = ("cold", "cold_scrubbing", "unchecked")
RECORDS = 1_000_000  # 200 MB: reads long enough for a loaded box's wall clock
ROUNDS = 9


def write_log(data_dir: Path, records: int) -> None:
    """The topic, written through the log as a producer's batches (clean close at the end)."""
    with LocalLog(data_dir) as log:
        log.create_topic(TOPIC, TopicConfig(segment_bytes=SEGMENT_BYTES))
        for b in range(records // BATCH_RECORDS):
            values = [
                (b"%012d" % (b * BATCH_RECORDS + i)).ljust(RECORD_BYTES, b"x") for i in range(BATCH_RECORDS)
            ]
            log.produce_encoded(TOPIC, 0, encode_batch(values))


def partition_dir(data_dir: Path) -> Path:
    return data_dir / "topics" / TOPIC / "0"


def set_state(data_dir: Path, state: str) -> None:
    """Put the log's CRC record in `state` (see the module docstring) before an open."""
    directory = partition_dir(data_dir)
    (directory / boot_checks.CHECK_RECORD).unlink(missing_ok=True)
    if state != "unchecked":
        return
    part = Partition(directory, TOPIC, 0, TopicConfig(segment_bytes=SEGMENT_BYTES), writable=False)
    try:
        for seg in part.segments:
            seg.verified.add(0, seg.size)
        boot_checks.remember(directory, part.segments)
    finally:
        part.close()


def task_cpu_seconds(pid: int, *, but: str | None = None) -> float:
    """CPU time of every thread of process `pid` so far (nanosecond schedstat, not 10 ms
    ticks), leaving out threads named `but`."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            if but is None or (task / "comm").read_text().strip() != but:
                total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


@dataclass(frozen=True)
class SpuChild:
    addr: str
    pid: int
    cpu_at_ready: float  # its CPU seconds once ready: a background scrub from then on counts


class Sample:
    """Wall and CPU seconds of one read. CPU: this process's, plus an SPU child's since it
    became ready (so its scrub counts even where it ran before the read began)."""

    def __init__(self, spu: SpuChild | None = None) -> None:
        self.spu = spu
        self.wall = self.cpu = self.spu_cpu = 0.0

    def __enter__(self) -> Sample:
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._wall0
        if self.spu:
            self.spu_cpu = task_cpu_seconds(self.spu.pid) - self.spu.cpu_at_ready
        self.cpu = time.process_time() - self._cpu0 + self.spu_cpu


@contextlib.contextmanager
def spu_child(data_dir: Path, state: str) -> Iterator[SpuChild]:
    """`contraflow spu run` on the log; its background scrub only in the "cold_scrubbing" state
    (in "cold" the reads alone check; in "unchecked" there is nothing left to check)."""
    config = ServerConfig(data_dir, scrub=state == "cold_scrubbing")
    with EmbeddedSpu(data_dir, mode="process", config=config) as spu:
        assert spu.pid is not None
        # the scrub starts once the SPU is ready: all of its CPU counts, even before the read
        yield SpuChild(spu.addr, spu.pid, task_cpu_seconds(spu.pid, but=scrub.THREAD_NAME))


# -- the read paths: each reads the whole topic once and returns the records it saw -------------


def fetch_all(client: SpuClient, end: int) -> int:
    offset = seen = 0
    while offset < end:
        result = client.fetch(TOPIC, 0, offset, FETCH_BYTES)
        seen += sum(batch.record_count for batch in result.batches)
        offset = result.next_offset
    return seen


def stream_all(client: SpuClient, end: int) -> int:
    seen = 0
    with client.stream(TOPIC, 0, 0, credit_bytes=STREAM_CREDIT, max_bytes=FETCH_BYTES) as stream:
        for result in stream:
            seen += sum(batch.record_count for batch in result.batches)
            if result.next_offset >= end:
                break
    return seen


def run_consume_command(args: list[str], out_path: Path) -> int:
    """`contraflow consume ARGS` in this process, stdout to `out_path`; returns lines written."""
    from contraflow.spu.cli.commands import consume

    saved = sys.stdout
    with open(out_path, "wb") as out:
        sys.stdout = io.TextIOWrapper(out, write_through=True)
        try:
            consume.main(args, prog_name="contraflow consume", standalone_mode=False)
        finally:
            sys.stdout.flush()
            sys.stdout.detach()
            sys.stdout = saved
    with open(out_path, "rb") as written:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: written.read(1 << 20), b""))


def spark_read_all(spark: Any, addr: str, checkpoint: Path) -> tuple[int, float]:
    """Rows the query read and its execution seconds (Spark's `triggerExecution`, without
    the query's fixed start-up, as benchmarks/spark_bridge.py counts it)."""
    query = (
        spark.readStream.format("contraflow")
        .option("spu", addr)
        .option("topic", TOPIC)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    progress = query.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    return rows, sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000


# -- one sample per path and state ----------------------------------------------------------------


PathRun = Callable[[Path, Path, int, str], Sample]  # (log, scratch dir, records, state)


def sample_fetch(data_dir: Path, work: Path, records: int, state: str) -> Sample:
    return _over_spu(data_dir, records, state, fetch_all)


def sample_stream(data_dir: Path, work: Path, records: int, state: str) -> Sample:
    return _over_spu(data_dir, records, state, stream_all)


def _over_spu(data_dir: Path, records: int, state: str, read: Callable[[SpuClient, int], int]) -> Sample:
    with spu_child(data_dir, state) as spu, SpuClient(spu.addr) as client:
        client.describe_topic(TOPIC)  # connected and the partition opened before the clock starts
        with Sample(spu) as sample:
            seen = read(client, records)
    assert seen == records, (seen, records)
    return sample


def sample_consume_dir(data_dir: Path, work: Path, records: int, state: str) -> Sample:
    with Sample() as sample:
        lines = run_consume_command([TOPIC, "-B", "-d", "--data-dir", str(data_dir)], work / "out")
    assert lines == records, (lines, records)
    return sample


def sample_consume_spu(data_dir: Path, work: Path, records: int, state: str) -> Sample:
    with spu_child(data_dir, state) as spu:
        SpuClient(spu.addr).close()  # the SPU is up and listening before the clock starts
        with Sample(spu) as sample:
            lines = run_consume_command([TOPIC, "-B", "-d", "--spu", spu.addr], work / "out")
    assert lines == records, (lines, records)
    return sample


def spark_sampler(spark: Any) -> PathRun:
    def sample_spark(data_dir: Path, work: Path, records: int, state: str) -> Sample:
        with spu_child(data_dir, state) as spu:
            SpuClient(spu.addr).close()
            checkpoint = Path(tempfile.mkdtemp(dir=work))
            with Sample(spu) as sample:
                rows, execution_s = spark_read_all(spark, spu.addr, checkpoint)
        sample.wall = execution_s
        sample.cpu = float("nan")  # Spark's JVM and Python workers: the SPU's CPU only
        assert rows == records, (rows, records)
        return sample

    return sample_spark


# -- the run ----------------------------------------------------------------------------------------


def summarise(samples: dict[str, list[Sample]], records: int) -> dict[str, Any]:
    """Rates: medians per state. Ratios: the median of each round's ratio (the states of one
    round ran back to back, under the same load), in wall time and, where measured, CPU time."""
    checked = [state for state in samples if state != "unchecked"]

    def paired(state: str, measure: Callable[[Sample], float]) -> float:
        pairs = zip(samples["unchecked"], samples[state], strict=True)
        return round(statistics.median(measure(u) / measure(c) for u, c in pairs), 3)

    result: dict[str, Any] = {
        **{
            f"{state}_records_per_s": round(records / statistics.median(s.wall for s in runs))
            for state, runs in samples.items()
        },
        **{f"{state}_vs_unchecked": paired(state, lambda s: s.wall) for state in checked},
        **{
            f"{state}_vs_unchecked_best": round(
                min(s.wall for s in samples["unchecked"]) / min(s.wall for s in samples[state]), 3
            )
            for state in checked
        },
        "samples_s": {state: [round(s.wall, 4) for s in runs] for state, runs in samples.items()},
    }
    if all(s.spu for runs in samples.values() for s in runs):
        spu_cpu = {state: statistics.median(s.spu_cpu for s in runs) for state, runs in samples.items()}
        result["spu_cpu_s"] = {state: round(c, 4) for state, c in spu_cpu.items()}
        # the checking's CPU in the SPU, as if it were added to the read's own time
        unchecked_wall = statistics.median(s.wall for s in samples["unchecked"])
        result.update(
            {
                f"{state}_vs_unchecked_serial_spu_cpu": round(
                    unchecked_wall / (unchecked_wall + max(0.0, spu_cpu[state] - spu_cpu["unchecked"])), 3
                )
                for state in checked
            }
        )
    if all(s.cpu == s.cpu for runs in samples.values() for s in runs):  # no NaN: CPU measured
        result["cpu_s"] = {
            state: round(statistics.median(s.cpu for s in runs), 4) for state, runs in samples.items()
        }
        result.update({f"cpu_{state}_vs_unchecked": paired(state, lambda s: s.cpu) for state in checked})
    return result


def measure(records: int, rounds: int, spark: Any | None, only: set[str] | None = None) -> dict[str, Any]:
    paths: dict[str, tuple[PathRun, tuple[str, ...]]] = {
        "fetch": (sample_fetch, SPU_STATES),
        "stream": (sample_stream, SPU_STATES),
        "consume_dir": (sample_consume_dir, LOCAL_STATES),
        "consume_spu": (sample_consume_spu, SPU_STATES),
    }
    if spark is not None:
        paths["spark_source"] = (spark_sampler(spark), SPU_STATES)
    if only is not None:
        paths = {name: path for name, path in paths.items() if name in only}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        data_dir = root / "log"
        write_log(data_dir, records)
        results: dict[str, Any] = {}
        for name, (run, states) in paths.items():
            run(data_dir, root, records, "unchecked")  # warm-up: imports, page cache, Spark's first query
            samples: dict[str, list[Sample]] = {state: [] for state in states}
            for _ in range(rounds):
                for state in states:  # alternating: every state sees the same load
                    set_state(data_dir, state)
                    samples[state].append(run(data_dir, root, records, state))
            results[name] = summarise(samples, records)
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--paths", default=None, help="comma-separated read paths (default: all)")
    args = parser.parse_args()
    only = set(args.paths.split(",")) if args.paths else None
    spark = None
    if not args.no_spark and (only is None or "spark_source" in only):
        from contraflow.spark import session

        spark = session()
    json.dump(measure(args.records, args.rounds, spark, only), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
