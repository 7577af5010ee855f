"""`kafka_consumer`: records of Kafka topics as events, with a consumer group (librdkafka).

Config (Tremor's names): `brokers` (list of "host:port"), `group_id`, `topics`,
and `mode`:
- `"performance"`: librdkafka commits what was consumed on its own schedule
  (auto commit and auto offset store); acks and fails change nothing.
- `"transactional"` (guaranteed delivery): an offset is stored for commit only
  when the event is acknowledged downstream (acks of one partition commit its
  longest acknowledged prefix), so a crash re-delivers what was not delivered
  and never skips it; a failed event is consumed again (`retry_failed_events`).
- `{"custom": {"rdkafka_options": {...}, "retry_failed_events": bool}}`:
  transactional's commit-on-ack with the given librdkafka settings on top
  (`"enable.auto.offset.store": true` there turns commit-on-ack off).

Each record is one chunk for the codec, with
`$kafka_consumer = {"key", "headers", "topic", "partition", "offset", "timestamp"}`
(key and header values as text when they are UTF-8, else null).

librdkafka's calls block, so polling runs in a worker thread, a batch of
records at a time; a rebalance drops what was buffered for partitions this
member no longer owns (their next owner starts from the committed offset).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from contraflow.connectors.base import (
    ConnectionLost,
    Connector,
    ConnectorContext,
    SourceData,
    register,
)
from contraflow.connectors.base.acks import AckWindow
from contraflow.connectors.base.kafka_options import brokers, client_id, rdkafka_options
from contraflow.connectors.base.options import ConfigReader

POLL_BATCH = 500
POLL_TIMEOUT_S = 0.1
MODES = ("performance", "transactional")
PartitionKey = tuple[str, int]


@dataclass(frozen=True)
class ConsumerOptions:
    settings: dict[str, str]  # librdkafka configuration
    topics: list[str]
    commit_on_ack: bool
    retry_failed_events: bool

    @classmethod
    def read(cls, cfg: ConfigReader) -> ConsumerOptions:
        topics = cfg.config.get("topics")
        if not isinstance(topics, list) or not topics or not all(isinstance(t, str) and t for t in topics):
            raise cfg.error("topics", f"must be a non-empty list of topic names, got {topics!r}")
        settings = {
            "bootstrap.servers": brokers(cfg),
            "group.id": cfg.string("group_id"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": "true",
            "auto.commit.interval.ms": "1000",
        }
        mode = cfg.config.get("mode", "performance")
        if mode == "performance":
            return cls({**settings, "enable.auto.offset.store": "true"}, topics, False, False)
        if mode == "transactional":
            return cls({**settings, "enable.auto.offset.store": "false"}, topics, True, True)
        custom = mode.get("custom") if isinstance(mode, dict) and set(mode) == {"custom"} else None
        if not isinstance(custom, dict) or not set(custom) <= {"rdkafka_options", "retry_failed_events"}:
            raise cfg.error(
                "mode",
                'must be "performance", "transactional" or '
                f'{{"custom": {{"rdkafka_options": {{...}}, "retry_failed_events": bool}}}}, got {mode!r}',
            )
        retry = custom.get("retry_failed_events", False)
        if not isinstance(retry, bool):
            raise cfg.error("mode", f"custom retry_failed_events must be true or false, got {retry!r}")
        chosen = {**settings, "enable.auto.offset.store": "false"}
        chosen.update(rdkafka_options(cfg, custom.get("rdkafka_options", {}), "mode"))
        return cls(chosen, topics, chosen["enable.auto.offset.store"] == "false", retry)


def _text(raw: str | bytes | None) -> str | None:
    if raw is None or isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _position(msg: Message) -> tuple[str, int, int]:
    """(topic, partition, offset) of a consumed record (always set on one without error)."""
    return str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0)


def _meta(msg: Message) -> dict[str, Any]:
    topic, partition, offset = _position(msg)
    headers: list[tuple[str, bytes | None]] = list(msg.headers() or [])  # type: ignore[arg-type]
    return {
        "kafka_consumer": {
            "key": _text(msg.key()),
            "headers": {name: _text(value) for name, value in headers},
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "timestamp": msg.timestamp()[1],
        }
    }


@register("kafka_consumer")
class KafkaConsumerConnector(Connector[ConsumerOptions]):
    config_keys = frozenset({"brokers", "group_id", "topics", "mode"})
    required_keys = frozenset({"brokers", "group_id", "topics"})

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self._consumer: Consumer | None = None
        self._buffer: deque[Message] = deque()
        self._windows: dict[PartitionKey, AckWindow] = {}
        self._rewinds: dict[PartitionKey, int] = {}

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> ConsumerOptions:
        return ConsumerOptions.read(cfg)

    async def connect(self) -> None:
        if self._consumer is not None:
            return
        try:
            consumer = Consumer(
                {**client_id(self.ctx), **self.options.settings, "logger": self.ctx.logger},
                on_commit=self._on_commit,
            )
            consumer.subscribe(self.options.topics, on_assign=self._on_assign, on_revoke=self._on_revoke)
        except KafkaException as err:
            raise ConnectionLost(f"kafka consumer: {err}") from err
        self._consumer = consumer

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await asyncio.to_thread(consumer.close)  # leaves the group and commits stored offsets

    # -- rebalance callbacks (run inside consume(), in the polling thread) ----------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.ctx.logger.info("assigned %s", ", ".join(f"{p.topic}/{p.partition}" for p in partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {(p.topic, p.partition) for p in partitions}
        self.ctx.logger.info("revoked %s", ", ".join(f"{t}/{p}" for t, p in sorted(revoked)))
        kept = [m for m in self._buffer if (m.topic(), m.partition()) not in revoked]
        self._buffer = deque(kept)
        for key in revoked:
            self._windows.pop(key, None)
            self._rewinds.pop(key, None)

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if err is not None and err.code() != KafkaError._NO_OFFSET:
            self.ctx.logger.warning("offset commit failed: %s", err)

    # -- source -------------------------------------------------------------------------------------

    async def pull(self) -> SourceData | None:
        while True:
            if self._consumer is None or self.ctx.quiescing.is_set():
                return None
            if self._rewinds:
                await asyncio.to_thread(self._seek_rewinds)
            if self._buffer:
                return self._hand_out(self._buffer.popleft())
            messages = await asyncio.to_thread(self._consumer.consume, POLL_BATCH, POLL_TIMEOUT_S)
            for msg in messages:
                error = msg.error()
                if error is None:
                    self._buffer.append(msg)
                elif error.fatal():
                    raise ConnectionLost(f"kafka consumer: {error}")
                elif error.code() != KafkaError._PARTITION_EOF:
                    self.ctx.logger.warning("kafka consumer: %s", error)

    def _hand_out(self, msg: Message) -> SourceData:
        topic, partition, offset = _position(msg)
        key = (topic, partition)
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = AckWindow(offset)
        window.issue(offset, offset, offset + 1)
        return SourceData(data=msg.value() or b"", meta=_meta(msg), token=(*key, offset))

    def _seek_rewinds(self) -> None:
        """Worker thread: consume failed records again (retry_failed_events)."""
        assert self._consumer is not None
        rewinds, self._rewinds = self._rewinds, {}
        for (topic, partition), offset in rewinds.items():
            self._buffer = deque(m for m in self._buffer if (m.topic(), m.partition()) != (topic, partition))
            try:
                self._consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as err:  # revoked meanwhile: its next owner reads it
                self.ctx.logger.info("not retrying %s/%d at %d: %s", topic, partition, offset, err)

    async def ack(self, token: Any) -> None:
        topic, partition, offset = token
        window = self._windows.get((topic, partition))
        if not self.options.commit_on_ack or window is None or self._consumer is None:
            return
        committed = window.ack(offset)
        if committed is None:
            return
        position = [TopicPartition(topic, partition, committed)]
        try:
            if self.options.settings["enable.auto.commit"] == "false":
                self._consumer.commit(offsets=position, asynchronous=True)
            else:  # stored locally; librdkafka's auto commit (and close, and revoke) commits it
                self._consumer.store_offsets(offsets=position)
        except KafkaException as err:  # the partition moved to another member meanwhile
            self.ctx.logger.info("offset %d of %s/%d not stored: %s", committed, topic, partition, err)

    async def fail(self, token: Any) -> None:
        topic, partition, offset = token
        window = self._windows.get((topic, partition))
        if not self.options.retry_failed_events or window is None:
            return
        position = window.fail(offset)
        if position is not None:
            self._rewinds[(topic, partition)] = position

    def status(self) -> dict[str, Any]:
        return {"buffered": len(self._buffer), "partitions": sorted(f"{t}/{p}" for t, p in self._windows)}
