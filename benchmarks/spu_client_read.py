"""CPU of the SPU client's read path: 4 MiB fetch answers from a real SPU on loopback.

`python benchmarks/spu_client_read.py [--mib N] [--rounds R] [--baseline-src DIR]`

One SPU child (`EmbeddedSpu`, process mode) serves a 32 MiB topic. Each sample is a
client process that imports contraflow from a given `src` directory (this checkout's,
and `--baseline-src`'s, e.g. main's snapshot), opens a connection, fetches 4 MiB raw
answers (`AsyncSpuClient.request(FETCH)`, no batch decoding) until N MiB arrived and
reports its own CPU seconds (all threads, `process_time`) over the fetches. The trees
alternate round by round so both see the same load; printed: CPU microseconds per MiB
of each (median of the rounds), and the ratio of this checkout's to the baseline's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE_SRC = Path(__file__).resolve().parent.parent / "src"
TOPIC = "bench"
FETCH_BYTES = 4 << 20
LOG_BYTES = 32 << 20
RECORD_BYTES = 200
BATCH_RECORDS = 1000


def client_sample(addr: str, mib: int) -> dict[str, float]:
    """In the client process: CPU and wall seconds of fetching `mib` MiB in 4 MiB answers."""
    import asyncio
    import time

    from contraflow.spu.client.aio import AsyncSpuClient
    from contraflow.spu.protocol import ApiKey

    async def run() -> dict[str, float]:
        async with AsyncSpuClient(addr) as client:
            fields = {
                "topic": TOPIC,
                "partition": 0,
                "offset": 0,
                "max_bytes": FETCH_BYTES,
                "isolation": "committed",
            }
            await client.request(ApiKey.FETCH, dict(fields))  # the connection open, the pages warm
            received = 0
            cpu0, wall0 = time.process_time(), time.perf_counter()
            while received < mib << 20:
                response = await client.request(ApiKey.FETCH, dict(fields))
                received += len(response.payload)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            return {"cpu_s": cpu, "wall_s": wall, "mib": received / (1 << 20)}

    return asyncio.run(run())


def write_topic(data_dir: Path) -> None:
    from contraflow.spu.api import LocalLog
    from contraflow.spu.protocol.batch import encode_batch

    with LocalLog(data_dir) as log:
        log.create_topic(TOPIC)
        for b in range(LOG_BYTES // (RECORD_BYTES * BATCH_RECORDS)):
            values = [
                (b"%012d" % (b * BATCH_RECORDS + i)).ljust(RECORD_BYTES, b"x") for i in range(BATCH_RECORDS)
            ]
            log.produce_encoded(TOPIC, 0, encode_batch(values))


def sample(src: Path, addr: str, mib: int) -> dict[str, float]:
    """One client process importing contraflow from `src`."""
    out = subprocess.run(
        [sys.executable, __file__, "--client", addr, "--src", str(src), "--mib", str(mib)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-src", type=Path, default=None)
    parser.add_argument("--client", default=None)
    parser.add_argument("--src", type=Path, default=HERE_SRC)
    args = parser.parse_args()
    sys.path.insert(0, str(args.src))
    if args.client:
        import contraflow

        assert Path(contraflow.__file__).resolve().is_relative_to(args.src.resolve()), contraflow.__file__
        print(json.dumps(client_sample(args.client, args.mib)))
        return

    from contraflow.spu.embedded import EmbeddedSpu

    os.environ["PYTHONPATH"] = str(HERE_SRC)  # the SPU child runs this checkout's server
    trees = {"this": HERE_SRC} | ({"baseline": args.baseline_src.resolve()} if args.baseline_src else {})
    samples: dict[str, list[float]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        write_topic(Path(tmp))
        with EmbeddedSpu(Path(tmp), mode="process") as spu:
            for _ in range(args.rounds):
                for name, src in trees.items():
                    found = sample(src, spu.addr, args.mib)
                    samples[name].append(found["cpu_s"] * 1e6 / found["mib"])
    result: dict[str, object] = {
        "fetch_bytes": FETCH_BYTES,
        "mib_per_sample": args.mib,
        "load_average": os.getloadavg(),
    }
    for name, values in samples.items():
        result[f"{name}_cpu_us_per_mib"] = round(statistics.median(values), 1)
        result[f"{name}_samples"] = [round(v, 1) for v in values]
    if args.baseline_src:
        result["this_vs_baseline"] = round(
            statistics.median(samples["this"]) / statistics.median(samples["baseline"]), 3
        )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
