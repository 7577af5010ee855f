"""Requests no well-behaved client sends: each gets a Kafka error code and the
connection keeps serving. Also idempotent-producer sequence checks, batch by batch."""

from __future__ import annotations

import socket

import pytest
from kafka_harness import (
    KafkaWire,
    create_topic,
    end_offset,
    list_end_offset,
    produce_body,
    produce_result,
    sequenced_batch,
)

from contraflow.spu.kafka.apis.base import ApiKey
from contraflow.spu.kafka.errors import KafkaErrorCode
from contraflow.spu.kafka.wire import Writer


@pytest.fixture()
def wire(bootstrap: str):
    conn = KafkaWire(bootstrap)
    yield conn
    conn.close()


def _api_versions_ok(wire: KafkaWire, cid: int) -> dict[int, tuple[int, int]]:
    reply = wire.request(ApiKey.API_VERSIONS, 1, Writer(), cid=cid)
    assert reply.int16() == 0
    return {key: (low, high) for key, low, high in reply.array(lambda r: (r.int16(), r.int16(), r.int16()))}


def test_api_versions_lists_every_served_request(wire: KafkaWire) -> None:
    served = _api_versions_ok(wire, 1)
    assert set(served) == {int(k) for k in ApiKey}
    assert served[ApiKey.PRODUCE] == (3, 8) and served[ApiKey.FETCH] == (4, 11)


def test_unknown_api_key_gets_an_error_and_the_connection_stays(wire: KafkaWire) -> None:
    reply = wire.request(57, 0, Writer().int32(0), cid=5)  # UpdateFeatures: not served
    assert reply.int16() == KafkaErrorCode.INVALID_REQUEST
    assert ApiKey.METADATA in _api_versions_ok(wire, 6)


def test_newer_api_versions_request_is_answered_in_v0_with_the_ranges(wire: KafkaWire) -> None:
    reply = wire.request(ApiKey.API_VERSIONS, 9, Writer(), cid=3)
    assert reply.int16() == KafkaErrorCode.UNSUPPORTED_VERSION
    ranges = reply.array(lambda r: (r.int16(), r.int16(), r.int16()))
    assert (int(ApiKey.API_VERSIONS), 0, 3) in ranges


def test_unsupported_version_and_malformed_body_get_error_codes(wire: KafkaWire) -> None:
    assert wire.request(ApiKey.PRODUCE, 2, Writer(), cid=8).int16() == KafkaErrorCode.UNSUPPORTED_VERSION
    truncated = Writer().int32(3)  # Metadata v1: says three topic names, carries none
    assert wire.request(ApiKey.METADATA, 1, truncated, cid=9).int16() == KafkaErrorCode.INVALID_REQUEST
    assert ApiKey.FETCH in _api_versions_ok(wire, 10)


def test_idempotent_producer_retry_is_not_appended_twice(
    wire: KafkaWire, bootstrap: str, fresh_name: str
) -> None:
    create_topic(bootstrap, fresh_name)
    init = wire.request(ApiKey.INIT_PRODUCER_ID, 1, Writer().string(None).int32(60000), cid=1)
    init.int32()
    assert init.int16() == 0
    producer_id = init.int64()
    first = sequenced_batch(producer_id, 0, [b"a", b"b"])
    assert produce_result(wire.request(ApiKey.PRODUCE, 5, produce_body(fresh_name, first), cid=2)) == (0, 0)
    # The same batch again (a retry after a lost response): same offsets, nothing appended.
    assert produce_result(wire.request(ApiKey.PRODUCE, 5, produce_body(fresh_name, first), cid=3)) == (0, 0)
    second = sequenced_batch(producer_id, 2, [b"c"])
    assert produce_result(wire.request(ApiKey.PRODUCE, 5, produce_body(fresh_name, second), cid=4)) == (
        0,
        2,
    )
    gap = sequenced_batch(producer_id, 7, [b"d"])
    error, _ = produce_result(wire.request(ApiKey.PRODUCE, 5, produce_body(fresh_name, gap), cid=5))
    assert error == KafkaErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert end_offset(wire.request(ApiKey.LIST_OFFSETS, 1, list_end_offset(fresh_name), cid=6)) == (0, 3)


def test_pipelined_produces_are_appended_and_answered_in_order(
    wire: KafkaWire, bootstrap: str, fresh_name: str
) -> None:
    """Produces sent back to back without waiting are handled while the next are read; their
    appends and answers keep the order they were sent in, a request of another kind sees all
    of them, and a client that stops sending (half-close) still gets every answer."""
    create_topic(bootstrap, fresh_name)
    sizes = [1, 3, 60_000, 2, 1, 30_000, 4, 1, 7, 50_000, 1, 2]  # records per request
    for cid, count in enumerate(sizes, start=1):
        values = [b"r%d-%d" % (cid, i) for i in range(count)]
        wire.send(
            ApiKey.PRODUCE, 5, produce_body(fresh_name, sequenced_batch(-1, -1, values), acks=1), cid=cid
        )
    wire.send(ApiKey.LIST_OFFSETS, 1, list_end_offset(fresh_name), cid=len(sizes) + 1)
    wire.sock.shutdown(socket.SHUT_WR)
    bases = [produce_result(wire.response(cid)) for cid in range(1, len(sizes) + 1)]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    assert bases == [(0, start) for start in starts]
    assert end_offset(wire.response(len(sizes) + 1)) == (0, sum(sizes))


def test_corrupt_batch_and_unknown_topic_get_partition_errors(
    wire: KafkaWire, bootstrap: str, fresh_name: str
) -> None:
    create_topic(bootstrap, fresh_name)
    batch = bytearray(sequenced_batch(-1, -1, [b"x" * 50]))
    batch[-5] ^= 0xFF  # flip a value byte: the CRC no longer matches
    reply = wire.request(ApiKey.PRODUCE, 5, produce_body(fresh_name, bytes(batch)), cid=1)
    assert produce_result(reply)[0] == KafkaErrorCode.CORRUPT_MESSAGE
    good = sequenced_batch(-1, -1, [b"y"])
    reply = wire.request(ApiKey.PRODUCE, 5, produce_body("no.such.topic", good), cid=2)
    assert produce_result(reply)[0] == KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    reply = wire.request(ApiKey.PRODUCE, 5, produce_body(fresh_name, good, acks=2), cid=3)
    assert produce_result(reply)[0] == KafkaErrorCode.INVALID_REQUIRED_ACKS


def test_oversized_frame_closes_the_connection_with_a_log_line(
    bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    import socket
    import struct

    from contraflow.spu.protocol.address import parse_addr

    with socket.create_connection(parse_addr(bootstrap), timeout=5) as sock:
        sock.sendall(struct.pack(">i", 1 << 30))
        assert sock.recv(1) == b""
    assert any("request frame of 1073741824 bytes" in r.getMessage() for r in caplog.records)


def test_kafka_connections_count_against_the_spus_connection_limit(tmp_path) -> None:
    from dataclasses import replace

    from contraflow.spu.app import ServerConfig
    from contraflow.spu.embedded import EmbeddedSpu
    from contraflow.spu.server import Limits

    config = ServerConfig(tmp_path, limits=replace(Limits(), max_connections=1))
    with EmbeddedSpu(tmp_path, config=config, kafka_addr="127.0.0.1:0") as spu:
        first = KafkaWire(spu.kafka_addr)
        assert ApiKey.PRODUCE in _api_versions_ok(first, 1)
        second = KafkaWire(spu.kafka_addr)
        with pytest.raises(ConnectionError):
            second.request(ApiKey.API_VERSIONS, 1, Writer(), cid=2)
        second.close()
        first.close()
