"""`kafka_producer`: events as records of a Kafka topic (librdkafka).

Config (Tremor's names): `brokers` (list of "host:port"), `topic`, `key`
(optional, the key of every record), `rdkafka_options` (librdkafka settings,
over the defaults: idempotence on, so librdkafka's retries never duplicate).

Per event, `$kafka_producer` may set `key` (string), `headers` (record of
name -> string), `partition` (integer; otherwise librdkafka's partitioner
picks one from the key) and `timestamp` (ms since the epoch). The record's
value is the event's encoded frames.

`send` returns once the broker acknowledged every record of the batch. A record
the broker refused fails the batch (`DeliveryFailed`, retried by the runtime);
brokers out of reach until the delivery timeout raise `ConnectionLost`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from contraflow.connectors.base import (
    ConnectionLost,
    Connector,
    ConnectorContext,
    DeliveryFailed,
    SinkEvent,
    register,
)
from contraflow.connectors.base.kafka_options import brokers, client_id, rdkafka_options
from contraflow.connectors.base.options import ConfigReader

DELIVERY_TIMEOUT_MS = 30_000
UNREACHABLE = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._MSG_TIMED_OUT})


@dataclass(frozen=True)
class ProducerOptions:
    settings: dict[str, str]
    topic: str
    key: str | None

    @classmethod
    def read(cls, cfg: ConfigReader) -> ProducerOptions:
        settings = {
            "bootstrap.servers": brokers(cfg),
            "enable.idempotence": "true",
            "linger.ms": "5",
            "message.timeout.ms": str(DELIVERY_TIMEOUT_MS),
        }
        settings.update(rdkafka_options(cfg, cfg.config.get("rdkafka_options", {})))
        key = cfg.string("key") if "key" in cfg.config else None
        return cls(settings, cfg.string("topic"), key)


def _record_fields(event: SinkEvent, default_key: str | None) -> dict[str, Any]:
    """Key, headers, partition and timestamp of one record from `$kafka_producer`."""
    meta = event.meta.get("kafka_producer")
    meta = meta if isinstance(meta, dict) else {}
    fields: dict[str, Any] = {}
    key = meta.get("key", default_key)
    if isinstance(key, str):
        fields["key"] = key.encode()
    headers = meta.get("headers")
    if isinstance(headers, dict):
        fields["headers"] = [(str(k), None if v is None else str(v).encode()) for k, v in headers.items()]
    if isinstance(meta.get("partition"), int) and not isinstance(meta.get("partition"), bool):
        fields["partition"] = meta["partition"]
    if isinstance(meta.get("timestamp"), int):
        fields["timestamp"] = meta["timestamp"]
    return fields


@register("kafka_producer")
class KafkaProducerConnector(Connector[ProducerOptions]):
    config_keys = frozenset({"brokers", "topic", "key", "rdkafka_options"})
    required_keys = frozenset({"brokers", "topic"})

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self._producer: Producer | None = None

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> ProducerOptions:
        return ProducerOptions.read(cfg)

    async def connect(self) -> None:
        if self._producer is None:
            try:
                self._producer = Producer(
                    {**client_id(self.ctx), **self.options.settings, "logger": self.ctx.logger}
                )
            except KafkaException as err:
                raise ConnectionLost(f"kafka producer: {err}") from err

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await asyncio.to_thread(producer.flush, DELIVERY_TIMEOUT_MS / 1000)

    async def send(self, events: Sequence[SinkEvent]) -> None:
        if self._producer is None:
            raise ConnectionLost("kafka producer not connected")
        errors = await asyncio.to_thread(self._deliver, self._producer, list(events))
        if not errors:
            return
        first = errors[0]
        if first.code() in UNREACHABLE:
            raise ConnectionLost(f"kafka producer: {first}")
        raise DeliveryFailed(
            f"kafka producer: {len(errors)} record(s) refused: {first}", retryable=first.retriable()
        )

    def _deliver(self, producer: Producer, events: list[SinkEvent]) -> list[KafkaError]:
        """Worker thread: produce the batch and wait for every delivery report."""
        errors: list[KafkaError] = []

        def report(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                errors.append(err)

        topic, default_key = self.options.topic, self.options.key
        for event in events:
            value = event.frames[0] if len(event.frames) == 1 else b"".join(event.frames)
            fields = _record_fields(event, default_key)
            while True:
                try:
                    producer.produce(topic, value, on_delivery=report, **fields)
                    break
                except BufferError:  # librdkafka's queue is full: let deliveries drain it
                    producer.poll(0.05)
        producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 5)
        return errors
