"""The registry's internal topic: where its records are appended and read back from.

The registry is a client of the SPU like any other (`AsyncSpuClient`), so it
works the same beside a lone SPU and beside a cluster, where the topic is
replicated as the cluster's own topics are (min(3, SPUs) replicas, 2 in sync)
and written with acks=committed: a registration answered is held by the in-sync
replicas and outlives the SPU that took it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from contraflow.spu.client import AsyncSpuClient
from contraflow.spu.protocol import Acks, ErrorCode, SpuError
from contraflow.spu.protocol.topics import TopicConfig

SCHEMAS_TOPIC = "contraflow.schemas"
SEGMENT_BYTES = 4 << 20

log = logging.getLogger(__name__)

Apply = Callable[[bytes, bytes | None], None]


class SchemasTopic:
    """Reads the topic from where it left off into `apply`, appends records with acks=committed."""

    def __init__(self, client: AsyncSpuClient, apply: Apply, topic: str = SCHEMAS_TOPIC) -> None:
        self.client = client
        self.topic = topic
        self._apply = apply
        self._next = 0  # the offset of the first record not applied yet

    async def open(self) -> None:
        """Create the topic unless it exists, then read it whole."""
        if self.topic not in await self.client.list_topics():
            config = await self.client.replicated_config(
                TopicConfig(partitions=1, segment_bytes=SEGMENT_BYTES)
            )
            try:
                await self.client.create_topic(self.topic, config)
            except SpuError as err:  # another registry created it first
                if err.code != ErrorCode.TOPIC_EXISTS:
                    raise
        await self.catch_up()

    async def catch_up(self) -> None:
        """Apply every committed record past the last one applied."""
        while True:
            result = await self.client.fetch(self.topic, 0, self._next)
            for batch in result.batches:
                for record in batch.records(start_offset=self._next):
                    self._apply_one(record.offset, record.key, record.value)
            self._next = max(self._next, result.next_offset)
            if self._next >= result.high_watermark:
                return

    def _apply_one(self, offset: int, key: bytes | None, value: bytes) -> None:
        """Apply one record; one the registry did not write (any Kafka client can produce to the
        topic) is skipped with a warning, never a registry that cannot start."""
        try:
            if key is None:
                raise ValueError("no key")
            self._apply(key, value or None)
        except (ValueError, KeyError, TypeError) as err:
            log.warning("skipped record %d of %s: not a registry record (%s)", offset, self.topic, err)

    async def append(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Append records as one batch (all or none of them) and apply them (with any records
        another registry appended before them, in log order)."""
        keys = [key for key, _ in records]
        values = [value or b"" for _, value in records]  # an empty value is a tombstone
        await self.client.produce(self.topic, 0, values, keys, acks=Acks.COMMITTED)
        await self.catch_up()
