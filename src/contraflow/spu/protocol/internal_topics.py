"""The cluster's own topics and how a cluster replicates the topics nobody sized.

Consumer offsets and control values live in one-partition internal topics
(`node/replication/tables.py` serves them); clients send those requests to the leader of
the topic's partition 0. Topics a cluster creates for itself, and the ones the
runtime creates for a flow's channels, get min(3, SPUs) replicas, min(2,
replicas) of them in sync for acks=all: one SPU may be lost without losing an
acknowledged write or stopping writes.
"""

from __future__ import annotations

import dataclasses

from contraflow.spu.protocol.topics import TopicConfig

OFFSETS_TOPIC = "contraflow.consumer-offsets"
CONTROL_TOPIC = "contraflow.control-values"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, CONTROL_TOPIC})
REPLICAS = 3
IN_SYNC = 2


def cluster_replication(config: TopicConfig, spus: int) -> TopicConfig:
    """`config` with min(3, spus) replicas, min(2, replicas) of them in sync."""
    factor = max(1, min(REPLICAS, spus))
    return dataclasses.replace(config, replication_factor=factor, min_in_sync_replicas=min(IN_SYNC, factor))
