"""Fetch and ListOffsets.

A fetch reads whole batches from the log at the committed (high-watermark)
level of partitions this SPU leads (else NOT_LEADER_OR_FOLLOWER: in a cluster
the client then asks the metadata who leads now) and transcodes each to a
Kafka batch with its codec. When less than min_bytes is there it waits, up to max_wait_ms, for an append to any requested
partition to wake it (the SPU's partition signals), re-reading now and then for
data that waits for an fsync to become committed. Fetch sessions (KIP-227) are
not kept: the response's session id 0 tells clients to send full fetches.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from contraflow.spu.kafka.apis.base import KafkaRequest, response
from contraflow.spu.kafka.broker import Broker
from contraflow.spu.kafka.errors import error_code_of
from contraflow.spu.kafka.wire import Reader, Writer
from contraflow.spu.node.signals import HIGH_WATERMARK_RECHECK_S, woken
from contraflow.spu.protocol.batch import WireBuffer
from contraflow.spu.protocol.topics import TopicPartition

COMMITTED = "committed"
READ_AHEAD_FETCHES = 2
LATEST, EARLIEST = -1, -2


@dataclass(slots=True)
class PartitionFetch:
    tp: TopicPartition
    offset: int
    max_bytes: int
    error: int = 0
    high_watermark: int = -1
    log_start_offset: int = -1
    batches: list[WireBuffer] = field(default_factory=list)
    size: int = 0
    next_offset: int = -1


def _read_fetch_partition(version: int, topic: str) -> object:
    def read(r: Reader) -> PartitionFetch:
        index = r.int32()
        if version >= 9:
            r.int32()  # current leader epoch
        offset = r.int64()
        if version >= 5:
            r.int64()  # the follower's log start offset
        return PartitionFetch((topic, index), offset, r.int32())

    return read


def _read_all(broker: Broker, fetches: list[PartitionFetch], max_bytes: int) -> int:
    """Worker thread: fill each partition's batches (Kafka-encoded); returns the bytes read."""
    total = 0
    for fetch in fetches:
        fetch.batches, fetch.size = [], 0
        # Like Kafka, a partition returns at least one whole batch even past the budget.
        budget = min(fetch.max_bytes, max_bytes - total)
        try:
            broker.topology.check_leader(fetch.tp)
            view = broker.partitions.read(fetch.tp, fetch.offset, max(1, budget), COMMITTED, views=True)
        except Exception as err:
            fetch.error = error_code_of(err)
            continue
        fetch.error = 0
        fetch.high_watermark, fetch.log_start_offset = view.high_watermark, view.log_start_offset
        fetch.batches = [
            piece
            for part in view.parts
            for piece in broker.batches.encode(fetch.tp, memoryview(part))  # type: ignore[arg-type]
        ]
        fetch.size = sum(map(len, fetch.batches))
        fetch.next_offset = view.next_offset
        total += fetch.size
    return total


def _encode_ahead(broker: Broker, tp: TopicPartition, offset: int, max_bytes: int) -> None:
    """Worker thread: encode what the consumer's next fetch will ask for into the cache."""
    try:
        view = broker.partitions.read(tp, offset, max_bytes, COMMITTED, views=True)
        for part in view.parts:
            broker.batches.encode(tp, memoryview(part), serving=False)  # type: ignore[arg-type]
    except Exception:  # a read-ahead that fails changes nothing: the fetch reads for itself
        pass
    finally:
        broker.read_ahead.discard((tp, offset))


def _start_read_ahead(broker: Broker, fetches: list[PartitionFetch]) -> None:
    """After an answer with data, encode the following batches while the client is busy:
    READ_AHEAD_FETCHES fetches' worth, so one slow encoding does not stall the next fetch."""
    for f in fetches:
        key = (f.tp, f.next_offset)
        if f.batches and f.next_offset < f.high_watermark and key not in broker.read_ahead:
            broker.read_ahead.add(key)
            asyncio.get_running_loop().run_in_executor(
                broker.executor, _encode_ahead, broker, f.tp, f.next_offset, READ_AHEAD_FETCHES * f.max_bytes
            )


