"""The registry over an SPU cluster: its topic is replicated, and what it answered outlives the
SIGKILL of the topic's leader."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from tests.spu.cluster_harness import local_cluster, partition_state

from contraflow.spu.registry import ThreadedRegistry
from contraflow.spu.registry.topic import SCHEMAS_TOPIC

USER = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
USER_V2 = {**USER, "fields": [*USER["fields"], {"name": "age", "type": "int", "default": 0}]}


def test_the_registry_keeps_what_it_answered_when_the_topic_leader_is_sigkilled(tmp_path: Path) -> None:
    with local_cluster(tmp_path) as cluster:
        registry = ThreadedRegistry(cluster.bootstrap)
        try:
            client = SchemaRegistryClient({"url": registry.url})
            first = client.register_schema("users-value", Schema(json.dumps(USER), "AVRO"))
            client.set_compatibility("users-value", "FULL")
            leader, epoch, replicas, isr = partition_state(cluster, SCHEMAS_TOPIC)
            assert sorted(replicas) == [0, 1, 2] and len(isr) >= 2
            cluster.signal(f"spu-{leader}", signal.SIGKILL)
            # the registry's client follows the election; a write after it lands on the new leader
            second = client.register_schema("users-value", Schema(json.dumps(USER_V2), "AVRO"))
            assert partition_state(cluster, SCHEMAS_TOPIC)[:2] != (leader, epoch)
        finally:
            registry.stop()
        fresh = ThreadedRegistry(cluster.bootstrap)  # another registry: all it knows is the log
        try:
            client = SchemaRegistryClient({"url": fresh.url})
            assert client.get_versions("users-value") == [1, 2]
            assert client.get_latest_version("users-value").schema_id == second != first
            assert client.get_compatibility("users-value") == "FULL"
        finally:
            fresh.stop()
