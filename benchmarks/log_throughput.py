"""Produce and consume throughput of the SPU log against plain file writes.

Prints one JSON object. For 200-byte records in batches, with fsync per batch
and with page-cache flushing, it measures:

- produce_encoded: `Partition.append_encoded` of batches the producer already
  encoded (what the SPU server does per produce request: check CRC, stamp,
  write, flush per policy);
- produce_records: `Partition.append_records` (encoding included, one thread);
- consume: `Partition.read` of whole batches as zero-copy mmap views, counting
  records from the headers (what the SPU server does to answer a fetch);
- consume_arrow: the same, plus a pyarrow BinaryArray of each batch's values
  built over the mapped bytes (the Spark source's path, still zero-copy);
- consume_values: the same, plus one Python memoryview per value (a plain
  Python consumer's path);
- raw: the same encoded bytes appended to a plain file with `os.write`, with
  the same fsync cadence: the disk baseline.

Reads CRC-check each batch once per boot: at append, in a recovery scan or on
the first read in a process, and a clean close records what was checked
(`storage/boot_checks.py`) for the next open in the same boot. The cost of
checking is measured on fresh read-only opens of the produced log, against the
same open with every batch marked as checked ("unchecked"):

- "recalled": the open takes the writer's record (the log was closed cleanly
  in this boot): `<consumer>_recalled_vs_unchecked` (target >= 0.8);
- "cold": the record forgotten, as after a reboot (and as every open was
  before the record existed), so every batch is checked on its first read,
  the worst case: `<consumer>_cold_vs_unchecked`.

Each reopened figure is the median of REPEATS x REOPEN_ROUNDS opens, taken
round robin, in CPU time of the reading thread (page faults included): a read
takes milliseconds, which wall time on a loaded box cannot resolve. Ratios: produce_encoded / raw and produce_records / raw (target >= 0.7),
consume / produce_encoded (target >= 3). Each figure is the median of REPEATS
runs on a fresh directory.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import read_paths
from contraflow.spark import session
from contraflow.spu.protocol.batch import BatchHeader, decode_batch, encode_batch
from contraflow.spu.protocol.topics import FlushPolicy, TopicConfig
from contraflow.spu.storage.partition import Partition

RECORD_BYTES = 200
BATCH_RECORDS = 1000
RECORDS = 200_000
REPEATS = 5
REOPEN_ROUNDS = 5  # reopened reads take milliseconds: more samples per produced log
SEGMENT_BYTES = 64 << 20

MODES = {"fsync_per_batch": FlushPolicy.every_batch(), "page_cache": FlushPolicy.never()}


def make_values() -> list[list[bytes]]:
    """Distinct 200-byte records, grouped in batches."""
    batches = []
    for b in range(RECORDS // BATCH_RECORDS):
        batches.append(
            [(b"%012d" % (b * BATCH_RECORDS + i)).ljust(RECORD_BYTES, b"x") for i in range(BATCH_RECORDS)]
        )
    return batches


@contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        yield Path(tmp) / "p"


def timed(func: Callable[[], None], clock: Callable[[], float] = time.perf_counter) -> float:
    start = clock()
    func()
    return clock() - start


def run_raw(directory: Path, encoded: list[bytes], fsync: bool) -> float:
    directory.mkdir()
    fd = os.open(directory / "raw.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write_all() -> None:
        for batch in encoded:
            os.write(fd, batch)
            if fsync:
                os.fsync(fd)

    try:
        return timed(write_all)
    finally:
        os.close(fd)


def new_partition(directory: Path, policy: FlushPolicy) -> Partition:
    return Partition(directory, "bench", 0, TopicConfig(segment_bytes=SEGMENT_BYTES, flush=policy))


def run_produce_encoded(
    directory: Path, encoded: list[bytes], policy: FlushPolicy
) -> tuple[float, Partition]:
    part = new_partition(directory, policy)

    def append_all() -> None:
        for batch in encoded:
            part.append_encoded(batch)

    return timed(append_all), part


def run_produce_records(directory: Path, batches: list[list[bytes]], policy: FlushPolicy) -> float:
    part = new_partition(directory, policy)

    def append_all() -> None:
        for values in batches:
            part.append_records(values)

    try:
        return timed(append_all)
    finally:
        part.close()


def count_header(view: memoryview) -> int:
    return BatchHeader.parse(view).record_count


def count_arrow(view: memoryview) -> int:
    return len(decode_batch(view).value_array())


def count_values(view: memoryview) -> int:
    return len(decode_batch(view).values())


CONSUMERS: dict[str, Callable[[memoryview], int]] = {
    "consume": count_header,
    "consume_arrow": count_arrow,
    "consume_values": count_values,
}


def run_consume(
    part: Partition, per_batch: Callable[[memoryview], int], clock: Callable[[], float] = time.perf_counter
) -> float:
    count = 0

    def read_all() -> None:
        nonlocal count
        offset = 0
        while True:
            result = part.read(offset, 1 << 20)
            if not result.batches:
                return
            for view in result.batches:
                count += per_batch(view)
            offset = result.next_offset

    elapsed = timed(read_all, clock)
    assert count == RECORDS, count
    return elapsed


CHECKS = ("cold", "recalled", "unchecked")


def reopened(directory: Path, checks: str) -> Partition:
    """A read-only open of the produced log, with `checks` (see CHECKS) applied."""
    part = Partition(directory, "bench", 0, TopicConfig(segment_bytes=SEGMENT_BYTES), writable=False)
    for seg in part.segments:
        if checks == "recalled":
            assert seg.verified.covers(0, seg.size), "the writer's clean close recorded its checks"
        elif checks == "cold":
            seg.verified.clear()
        else:
            seg.verified.add(0, seg.size)
    return part


def run_consume_reopened(directory: Path, per_batch: Callable[[memoryview], int], checks: str) -> float:
    part = reopened(directory, checks)
    gc.disable()  # as timeit does: a collection landing in one sample and not another is noise
    try:
        return run_consume(part, per_batch, time.thread_time)
    finally:
        gc.enable()
        part.close()


def rates(seconds: float) -> dict[str, float]:
    return {
        "records_per_s": round(RECORDS / seconds),
        "mb_per_s": round(RECORDS * RECORD_BYTES / seconds / 1e6, 1),
    }


def measure_mode(policy: FlushPolicy, batches: list[list[bytes]], encoded: list[bytes]) -> dict[str, object]:
    """Produce and in-process consume figures for one flush policy (medians of REPEATS runs)."""
    reopens = {f"{name}_{kind}": (name, kind) for name in CONSUMERS for kind in CHECKS}
    samples: dict[str, list[float]] = {
        name: [] for name in ("raw", "produce_encoded", "produce_records", *CONSUMERS, *reopens)
    }
    for _ in range(REPEATS):
        # each run gets its own directory, removed right away, so dirty pages
        # from one run do not throttle the next
        with scratch() as root:
            samples["raw"].append(run_raw(root, encoded, fsync=policy.mode == "every_batch"))
        with scratch() as root:
            seconds, part = run_produce_encoded(root, encoded, policy)
            samples["produce_encoded"].append(seconds)
            for name, per_batch in CONSUMERS.items():
                samples[name].append(run_consume(part, per_batch))
            part.close()
            for _ in range(REOPEN_ROUNDS):  # round robin: all kinds see the same load
                for label, (name, kind) in reopens.items():
                    samples[label].append(run_consume_reopened(root, CONSUMERS[name], kind))
        with scratch() as root:
            samples["produce_records"].append(run_produce_records(root, batches, policy))
    median = {name: statistics.median(values) for name, values in samples.items()}
    return {
        **{name: rates(median[name]) for name in ("raw", "produce_encoded", "produce_records", *CONSUMERS)},
        "produce_encoded_vs_raw": round(median["raw"] / median["produce_encoded"], 3),
        "produce_records_vs_raw": round(median["raw"] / median["produce_records"], 3),
        **{
            f"{name}_vs_produce_encoded": round(median["produce_encoded"] / median[name], 2)
            for name in CONSUMERS
        },
        "micro_reopened": {
            "what": "in-process micro consumers of a fresh read-only open, CPU of the reading thread "
            "(not a read path: see read_paths)",
            **{label: rates(median[label]) for label in reopens},
            **{
                f"{name}_{kind}_vs_unchecked": round(
                    median[f"{name}_unchecked"] / median[f"{name}_{kind}"], 3
                )
                for name in CONSUMERS
                for kind in ("recalled", "cold")
            },
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-spark", action="store_true", help="leave the Spark source out of read_paths")
    args = parser.parse_args()
    batches = make_values()
    encoded = [encode_batch(values) for values in batches]
    results: dict[str, object] = {
        "record_bytes": RECORD_BYTES,
        "batch_records": BATCH_RECORDS,
        "records": RECORDS,
        "repeats": REPEATS,
    }
    for mode, policy in MODES.items():
        results[mode] = measure_mode(policy, batches, encoded)
    spark = None if args.no_spark else session()
    results["read_paths"] = read_paths.measure(read_paths.RECORDS, read_paths.ROUNDS, spark)
    results["targets"] = {
        "produce_vs_raw": 0.7,
        "consume_vs_produce": 3.0,
        "read_paths.*.cold_vs_unchecked": 0.8,
    }
    json.dump(results, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
