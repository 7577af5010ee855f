"""A flow on hosts of its own (issue 32): `contraflow run FLOW --spu A,B,C` on a `runtime` node of
the partition harness's network, its local Spark there too or a Spark standalone master and
workers on nodes of their own, and the cut between the runtime and the leader of the flow's
`passed` channel, then (the suite's test) the SIGKILL of that leader mid-stream and its
restart. The suite's test (the last of test_partitions.py) and the longer run
(benchmarks/flow_partition.py) share it.

The flow is the cluster flow of tests/spu/flow_harness.py: topic `in` passed through to
`passed` and counted per group in windows of 10 into `counted` (a stateful pipeline), every
edge a three-replica `log` topic; its checker is `assert_exactly_once` there.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from contraflow.spark.standalone import Host, StandaloneCluster
from contraflow.spu.client import SpuClient
from tests.e2e.run_process import RunProcess
from tests.faults.cluster import WAIT_S, Setting
from tests.faults.netns import Network
from tests.spu.cluster_harness import partition_state, wait_for
from tests.spu.flow_harness import (
    WARM_UP,
    Feeder,
    counted_windows,
    everything_out,
    expected_windows,
    feed_mid_stream,
    passed_numbers,
    read_topic,
    warm_up,
    write_flow,
)

RUNTIME = "runtime"
MASTER = "master"
WORKERS = ["worker-0", "worker-1"]


def host(network: Network, node: str) -> Host:
    return Host(network.address(node), tuple(network.command(node, [])))


@contextmanager
def spark_cluster(network: Network, work_dir: Path, worker_timeout_s: int) -> Iterator[StandaloneCluster]:
    """The standalone master and two one-core workers, each on its own node."""
    with StandaloneCluster(
        work_dir,
        master_host=host(network, MASTER),
        worker_hosts=[host(network, w) for w in WORKERS],
        worker_timeout_s=worker_timeout_s,
    ) as spark:
        yield spark


def start_runtime(setting: Setting, tmp: Path, spark: StandaloneCluster | None) -> RunProcess:
    """`contraflow run` of the flow on the runtime node (its JVM and Python workers live there
    too), its data directory (the checkpoints) at `tmp / "data"`: the namespaces share one file
    system, so every node sees it at that path."""
    flow_args = ["--spu", setting.cluster.bootstrap]
    # Local Spark stays on the node's loopback; a driver of the standalone master finds the
    # runtime's address by itself (the route to the master), and the executors reach it there.
    env = {} if spark else {"SPARK_LOCAL_IP": "127.0.0.1"}
    if spark:
        flow_args += ["--master", spark.master_url]
    with setting.network.inside(RUNTIME):
        return RunProcess(
            write_flow(tmp, shipped=spark is not None),  # a cluster's executors get it zipped
            tmp / "data",
            tmp,
            tmp / "run.log",
            *flow_args,
            env=env,
        )


def windows(client: SpuClient) -> int:
    return sum(map(len, counted_windows(client).values()))


def warm_up_flow(setting: Setting, run: RunProcess, client: SpuClient, timeout_s: float) -> None:
    """The first WARM_UP events through both pipelines: `count`'s first micro-batch (its Python
    workers, its state store: the slow one) is done, so a cut falls on a flow that streams."""
    warm_up(setting.cluster.bootstrap, run, client)
    warm = sum(map(len, expected_windows(WARM_UP).values()))
    run.wait_until(lambda: windows(client) >= warm, timeout_s, "the warm-up's windows")


@dataclass(frozen=True)
class Feed:
    """The input after the warm-up: events WARM_UP..`events`-1 at `per_second`, the first
    `before_cut` of them before the cut, the rest while it lasts."""

    events: int
    before_cut: int
    per_second: float


def cut_from_leader(
    setting: Setting, run: RunProcess, client: SpuClient, feed: Feed, cut_s: float, timeout_s: float
) -> dict[str, object]:
    """Once the flow outputs events fed after the warm-up, cut the runtime from the leader of
    `passed` both ways, feed the rest meanwhile, heal after `cut_s` (also when something fails),
    and wait for everything to come out; what happened, as figures."""
    network, cluster = setting.network, setting.cluster
    held = feed.events - WARM_UP - feed.before_cut
    feeder = Feeder(cluster.bootstrap, WARM_UP, feed.events, feed.per_second, held=held)
    feeder.start()
    midway = WARM_UP + feed.before_cut // 2
    run.wait_until(lambda: len(passed_numbers(client)) >= midway, timeout_s, "events after the warm-up")
    assert feeder.is_alive(), "the input ended before the cut"
    leaders = {t: f"spu-{partition_state(cluster, t)[0]}" for t in ("in", "passed", "counted")}
    before = _progress(client)
    network.split([RUNTIME], [leaders["passed"]])
    try:
        cut_at = time.monotonic()
        feeder.release.set()  # the rest of the input arrives while the link is cut
        wait_for(f"{cut_s:g}s cut", lambda: time.monotonic() >= cut_at + cut_s, cut_s + 1)
        during = _progress(client)
    finally:
        network.heal()
    healed_at = time.monotonic()
    feeder.finish(timeout_s)
    run.wait_until(lambda: everything_out(client, feed.events), timeout_s, "every event and window")
    return {
        "cut": [RUNTIME, leaders["passed"]],
        "seconds": cut_s,
        "leaders": leaders,
        # written to `in` and to `passed` while cut: the input went on, the sink stood still
        "fed_while_cut": during[0] - before[0],
        "passed_while_cut": during[1] - before[1],
        "windows_while_cut": during[2] - before[2],
        "out_after_heal_s": round(time.monotonic() - healed_at, 1),
    }


def kill_leader_mid_stream(
    setting: Setting, run: RunProcess, client: SpuClient, first: int, events: int, timeout_s: float
) -> int:
    """Feed events `first`..`events`-1 at 100/s, the second half once the SPU is back (the input
    goes on after the kill); once the flow outputs some of them, SIGKILL the SPU leading `passed`,
    restart it once another leads, and wait for everything to come out: the killed SPU's id. The
    sink's commits in flight went to a dead leader and must land once on the next."""
    cluster = setting.cluster
    held = (events - first) // 2
    feeder = feed_mid_stream(cluster.bootstrap, run, client, events, first=first, held=held)
    leader = partition_state(cluster, "passed")[0]
    cluster.signal(f"spu-{leader}", signal.SIGKILL)

    def another_leads() -> bool:
        return partition_state(cluster, "passed")[0] not in (-1, leader)

    wait_for("another leader of passed", another_leads, WAIT_S)
    cluster.start_spu(leader)
    feeder.finish(timeout_s)
    run.wait_until(lambda: everything_out(client, events), timeout_s, "every event and window")
    return leader


def _progress(client: SpuClient) -> tuple[int, int, int]:
    """Events in `in`, events in `passed`, windows in `counted`."""
    return len(read_topic(client, "in")), len(passed_numbers(client)), windows(client)


def listening_beyond(network: Network, nodes: list[str]) -> list[str]:
    """Sockets listening on the nodes on anything but the node's own address or loopback
    (0.0.0.0 would be one): none expected."""
    beyond = []
    for node in nodes:
        listing = subprocess.run(
            network.command(node, ["ss", "-ltnH"]), capture_output=True, text=True, check=True
        ).stdout
        for line in listing.splitlines():
            local = line.split()[3].rsplit(":", 1)[0].strip("[]").removeprefix("::ffff:")
            if local not in (network.address(node), "127.0.0.1"):
                beyond.append(f"{node} {line.split()[3]}")
    return beyond
