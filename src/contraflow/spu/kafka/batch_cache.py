"""Kafka encodings of log batches, kept for the next fetch that needs them.

Transcoding a log batch for a Kafka consumer costs a fraction of a microsecond
per record, and a Kafka consumer sends its next fetch only once the previous
answer arrived. So after answering a fetch the listener encodes the batches that
follow ahead of time (read-ahead, off the event loop), and the next fetch is
answered from here; consumers reading the same data (a group's replays, several
groups) share the work too. Entries are keyed by the batch's identity (topic,
partition, base offset, CRC: a batch rewritten after a truncation is another
entry) and the least recently used go first past `max_bytes`. A batch a Kafka
producer just sent is remembered as it came, so consumers keeping up with
producers are served the producers' own bytes without any transcoding. Such an
entry is a slice of the produce request's buffer, which it keeps alive: a
request carrying several partitions' batches stays in memory until the last of
its slices leaves the cache (the size counted is the slices').
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict

from contraflow.spu.kafka.records import to_kafka
from contraflow.spu.protocol.batch import WireBuffer
from contraflow.spu.protocol.topics import TopicPartition

_BASE_OFFSET_AND_CRC = struct.Struct(">q9xI")  # base offset (0), crc (17)
_BASE_OFFSET = struct.Struct(">q")
BatchKey = tuple[str, int, int, int]
# A Kafka batch as buffers written back to back: its header and records when transcoded,
# or a producer's batch as sent (a view into its request's buffer).
Encoded = list[WireBuffer]


class KafkaBatchCache:
    """Entries no consumer has taken yet (read ahead, or as a producer sent them) are kept
    apart from those already served: past `max_bytes` the served ones go first (least
    recently used first), since a consumer reads on past what it took, while a batch still
    unserved is what a consumer catching up will ask for next."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self._unserved: OrderedDict[BatchKey, Encoded] = OrderedDict()
        self._served: OrderedDict[BatchKey, Encoded] = OrderedDict()
        self._encoding: dict[BatchKey, threading.Event] = {}  # being encoded by another thread
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def encode(self, tp: TopicPartition, log_batch: memoryview, serving: bool = True) -> Encoded:
        """The Kafka batch for `log_batch`: from the cache, or transcoded and remembered
        (`serving`: for a fetch's answer, not a read-ahead)."""
        base_offset, crc = _BASE_OFFSET_AND_CRC.unpack_from(log_batch, 0)
        key = (tp[0], tp[1], base_offset, crc)
        while True:
            with self._lock:
                found = self._found(key, serving)
                if found is not None:
                    self.hits += 1
                    return found
                busy = self._encoding.get(key)
                if busy is None:  # ours to encode
                    self._encoding[key] = threading.Event()
                    self.misses += 1
                    break
            busy.wait()  # a read-ahead is encoding this very batch: take its result
        try:
            encoded = to_kafka(log_batch)
            self._remember(key, encoded, serving)
        finally:
            with self._lock:
                self._encoding.pop(key).set()
        return encoded

    def _found(self, key: BatchKey, serving: bool) -> Encoded | None:
        """Lock held: the entry for `key`, now the most recently used (and served, if so)."""
        found = self._served.get(key)
        if found is not None:
            self._served.move_to_end(key)
            return found
        found = self._unserved.get(key)
        if found is not None:
            if serving:
                self._served[key] = self._unserved.pop(key)
            else:
                self._unserved.move_to_end(key)
        return found

    def remember_as_sent(
        self, tp: TopicPartition, base_offset: int, log_batch: WireBuffer, kafka_batch: memoryview
    ) -> None:
        """A producer's Kafka batch, just appended as `log_batch` at `base_offset`, stands for
        it in fetches: its bytes with that base offset (outside the CRC, as in the log),
        stamped in place when the request's buffer allows (no copy)."""
        _, crc = _BASE_OFFSET_AND_CRC.unpack_from(log_batch, 0)
        encoded = bytearray(kafka_batch) if kafka_batch.readonly else kafka_batch
        _BASE_OFFSET.pack_into(encoded, 0, base_offset)
        self._remember((tp[0], tp[1], base_offset, crc), [encoded], served=False)

    def _remember(self, key: BatchKey, encoded: Encoded, served: bool) -> None:
        with self._lock:
            for entries in (self._served, self._unserved):
                previous = entries.pop(key, None)
                if previous is not None:
                    self._size -= _size(previous)
            (self._served if served else self._unserved)[key] = encoded
            self._size += _size(encoded)
            while self._size > self.max_bytes and len(self._served) + len(self._unserved) > 1:
                _, dropped = (self._served or self._unserved).popitem(last=False)
                self._size -= _size(dropped)

    def forget_topic(self, topic: str) -> None:
        with self._lock:
            for entries in (self._served, self._unserved):
                for key in [k for k in entries if k[0] == topic]:
                    self._size -= _size(entries.pop(key))


def _size(encoded: Encoded) -> int:
    return sum(map(len, encoded))
