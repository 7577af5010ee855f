"""Where a cluster client sends a partition's requests: its leader, from metadata.

A client is given bootstrap addresses (`--spu A,B,C`). The first request that
concerns a partition asks one of them for METADATA: a lone SPU answers that it
is alone (everything then goes to it, as always); a cluster SPU answers the
controller's metadata, from which the client picks each partition's leader.
When a leader answers NOT_LEADER, or cannot be reached, the client asks every
SPU it knows for fresh metadata and keeps the newest version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contraflow.spu.protocol import ApiKey
from contraflow.spu.protocol.cluster_metadata import NO_LEADER, ClusterMetadata
from contraflow.spu.protocol.internal_topics import CONTROL_TOPIC, OFFSETS_TOPIC

# Requests about one partition's records: in a cluster they go to its leader.
# Exactly-once staging and commits too: the leader appends them.
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
        ApiKey.TXN_COMMIT,  # a cluster commits per partition (`cluster_commits`)
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


@dataclass
class Routes:
    """What a client knows of the cluster; `cluster` False: a lone SPU."""

    cluster: bool
    metadata: ClusterMetadata = field(default_factory=ClusterMetadata)

    @classmethod
    def from_answer(cls, fields: dict[str, Any]) -> Routes:
        if not fields.get("cluster"):
            return cls(False)
        return cls(True, ClusterMetadata.from_dict(fields["metadata"]))

    def leader_addr(self, topic: str, partition: int) -> str | None:
        """The public address of the partition's leader, None if unknown or offline."""
        state = self.metadata.partition(topic, partition)
        if state is None or state.leader == NO_LEADER:
            return None
        spu = self.metadata.spus.get(state.leader)
        return None if spu is None else spu.public_addr

    def known_addrs(self) -> list[str]:
        return [s.public_addr for s in self.metadata.spus.values()]
