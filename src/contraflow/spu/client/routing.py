"""Where a cluster client sends a partition's requests: its leader, from metadata.

A client is given bootstrap addresses (`--spu A,B,C`). The first request that
concerns a partition asks one of them for METADATA: a lone SPU answers that it
is alone (everything then goes to it, as always); a cluster SPU answers the
controller's metadata, from which the client picks each partition's leader.
When a leader answers NOT_LEADER, or cannot be reached, the client asks every
SPU it knows for fresh metadata and keeps the newest version.

What differs between talking to a lone SPU and to a cluster is decided once, by
the kind of `Routes` the first METADATA answer makes, and asked of it by what it
means (how long a request is retried, whom to ask for fresh metadata, what acks
make an append durable): the client never tests which kind it has.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from contraflow.spu.protocol import Acks, ApiKey
from contraflow.spu.protocol.cluster_metadata import NO_LEADER, ClusterMetadata
from contraflow.spu.protocol.internal_topics import CONTROL_TOPIC, OFFSETS_TOPIC, cluster_replication
from contraflow.spu.protocol.topics import TopicConfig, TopicPartition
from contraflow.spu.rpc.client import RetryPolicy

# Requests about one partition's records: in a cluster they go to its leader.
# Exactly-once staging too (commits group partitions by leader: `exactly_once.commits`).
ROUTED_APIS = frozenset(
    {
        ApiKey.PRODUCE,
        ApiKey.FETCH,
        ApiKey.STREAM_FETCH,
        ApiKey.LIST_OFFSETS,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.CONTROL_SET,
        ApiKey.CONTROL_GET,
        ApiKey.TXN_STAGE,
    }
)
# ... except these, which go to the leader of the replicated table that holds them.
TABLE_OF_API = {
    ApiKey.OFFSET_COMMIT: OFFSETS_TOPIC,
    ApiKey.OFFSET_FETCH: OFFSETS_TOPIC,
    ApiKey.CONTROL_SET: CONTROL_TOPIC,
    ApiKey.CONTROL_GET: CONTROL_TOPIC,
}


def route_of(api: ApiKey, fields: dict[str, Any]) -> tuple[str, int]:
    """The partition whose leader serves this request in a cluster."""
    table = TABLE_OF_API.get(api)
    return (fields["topic"], fields["partition"]) if table is None else (table, 0)


def split_bootstrap(addr: str) -> list[str]:
    """`A,B,C` as a list (a bad or empty address fails when it is first connected to)."""
    return [a.strip() for a in addr.split(",") if a.strip()] or [addr]


def _doubling_until(deadline: float, policy: RetryPolicy) -> Iterator[float]:
    delay = policy.initial_s
    while time.monotonic() + delay <= deadline:
        yield delay * random.uniform(0.5, 1.0)
        delay = min(policy.max_s, delay * 2)


@dataclass
class Routes:
    """What a client knows of a cluster: each partition's leader, from the controller's metadata."""

    metadata: ClusterMetadata = field(default_factory=ClusterMetadata)
    # The acks at which an append outlives its SPU's crash: a new leader has only what the
    # in-sync replicas copied.
    durable_acks: ClassVar[Acks] = Acks.COMMITTED
    # Whether the leaders recognise a retried produce by its (producer id, sequence): after a
    # failover the retry may reach a new leader, which must not append it again.
    recognises_retries: ClassVar[bool] = True

    @staticmethod
    def from_answer(fields: dict[str, Any], addr: str) -> Routes:
        """What the SPU at `addr` answered to METADATA."""
        if not fields.get("cluster"):
            return LoneRoutes(addr=addr)
        return Routes(ClusterMetadata.from_dict(fields["metadata"]))

    def leader_addr(self, topic: str, partition: int) -> str | None:
        """The public address of the partition's leader, None if unknown or offline."""
        state = self.metadata.partition(topic, partition)
        if state is None or state.leader == NO_LEADER:
            return None
        spu = self.metadata.spus.get(state.leader)
        return None if spu is None else spu.public_addr

    def known_addrs(self) -> list[str]:
        return [s.public_addr for s in self.metadata.spus.values()]

    def metadata_addrs(self, bootstrap: Iterable[str]) -> list[str]:
        """Whom to ask for fresh metadata: every SPU known, and the bootstrap ones."""
        return list(dict.fromkeys([*self.known_addrs(), *bootstrap]))

    def retry_delays(self, policy: RetryPolicy, failover_s: float) -> Iterator[float]:
        """The waits before each new attempt at a partition's request: doubling (with jitter)
        until `failover_s` from now, long enough for an election."""
        return _doubling_until(time.monotonic() + failover_s, policy)

    def replicated(self, config: TopicConfig) -> TopicConfig:
        """`config` replicated as the cluster replicates its own topics (min(3, SPUs)
        replicas, min(2, replicas) in sync)."""
        return cluster_replication(config, len(self.metadata.spus))

    def partitions(self, topics: Iterable[str] | None = None) -> set[TopicPartition]:
        """The partitions the metadata names (of `topics`, default all)."""
        named = self.metadata.topics if topics is None else set(topics)
        return {
            (name, n)
            for name, record in self.metadata.topics.items()
            if name in named
            for n in range(len(record.partitions))
        }

    def by_leader(self, partitions: Iterable[TopicPartition]) -> dict[str, list[TopicPartition]]:
        """The partitions grouped by their leader's address (those without one left out)."""
        groups: dict[str, list[TopicPartition]] = {}
        for tp in partitions:
            addr = self.leader_addr(*tp)
            if addr is not None:
                groups.setdefault(addr, []).append(tp)
        return groups

    def answering(self, partitions: Iterable[TopicPartition]) -> set[str]:
        """The SPUs that answer for these partitions: their leaders."""
        return set(self.by_leader(partitions))


@dataclass
class LoneRoutes(Routes):
    """A lone SPU: the cluster of one that leads every partition, so a client's requests
    and exactly-once commits take one path whether it talks to one SPU or to a cluster.
    It has no metadata naming its partitions; it answers for all of them."""

    addr: str = ""
    # Its page cache outlives the process: COMMITTED would only add an fsync per produce.
    durable_acks: ClassVar[Acks] = Acks.LEADER
    # It keeps no table of SPU producers (no failover sends a retry elsewhere): numbering a
    # batch would only cost its CRC again.
    recognises_retries: ClassVar[bool] = False

    def leader_addr(self, topic: str, partition: int) -> str | None:
        return self.addr

    def known_addrs(self) -> list[str]:
        return [self.addr]

    def metadata_addrs(self, bootstrap: Iterable[str]) -> list[str]:
        """None: a lone SPU's routes never change."""
        return []

    def retry_delays(self, policy: RetryPolicy, failover_s: float) -> Iterator[float]:
        """The client's retry policy: there is no election to wait through."""
        return iter(policy.delays())

    def replicated(self, config: TopicConfig) -> TopicConfig:
        """As it is: one SPU holds one copy."""
        return config

    def answering(self, partitions: Iterable[TopicPartition]) -> set[str]:
        return {self.addr}
