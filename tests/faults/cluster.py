"""The partitioned cluster the scenarios run on, and a scenario's clients and final check.

`partitioned_cluster` builds the network (tests/faults/netns.py: the controller, three
SPUs and two client nodes, each a host of its own) and starts this checkout's controller
and SPUs on it; `Scenario` runs producers and committed readers on client nodes against a
topic of its own and, once healed, holds their history against the replicas' logs. The
suite's scenarios (test_partitions.py) and the randomized run (benchmarks/partitions.py)
share them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from contraflow.spu.client import SpuClient
from contraflow.spu.protocol.topics import TopicConfig
from tests.faults.history import CommittedReader, Producer, check
from tests.faults.netns import Network
from tests.spu.cluster_harness import CheckoutCluster, log_tails, partition_state, replica_log, wait_for

SESSION_S = 1.0
NODES = ["sc", "spu-0", "spu-1", "spu-2", "client", "near"]
CONFIG = TopicConfig(replication_factor=3, min_in_sync_replicas=2, replica_lag_time_max_ms=500)
WAIT_S = 30.0


class NamespacedCluster(CheckoutCluster):
    """A cluster of this checkout's contraflow whose members each run on their own node of
    `network`."""

    def __init__(self, root: Path, network: Network) -> None:
        self.network = network
        super().__init__(root, session_timeout=f"{SESSION_S:g}s")

    def host_of(self, name: str) -> str:
        return self.network.address(name)

    def command_of(self, name: str, args: list[str]) -> list[str]:
        return self.network.command(name, super().command_of(name, args))


@dataclass
class Setting:
    network: Network
    cluster: NamespacedCluster


@contextmanager
def partitioned_cluster(root: Path, extra_nodes: Sequence[str] = ()) -> Iterator[Setting]:
    """The network (NODES and `extra_nodes`) and the cluster on it, the calling thread a client
    on node "client" (its admin and metadata requests go from there); healed, stopped and
    removed on the way out."""
    network = Network([*NODES, *extra_nodes])
    token = os.environ.get("CONTRAFLOW_TOKEN")
    os.environ["CONTRAFLOW_TOKEN"] = "partition-tests"  # beyond loopback a token is required
    try:
        with network.inside("client"):
            cluster = NamespacedCluster(root, network)
            try:
                cluster.start(3)
                yield Setting(network, cluster)
            except BaseException:
                print(log_tails(cluster.root), file=sys.stderr)
                raise
            finally:
                network.heal()
                cluster.stop()
    finally:
        network.close()
        if token is None:
            del os.environ["CONTRAFLOW_TOKEN"]
        else:
            os.environ["CONTRAFLOW_TOKEN"] = token


class Scenario:
    """One topic, producers and committed readers on the given nodes, and the final check."""

    def __init__(self, setting: Setting, topic: str, producers: list[str], readers: list[str]) -> None:
        self.network, self.cluster, self.topic = setting.network, setting.cluster, topic
        with SpuClient(self.cluster.bootstrap) as admin:
            admin.create_topic(topic, CONFIG)
        boot = self.cluster.bootstrap
        self.producers = {n: Producer(self.network, n, boot, topic) for n in producers}
        self.readers = [CommittedReader(boot, topic, self.network, n) for n in readers]
        for thread in [*self.producers.values(), *self.readers]:
            thread.start()

    def state(self) -> tuple[int, int, list[int], list[int]]:
        return partition_state(self.cluster, self.topic)

    def wait_acks(self, node: str, since: float, count: int = 10) -> None:
        producer = self.producers[node]
        wait_for(f"{count} acks to {node}", lambda: len(producer.acks_since(since)) >= count, WAIT_S)

    def wait_in_sync(self) -> None:
        wait_for("three replicas in sync", lambda: len(self.state()[3]) == 3, WAIT_S)

    def finish(self) -> list[str]:
        """Stop writing, let the readers catch up, and check the history against the replicas:
        what went wrong (nothing: an empty list)."""
        for producer in self.producers.values():
            producer.stop.set()
            producer.join()
            if producer.error is not None:
                return [f"the producer on {producer.node} failed: {producer.error!r}"]
        self.wait_in_sync()
        with SpuClient(self.cluster.bootstrap) as client:
            end = client.list_offsets(self.topic, 0, "latest", isolation="committed") or 0
        for reader in self.readers:
            wait_for(
                f"the reader on {reader.node} to reach {end}", lambda r=reader: r.position >= end, WAIT_S
            )
            reader.stop.set()
            reader.join()
        paths = [self.cluster.root / f"spu-{n}" for n in range(3)]

        def replicas_equal() -> bool:
            logs = [replica_log(path, self.topic) for path in paths]
            return all(len(log) == end for log in logs) and logs[0] == logs[1] == logs[2]

        wait_for("identical replicas", replicas_equal, WAIT_S)
        replicas = [replica_log(path, self.topic) for path in paths]
        return check(list(self.producers.values()), self.readers, replicas)
