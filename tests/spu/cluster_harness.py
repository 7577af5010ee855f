"""Helpers for the cluster tests: a controller and SPUs as real processes on loopback,
and a replica's log read straight from its data directory."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from tests.cli_process import child_env

from contraflow.spu.cli.local_cluster import LocalCluster
from contraflow.spu.node.partitions import split_batches
from contraflow.spu.protocol.batch import BatchHeader, decode_batch
from contraflow.spu.protocol.topics import TopicConfig
from contraflow.spu.storage.store import Store

SESSION_TIMEOUT = "1s"


class CheckoutCluster(LocalCluster):
    """A local cluster whose processes import this checkout's contraflow, as the test does
    (`python -m contraflow` alone would import the interpreter's installed one: from a
    worktree, another checkout's SPU and controller)."""

    def command_of(self, name: str, args: list[str]) -> list[str]:
        return ["env", f"PYTHONPATH={child_env()['PYTHONPATH']}", *super().command_of(name, args)]

    def start(self, spus: int) -> None:
        """As `LocalCluster.start`, the SPUs started side by side: each spends a second or two
        importing before it is up, and every cluster test starts a cluster."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.start_controller()
        with ThreadPoolExecutor(spus) as pool:
            list(pool.map(self.start_spu, range(spus)))
        self._save()  # the process list with every SPU, whichever thread saved last
        self.wait_registered(spus)


@contextmanager
def local_cluster(root: Path, spus: int = 3, *, kafka: bool = False) -> Iterator[LocalCluster]:
    cluster = CheckoutCluster(root, session_timeout=SESSION_TIMEOUT, kafka=kafka)
    cluster.start(spus)
    try:
        yield cluster
    except BaseException:
        print(log_tails(cluster.root), file=sys.stderr)  # shown with the failure
        raise
    finally:
        cluster.stop()


def log_tails(root: Path, lines: int = 40) -> str:
    """The last lines of each cluster process's log: what a failure report needs to say why."""
    parts = []
    for path in sorted(root.glob("*.log")):
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        parts.append("\n".join([f"--- {path.name} (last {len(tail)} lines)", *tail]))
    return "\n".join(parts)


def partition_state(
    cluster: LocalCluster, topic: str, partition: int = 0
) -> tuple[int, int, list[int], list[int]]:
    """(leader, epoch, replicas, in-sync replicas) as the controller has them."""
    leader, epoch, replicas, isr = cluster.metadata()["topics"][topic]["partitions"][partition]
    return int(leader), int(epoch), list(replicas), sorted(isr)


# Generous: late in a full suite on a loaded box, one replica applied a topic's deletion 30 s
# after the other two (its heartbeats stopped meanwhile, so one metadata apply was stuck; the
# cause was not found). Waiting longer costs nothing when the check passes sooner.
WAIT_S = 90.0


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


Entry = tuple[int, int, bytes]  # offset, leader epoch of its batch, value


def replica_log(data_dir: Path, topic: str, partition: int = 0) -> list[Entry]:
    """Every record of a replica with its offset and epoch (read-only: the SPU may run)."""
    store = Store(data_dir, read_only=True)
    try:
        part = store.partition(topic, partition)
        out: list[Entry] = []
        offset = part.log_start_offset
        while True:
            result = part.read(offset, 1 << 22, isolation="uncommitted")
            if not result.batches:
                return out
            for view in result.batches:
                batch = decode_batch(view)
                epoch = batch.header.leader_epoch
                out.extend((o, epoch, bytes(v)) for o, v in zip(batch.offsets(), batch.values(), strict=True))
            offset = result.next_offset
    finally:
        store.close()


def lose_unflushed_tail(data_dir: Path, topic: str, keep: int, partition: int = 0) -> None:
    """Cut a stopped replica's log from the batch at or after offset `keep` on: what a power
    loss takes of bytes the flush policy left in the page cache (a SIGKILL alone loses none)."""
    segment = sorted((data_dir / "topics" / topic / str(partition)).glob("*.log"))[-1]
    kept = [
        b
        for b in split_batches(memoryview(segment.read_bytes()), verify=True)
        if BatchHeader.parse(b).base_offset < keep
    ]
    position = sum(len(b) for b in kept)
    assert position < segment.stat().st_size, f"nothing at or after offset {keep} to lose in {segment}"
    with open(segment, "r+b") as file:
        file.truncate(position)


# A partition on three SPUs, two of them enough to write.
REPLICATED = TopicConfig(
    partitions=1, replication_factor=3, min_in_sync_replicas=2, replica_lag_time_max_ms=1000
)


def values(n: int, prefix: str = "r") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]
