"""What a client of the log can do, whether the log is local or behind an SPU.

The CLI, connectors and the Spark source/sink talk to a `LogClient`. `LocalLog`
implements it over a `Store` in this process; the network client (spu/client)
implements the same protocol against an SPU server, so callers do not care
where the log lives.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from contraflow.spu.protocol.batch import Buffer, Headers, Record, decode_batch, encode_batch
from contraflow.spu.protocol.compression import Compression
from contraflow.spu.protocol.fetch import DEFAULT_FETCH_BYTES, FetchResult, OffsetSpec
from contraflow.spu.protocol.topics import Isolation, TopicConfig, TopicDescription


@runtime_checkable
class LogClient(Protocol):
    """Operations on topics, partitions and consumer offsets."""

    def create_topic(self, name: str, config: TopicConfig | None = None) -> None: ...

    def delete_topic(self, name: str) -> None: ...

    def list_topics(self) -> list[str]: ...

    def describe_topic(self, name: str) -> TopicDescription: ...

    def produce(
        self,
        topic: str,
        partition: int,
        values: Sequence[Buffer],
        keys: Sequence[Buffer | None] | None = None,
        headers: Sequence[Headers] | None = None,
        timestamps: Sequence[int] | None = None,
        compression: Compression | str | None = None,
    ) -> tuple[int, int]:
        """Append records as one batch; returns (first offset, last offset).

        The one definition for sync clients that subclass `LogClient`: encode, then `produce_encoded`.
        """
        return self.produce_encoded(
            topic, partition, encode_batch(values, keys, headers, timestamps, compression)
        )

    def produce_encoded(self, topic: str, partition: int, batch: Buffer) -> tuple[int, int]:
        """Append a batch already built with `encode_batch`; returns (first, last) offset."""
        ...

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = DEFAULT_FETCH_BYTES,
        isolation: Isolation = "committed",
    ) -> FetchResult: ...

    def list_offsets(
        self, topic: str, partition: int, at: OffsetSpec, isolation: Isolation = "committed"
    ) -> int | None:
        """earliest: log start; latest: next offset to be read at the end (high
        watermark when committed, log end when uncommitted); an int: the first
        offset whose timestamp is >= that many ms, or None if there is none."""
        ...

    def commit_offset(self, consumer: str, topic: str, partition: int, offset: int) -> None:
        """Record that `consumer` has processed everything below `offset`."""
        ...

    def fetch_offset(self, consumer: str, topic: str, partition: int) -> int | None: ...

    def close(self) -> None: ...


def read_topic(client: LogClient, topic: str) -> list[Record]:
    """Every committed record of `topic`, partition by partition, in offset order (small topics:
    tests, `contraflow query`)."""
    records: list[Record] = []
    for described in client.describe_topic(topic).partitions:
        offset = described.log_start_offset
        while offset < described.high_watermark:
            result = client.fetch(topic, described.partition, offset)
            for batch in result.batches:
                records += batch.records(start_offset=offset)
            offset = result.next_offset
    return records


class LocalLog(LogClient):
    """A LogClient over a Store in this process."""

    def __init__(self, data_dir: str | Path, *, read_only: bool = False) -> None:
        from contraflow.spu.storage.store import Store

        self.store = Store(data_dir, read_only=read_only)
        self.read_only = read_only

    def create_topic(self, name: str, config: TopicConfig | None = None) -> None:
        self.store.create_topic(name, config or TopicConfig())

    def delete_topic(self, name: str) -> None:
        self.store.delete_topic(name)

    def list_topics(self) -> list[str]:
        return self.store.list_topics()

    def describe_topic(self, name: str) -> TopicDescription:
        return self.store.describe_topic(name)

    def produce_encoded(self, topic: str, partition: int, batch: Buffer) -> tuple[int, int]:
        return self.store.partition(topic, partition).append_encoded(batch)

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = DEFAULT_FETCH_BYTES,
        isolation: Isolation = "committed",
    ) -> FetchResult:
        part = self.store.partition(topic, partition)
        if self.read_only and offset >= part.log_end_offset:
            part.refresh()  # another process may be writing: look for what it added
        result = part.read(offset, max_bytes, isolation=isolation)
        batches = [decode_batch(view) for view in result.batches]
        return FetchResult(batches, result.next_offset, result.high_watermark, result.log_start_offset)

    def list_offsets(
        self, topic: str, partition: int, at: OffsetSpec, isolation: Isolation = "committed"
    ) -> int | None:
        part = self.store.partition(topic, partition)
        if at == "earliest":
            return part.log_start_offset
        if at == "latest":
            return part.high_watermark if isolation == "committed" else part.log_end_offset
        return part.offset_for_timestamp(int(at))

    def commit_offset(self, consumer: str, topic: str, partition: int, offset: int) -> None:
        self.store.commit_consumer_offset(consumer, topic, partition, offset)

    def fetch_offset(self, consumer: str, topic: str, partition: int) -> int | None:
        return self.store.consumer_offset(consumer, topic, partition)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> LocalLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
