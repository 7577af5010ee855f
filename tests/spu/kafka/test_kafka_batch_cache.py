"""The fetch cache: batches a consumer already took go first, those still ahead stay."""

from __future__ import annotations

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from contraflow.spu.kafka.batch_cache import KafkaBatchCache
from contraflow.spu.kafka.records import from_kafka
from contraflow.spu.protocol.batch import encode_batch, stamp

TP = ("t", 0)


def log_batch(base_offset: int) -> memoryview:
    batch = encode_batch([b"%06d-%03d" % (base_offset, i) for i in range(100)], timestamps=[5] * 100)
    stamp(batch, base_offset)
    return memoryview(batch)


def values(parts: list[bytes | bytearray | memoryview]) -> list[bytes | None]:
    return [r.value for r in DefaultRecordBatch(b"".join(bytes(p) for p in parts))]


def test_served_batches_are_dropped_before_unserved_ones() -> None:
    size = sum(map(len, KafkaBatchCache().encode(TP, log_batch(0))))  # every batch's size
    cache = KafkaBatchCache(max_bytes=int(3.5 * size))  # room for three
    # A producer's batch, kept as sent in a writable request buffer (stamped in place).
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(100):
        builder.append(i, 5, None, b"sent--%03d" % i, [])
    request = bytearray(builder.build())
    produced = from_kafka(memoryview(request))
    cache.remember_as_sent(TP, 0, produced.log_batch, memoryview(request))
    cache.encode(TP, log_batch(100), serving=False)  # read ahead for a consumer
    cache.encode(TP, log_batch(200))  # served to a consumer
    cache.encode(TP, log_batch(300), serving=False)  # over the budget: the served one goes
    hits, misses = cache.hits, cache.misses

    as_sent = cache.encode(TP, produced_log_batch_at(produced.log_batch, 0))
    assert as_sent[0].obj is request  # type: ignore[union-attr]  # the request's own bytes
    assert values(as_sent) == [b"sent--%03d" % i for i in range(100)]
    assert values(cache.encode(TP, log_batch(100))) == [b"000100-%03d" % i for i in range(100)]
    assert (cache.hits, cache.misses) == (hits + 2, misses)
    cache.encode(TP, log_batch(200))
    assert cache.misses == misses + 1  # it was dropped, so encoded again


def produced_log_batch_at(batch: bytearray, base_offset: int) -> memoryview:
    stamped = bytearray(batch)
    stamp(stamped, base_offset)
    return memoryview(stamped)