async def _wait_for_data(broker: Broker, fetches: list[PartitionFetch], timeout_s: float) -> None:
    wakeup = asyncio.Event()
    for fetch in fetches:
        broker.signals.subscribe(fetch.tp, wakeup)
    try:
        await woken(wakeup, min(timeout_s, HIGH_WATERMARK_RECHECK_S * 20))
    finally:
        for fetch in fetches:
            broker.signals.unsubscribe(fetch.tp, wakeup)


async def fetch(broker: Broker, request: KafkaRequest) -> Writer:
    body, version = request.body, request.version
    body.int32()  # replica id
    max_wait_s = max(0, body.int32()) / 1000
    min_bytes = body.int32()
    max_bytes = body.int32()
    body.int8()  # isolation level: the log only serves committed data to Kafka clients
    if version >= 7:
        body.int32(), body.int32()  # fetch session id and epoch

    def read_topic(r: Reader) -> list[PartitionFetch]:
        name = r.string()
        return r.array(_read_fetch_partition(version, name))  # type: ignore[arg-type]

    fetches = [p for topic in body.array(read_topic) for p in topic]
    deadline = time.monotonic() + max_wait_s
    while True:
        total = await broker.blocking(_read_all, broker, fetches, max(1, max_bytes))
        remaining = deadline - time.monotonic()
        if total >= min_bytes or remaining <= 0 or any(f.error for f in fetches):
            break
        await _wait_for_data(broker, fetches, remaining)
    _start_read_ahead(broker, fetches)
    return _fetch_response(version, fetches)


def _fetch_response(version: int, fetches: list[PartitionFetch]) -> Writer:
    out = response(version, 1)
    if version >= 7:
        out.int16(0).int32(0)  # no fetch session
    by_topic: dict[str, list[PartitionFetch]] = {}
    for f in fetches:
        by_topic.setdefault(f.tp[0], []).append(f)

    def write_partition(w: Writer, f: PartitionFetch) -> None:
        w.int32(f.tp[1]).int16(f.error).int64(f.high_watermark)
        w.int64(f.high_watermark)  # last stable offset: no open Kafka transactions here
        if version >= 5:
            w.int64(f.log_start_offset)
        w.array([], Writer.int64)  # aborted transactions
        if version >= 11:
            w.int32(-1)  # preferred read replica
        w.byte_parts(f.batches)

    return out.array(by_topic.items(), lambda w, t: w.string(t[0]).array(t[1], write_partition))


# -- ListOffsets ------------------------------------------------------------------------------------


def _lookup(broker: Broker, tp: TopicPartition, timestamp: int) -> tuple[int, int, int]:
    """(error, timestamp, offset) for Kafka's -1 (latest), -2 (earliest) or a time in ms."""
    try:
        broker.topology.check_leader(tp)
        if timestamp == LATEST:
            return 0, -1, int(broker.partitions.list_offset(tp, "latest", COMMITTED) or 0)
        if timestamp == EARLIEST:
            return 0, -1, int(broker.partitions.list_offset(tp, "earliest", COMMITTED) or 0)
        found = broker.partitions.list_offset(tp, timestamp, COMMITTED)
        return (0, -1, -1) if found is None else (0, timestamp, found)
    except Exception as err:
        return error_code_of(err), -1, -1


async def list_offsets(broker: Broker, request: KafkaRequest) -> Writer:
    body, version = request.body, request.version
    body.int32()  # replica id
    if version >= 2:
        body.int8()  # isolation level

    def read_partition(r: Reader) -> tuple[int, int]:
        index = r.int32()
        if version >= 4:
            r.int32()  # current leader epoch
        return index, r.int64()

    topics = body.array(lambda r: (r.string(), r.array(read_partition)))
    out = response(version, 2)

    def write_partition(w: Writer, name: str, index: int, timestamp: int) -> None:
        error, found_ts, offset = _lookup(broker, (name, index), timestamp)
        w.int32(index).int16(error).int64(found_ts).int64(offset)
        if version >= 4:
            w.int32(-1)  # leader epoch

    out.array(
        topics,
        lambda w, t: w.string(t[0]).array(t[1], lambda w2, p: write_partition(w2, t[0], p[0], p[1])),
    )
    return out
