"""Produce and InitProducerId.

A produce request's batches for one partition are transcoded and appended in
the SPU's thread pool, in the order the requests came (pipelined requests to a
partition go to the pool together), through the same `Partitions` door as the
SPU's own produces, so Kafka and contraflow producers share ordering, fsync grouping and
transaction fences. What acks waits for is the topology's (`kafka/topology.py`):
on a lone SPU acks=-1 (all) waits for the fsync (the leader is the whole
in-sync set, so acks=1 gets the same durability from the flush policy); in a
cluster only the partition's leader appends, and acks=-1 waits for the
in-sync replicas. acks=0 gets no response, as in Kafka.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import partial
from typing import Any

from contraflow.spu.kafka.apis.base import THROTTLE_NONE, KafkaRequest, response
from contraflow.spu.kafka.broker import Broker
from contraflow.spu.kafka.errors import KafkaError, KafkaErrorCode, to_kafka_error
from contraflow.spu.kafka.records import ProducedBatch, from_kafka, split_kafka_batches
from contraflow.spu.kafka.wire import Reader, Writer
from contraflow.spu.node.idempotence.producers import (
    OutOfOrderSequence,
    SequencedBatch,
    StaleProducerEpoch,
)
from contraflow.spu.protocol.idempotence import KAFKA_WINDOW, SEQUENCE_WRAP, ProducerKey
from contraflow.spu.protocol.topics import TopicPartition

NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class PartitionResult:
    index: int
    error: int = 0
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None


def _read_partition(r: Reader) -> tuple[int, memoryview | None]:
    return r.int32(), r.nullable_bytes()


def _read_topic(r: Reader) -> tuple[str, list[tuple[int, memoryview | None]]]:
    return r.string(), r.array(_read_partition)


Offsets = tuple[int, int]  # first and last offset of what a request appended


@dataclass(frozen=True, slots=True)
class Started:
    """A partition's append, queued, and what the topology needs to know once it is done."""

    appended: asyncio.Future[Offsets]
    leading: Any
    acks: int


def _append(broker: Broker, tp: TopicPartition, records: memoryview, durable: bool) -> Offsets:
    """Worker thread: transcode, check sequences, append; returns the first and last offsets."""
    broker.partitions.check_exists(tp)
    first, last = -1, -1
    for raw in split_kafka_batches(records):
        batch = from_kafka(raw)
        base, last = _append_once(broker, tp, batch, durable)
        first = base if first < 0 else first
    return first, last


def _append_once(broker: Broker, tp: TopicPartition, batch: ProducedBatch, durable: bool) -> Offsets:
    """A batch appended unless its idempotent producer sent it before (the producers' table
    is the node's, the same the SPU's own producers use)."""
    if batch.producer_id < 0:
        return _append_plain(broker, tp, batch, durable)
    producers = broker.partitions.producers
    producer = ProducerKey("kafka", batch.producer_id)
    last_sequence = (batch.base_sequence + batch.record_count - 1) % SEQUENCE_WRAP
    with producers.lock(tp):
        try:
            seen = producers.duplicate(tp, producer, batch.producer_epoch, batch.base_sequence, last_sequence)
        except OutOfOrderSequence as err:
            raise KafkaError(KafkaErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, str(err)) from None
        except StaleProducerEpoch as err:
            raise KafkaError(KafkaErrorCode.INVALID_PRODUCER_EPOCH, str(err)) from None
        if seen is not None:
            return seen
        base, last = _append_plain(broker, tp, batch, durable)
        sequenced = SequencedBatch(batch.base_sequence, last_sequence, base, last)
        producers.record(tp, producer, batch.producer_epoch, sequenced, KAFKA_WINDOW)
    return base, last


def _append_plain(broker: Broker, tp: TopicPartition, batch: ProducedBatch, durable: bool) -> Offsets:
    # from_kafka checked the client's CRC and computed the log batch's: no second pass
    base, last = broker.partitions.produce(tp, [memoryview(batch.log_batch)], durable, built_here=True)
    if batch.as_sent is not None:
        broker.batches.remember_as_sent(tp, base, batch.log_batch, batch.as_sent)
    return base, last


def _start_partition(
    broker: Broker, tp: TopicPartition, records: memoryview | None, acks: int, transactional: bool
) -> Started | KafkaError:
    """The partition's append, queued at once (so pipelined requests keep their order)."""
    if transactional:
        code = KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return KafkaError(code, "Kafka transactions are not supported")
    if acks not in (-1, 0, 1):
        return KafkaError(KafkaErrorCode.INVALID_REQUIRED_ACKS, f"acks must be -1, 0 or 1, got {acks}")
    if records is None:
        return KafkaError(KafkaErrorCode.CORRUPT_MESSAGE, "the partition's records are null")
    topology = broker.topology
    try:
        leading = topology.check_produce(tp, acks)
    except Exception as err:
        return to_kafka_error(err)
    job = partial(_append, broker, tp, records, topology.durable_append(acks))
    return Started(broker.appends.submit(tp, job), leading, acks)


async def _partition_result(
    broker: Broker, topic: str, index: int, started: Started | KafkaError
) -> PartitionResult:
    try:
        if isinstance(started, KafkaError):
            raise started
        base, last = await started.appended
        await broker.topology.committed((topic, index), started.leading, last + 1, started.acks)
        log_start = broker.partitions.partition((topic, index)).log_start_offset
        return PartitionResult(index, base_offset=base, log_start_offset=log_start)
    except Exception as err:
        error = to_kafka_error(err)
        return PartitionResult(index, int(error.code), message=str(error))


async def produce(broker: Broker, request: KafkaRequest) -> Writer | None:
    body, version = request.body, request.version
    transactional_id = body.nullable_string()
    acks = body.int16()
    body.int32()  # timeout: appends do not wait for replicas here
    transactional = transactional_id is not None
    started = [
        (
            name,
            [
                (index, _start_partition(broker, (name, index), records, acks, transactional))
                for index, records in partitions
            ],
        )
        for name, partitions in body.array(_read_topic)
    ]
    results = [
        (name, [await _partition_result(broker, name, index, start) for index, start in partitions])
        for name, partitions in started
    ]
    if acks == 0:
        return None

    def write_partition(w: Writer, p: PartitionResult) -> None:
        w.int32(p.index).int16(p.error).int64(p.base_offset).int64(NO_TIMESTAMP)
        if version >= 5:
            w.int64(p.log_start_offset)
        if version >= 8:
            w.array([], Writer.int32).string(p.message)

    out = Writer().array(results, lambda w, t: w.string(t[0]).array(t[1], write_partition))
    return out.int32(THROTTLE_NONE)


async def init_producer_id(broker: Broker, request: KafkaRequest) -> Writer:
    transactional_id = request.body.nullable_string()
    request.body.int32()  # transaction timeout
    out = response(request.version, 0)
    if transactional_id is not None:
        code = KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # no transactions: refuse clearly
        return out.int16(code).int64(-1).int16(-1)
    return out.int16(0).int64(broker.producer_ids.allocate()).int16(0)
