"""Helpers for tests that drive the SPU with real Kafka clients."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.spu.spu_harness import recv_exactly

from contraflow.spu.kafka.wire import Reader, Writer
from contraflow.spu.protocol.address import parse_addr

QUICK_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(10)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]], **config: Any) -> None:
    """Produce and wait for every delivery report; fails on any delivery error."""
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for key, value in records:
        producer.produce(topic, value, key, on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(20) == 0
    assert errors == []


def consumer(bootstrap: str, group: str, **config: Any) -> Consumer:
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **QUICK_GROUP,
        **config,
    }
    return Consumer(settings)


def consume(cons: Consumer, count: int, timeout_s: float = 30.0) -> list[Message]:
    """Poll until `count` records arrived (fails on a consumer error or the timeout)."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        msg = cons.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
    assert len(got) == count, f"got {len(got)} of {count} records"
    return got


class KafkaWire:
    """A blocking socket speaking Kafka frames by hand, to send what a real client never would."""

    def __init__(self, addr: str) -> None:
        self.sock = socket.create_connection(parse_addr(addr), timeout=10)

    def request(self, api_key: int, version: int, body: Writer, cid: int = 1, client: str = "raw") -> Reader:
        self.send(api_key, version, body, cid, client)
        return self.response(cid)

    def send(self, api_key: int, version: int, body: Writer, cid: int, client: str = "raw") -> None:
        """A request without waiting for its answer (to pipeline several)."""
        head = Writer().int16(api_key).int16(version).int32(cid).string(client)
        self.send_frame(b"".join(bytes(p) for p in head.parts + body.parts))

    def send_frame(self, frame: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)

    def response(self, cid: int) -> Reader:
        (size,) = struct.unpack(">i", self._exactly(4))
        frame = self._exactly(size)
        reader = Reader(frame)
        assert reader.int32() == cid
        return reader

    def _exactly(self, size: int) -> bytes:
        return recv_exactly(self.sock, size)

    def close(self) -> None:
        self.sock.close()


# -- request bodies written by hand ----------------------------------------------------------------


def produce_body(topic: str, batch: bytes, acks: int = -1) -> Writer:
    body = Writer().string(None).int16(acks).int32(5000)
    return body.array([topic], lambda w, t: w.string(t).array([0], lambda w2, p: w2.int32(p).bytes_(batch)))


def produce_result(reply: Reader) -> tuple[int, int]:
    [(_, [(error, base)])] = reply.array(
        lambda r: (
            r.string(),
            r.array(lambda p: (p.int32(), p.int16(), p.int64(), p.int64(), p.int64())[1:3]),
        )
    )
    return error, base


def sequenced_batch(producer_id: int, base_sequence: int, values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, producer_id, 0, base_sequence, 1 << 20)
    for i, value in enumerate(values):
        builder.append(i, 1_700_000_000_000, None, value, [])
    return bytes(builder.build())


def list_end_offset(topic: str) -> Writer:
    return (
        Writer()
        .int32(-1)
        .array([topic], lambda w, t: w.string(t).array([0], lambda w2, p: w2.int32(p).int64(-1)))
    )


def end_offset(reply: Reader) -> tuple[int, int]:
    [(_, [(_, error, _, end)])] = reply.array(
        lambda r: (r.string(), r.array(lambda p: (p.int32(), p.int16(), p.int64(), p.int64())))
    )
    return error, end
