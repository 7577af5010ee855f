"""Staging memory: what an SPU holds while many connections stage one large transaction (issue 32).

Each run starts `contraflow spu run` as a child process, has CONNECTIONS clients
each stage MIB_PER_CONNECTION MiB (1 MiB record batches, under the per-connection
limit) into one (producer, batch), reads the SPU's peak RSS (VmHWM), then
commits and checks that every record is in the log. Two runs side by side: the
baseline keeps all staging in memory (`--staged-memory` above what is staged, as
every SPU did before staging spilled), the other spills past `--staged-memory
16MiB` (the default is 64 MiB). Prints one JSON object: per run the MiB staged,
peak RSS, staging and commit seconds; and the ratios spill / in memory.

Run: PYTHONPATH=src python benchmarks/staging_memory.py [--connections 8] [--mib 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from contraflow.spu.client import AsyncSpuClient
from contraflow.spu.protocol.batch import encode_batch
from contraflow.spu.protocol.topics import TopicConfig

RECORD_BYTES = 4096
BATCH_RECORDS = 256  # 1 MiB batches
SPILL_PAST = "16MiB"


def peak_rss_mib(pid: int) -> float:
    """The process's high-water mark of resident memory."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for {pid}")


def start_spu(data_dir: Path, staged_memory: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "contraflow", "spu", "run", "--data-dir", str(data_dir)]
        + ["--public-addr", "127.0.0.1:0", "--private-addr", "127.0.0.1:0", "--no-scrub"]
        + ["--staged-memory", staged_memory],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("spu ready"):
        proc.kill()
        raise RuntimeError(f"the SPU did not start: {line!r}")
    return proc, line.split("public=")[1].split()[0]


async def stage_and_commit(addr: str, connections: int, mib: int) -> dict[str, float]:
    batch = bytes(encode_batch([b"r" * RECORD_BYTES] * BATCH_RECORDS))
    clients = [AsyncSpuClient(addr) for _ in range(connections)]
    try:
        await clients[0].create_topic("out", TopicConfig(partitions=connections))

        async def stage(n: int, client: AsyncSpuClient) -> None:
            for sequence in range(mib):
                await client.stage("bench", 1, "out", n, batch, writer=f"w{n}", sequence=sequence)

        start = time.perf_counter()
        await asyncio.gather(*(stage(n, c) for n, c in enumerate(clients)))
        staged = time.perf_counter() - start
        start = time.perf_counter()
        ends = await clients[0].commit("bench", 1, expected_batches=connections * mib)
        committed = time.perf_counter() - start
        assert all(end == mib * BATCH_RECORDS for end in ends.values()), ends
        return {"stage_s": round(staged, 3), "commit_s": round(committed, 3)}
    finally:
        for c in clients:
            await c.close()


def run(staged_memory: str, connections: int, mib: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="staging-memory-") as tmp:
        proc, addr = start_spu(Path(tmp), staged_memory)
        try:
            idle = peak_rss_mib(proc.pid)
            times = asyncio.run(stage_and_commit(addr, connections, mib))
            peak = peak_rss_mib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)
    return {
        "staged_memory": staged_memory,
        "staged_mib": connections * mib,
        "idle_rss_mib": round(idle, 1),
    } | {
        "peak_rss_mib": round(peak, 1),
        **times,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--mib", type=int, default=32, help="MiB each connection stages (< 64)")
    args = parser.parse_args()
    in_memory = run(f"{args.connections * args.mib * 2}MiB", args.connections, args.mib)
    spilled = run(SPILL_PAST, args.connections, args.mib)
    print(
        json.dumps(
            {
                "in_memory": in_memory,
                "spilled": spilled,
                "peak_rss_ratio": round(spilled["peak_rss_mib"] / in_memory["peak_rss_mib"], 3),
                "stage_s_ratio": round(spilled["stage_s"] / in_memory["stage_s"], 3),
                "commit_s_ratio": round(spilled["commit_s"] / in_memory["commit_s"], 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
