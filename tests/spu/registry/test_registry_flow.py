"""A flow between Kafka clients: Avro in through the SPU's Kafka listener, a field changed in
tremor-script, Avro out under a newer, compatible version of the output subject."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from tests.runtime.harness import running

from contraflow.spu.embedded import EmbeddedSpu

USER = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
USER_WITH_EMAIL = {**USER, "fields": [*USER["fields"], {"name": "email", "type": "string", "default": ""}]}


def troy(brokers: str, registry: str) -> str:
    avro_in = json.dumps({"name": "avro", "config": {"registry": registry}})
    avro_out = json.dumps({"name": "avro", "config": {"registry": registry, "subject": "users-out-value"}})
    return f"""
define flow avro_users
flow
  define connector input from kafka_consumer
  with
    codec = {avro_in},
    config = {{"brokers": ["{brokers}"], "group_id": "avro-users", "topics": ["users-in"]}}
  end;
  define connector output from kafka_producer
  with
    codec = {avro_out},
    config = {{"brokers": ["{brokers}"], "topic": "users-out"}}
  end;
  define pipeline adults
  pipeline
    select {{"name": string::uppercase(event.name), "age": event.age + 1, "email": "#{{event.name}}@example.com"}}
    from in where event.age >= 18 into out;
  end;
  create connector input;
  create connector output;
  create pipeline adults;
  connect /connector/input to /pipeline/adults;
  connect /pipeline/adults to /connector/output;
end;
deploy flow avro_users;
"""


def produce_users(brokers: str, client: SchemaRegistryClient, users: list[dict[str, Any]]) -> None:
    serialize = AvroSerializer(client, json.dumps(USER))
    producer = Producer({"bootstrap.servers": brokers})
    for user in users:
        producer.produce("users-in", serialize(user, SerializationContext("users-in", MessageField.VALUE)))
    assert producer.flush(20) == 0


async def consume_users(brokers: str, client: SchemaRegistryClient, count: int) -> list[tuple[int, Any]]:
    """(schema id, value) of the first `count` records of users-out, polled without blocking the loop."""
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "check"})
    consumer.assign([TopicPartition("users-out", 0, 0)])  # no group to join: read from the start
    deserialize = AvroDeserializer(client)
    got: list[tuple[int, Any]] = []
    try:
        for _ in range(900):
            message = await asyncio.to_thread(consumer.poll, 0.1)
            if message is not None and message.error() is None:
                value = message.value()
                context = SerializationContext("users-out", MessageField.VALUE)
                got.append((int.from_bytes(value[1:5], "big"), deserialize(value, context)))
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return got


def test_a_flow_decodes_avro_changes_a_field_and_encodes_a_newer_version(
    registry_spu: EmbeddedSpu, registry_url: str, spark: Any, tmp_path: Path
) -> None:
    brokers = registry_spu.kafka_addr
    client = SchemaRegistryClient({"url": registry_url})
    client.register_schema("users-out-value", Schema(json.dumps(USER), "AVRO"))
    newer = client.register_schema("users-out-value", Schema(json.dumps(USER_WITH_EMAIL), "AVRO"))
    users = [{"name": "ada", "age": 36}, {"name": "tim", "age": 9}, {"name": "bob", "age": 18}]
    produce_users(brokers, client, users)

    async def body() -> list[tuple[int, Any]]:
        async with running(registry_spu.addr, spark, tmp_path, troy(brokers, registry_url)):
            return await consume_users(brokers, client, 2)

    assert asyncio.run(body()) == [
        (newer, {"name": "ADA", "age": 37, "email": "ada@example.com"}),
        (newer, {"name": "BOB", "age": 19, "email": "bob@example.com"}),
    ]
