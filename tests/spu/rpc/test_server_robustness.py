"""Bad input and load: malformed, unknown and oversized frames, a fuzzed live server,
many concurrent clients, the in-flight limit, the private port."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.spu.spu_harness import RawConnection, running_spu, small_limits

from contraflow.spu.client import AsyncSpuClient, SpuClient
from contraflow.spu.embedded import EmbeddedSpu, probe
from contraflow.spu.protocol import ApiKey, ErrorCode, encode_frame, encode_header
from contraflow.spu.protocol.frames import HEADER
from contraflow.spu.storage import TopicConfig


@pytest.fixture(scope="module")
def spu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedSpu]:
    limits = small_limits(max_frame_bytes=64 * 1024)
    with running_spu(tmp_path_factory.mktemp("robust") / "d", limits=limits) as server:
        with SpuClient(server.addr) as client:
            client.create_topic("t")
        yield server


def test_bad_requests_get_error_answers_and_the_connection_lives_on(spu: EmbeddedSpu) -> None:
    raw = RawConnection(spu.addr)
    bad_meta = encode_header(ApiKey.FETCH, 0, 1, b"\xc1\xc1", 0)
    raw.send(bad_meta)
    assert raw.receive()[0]["error"] == ErrorCode.MALFORMED_REQUEST
    assert raw.request(999, {})["error"] == ErrorCode.UNSUPPORTED_API
    raw.send(encode_frame(ApiKey.FETCH, 7, 3, {}))
    assert raw.receive()[0]["error"] == ErrorCode.UNSUPPORTED_VERSION
    answer = raw.request(ApiKey.FETCH, {"topic": "t", "partition": "zero", "offset": 0})
    assert answer["error"] == ErrorCode.MALFORMED_REQUEST and "partition" in answer["message"]
    answer = raw.request(ApiKey.FETCH, {"topic": "t", "partition": 0, "offset": 0, "isolation": "dirty"})
    assert answer["error"] == ErrorCode.INVALID_ARGUMENT
    answer = raw.request(ApiKey.PRODUCE, {"topic": "t", "partition": 0}, b"\x00" * 10)
    assert answer["error"] == ErrorCode.CORRUPT_BATCH
    answer = raw.request(ApiKey.PRODUCE, {"topic": "t", "partition": 0, "acks": 9}, b"")
    assert answer["error"] == ErrorCode.INVALID_ARGUMENT
    assert raw.request(ApiKey.API_VERSIONS, {})["error"] == 0
    raw.close()


def test_oversized_frame_is_answered_then_the_connection_closed(spu: EmbeddedSpu) -> None:
    raw = RawConnection(spu.addr)
    raw.send(HEADER.pack(10 * 1024 * 1024, ApiKey.PRODUCE, 0, 5, 0))
    fields, _, cid = raw.receive()
    assert (fields["error"], cid) == (ErrorCode.FRAME_TOO_LARGE, 5)
    assert raw.closed_by_peer()
    raw.close()
    assert probe(spu.addr)


def test_length_shorter_than_a_header_closes_the_connection(spu: EmbeddedSpu) -> None:
    raw = RawConnection(spu.addr)
    raw.send(HEADER.pack(2, 0, 0, 1, 0))
    assert raw.receive()[0]["error"] == ErrorCode.MALFORMED_REQUEST
    assert raw.closed_by_peer()
    raw.close()
    assert probe(spu.addr)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.binary(min_size=1, max_size=200), valid_prefix=st.booleans())
def test_live_server_survives_fuzzed_bytes(spu: EmbeddedSpu, garbage: bytes, valid_prefix: bool) -> None:
    raw = RawConnection(spu.addr, timeout_s=2)
    try:
        if valid_prefix:  # a well-formed header around a garbage body reaches the decoders
            raw.send(encode_header(ApiKey(len(garbage) % len(ApiKey)), 0, 1, garbage[: len(garbage) // 2], 0))
            raw.send(garbage[len(garbage) // 2 :])
        else:
            raw.send(garbage)
    except OSError:
        pass
    finally:
        raw.close()
    assert probe(spu.addr, timeout_s=2)


def test_many_concurrent_clients_get_unique_offsets(spu: EmbeddedSpu) -> None:
    async def one_client(i: int) -> list[int]:
        async with AsyncSpuClient(spu.addr) as client:
            return [(await client.produce("many", 0, [b"c%d-%d" % (i, j)]))[0] for j in range(10)]

    async def scenario() -> list[list[int]]:
        async with AsyncSpuClient(spu.addr) as admin:
            await admin.create_topic("many", TopicConfig(partitions=1))
        return await asyncio.gather(*(one_client(i) for i in range(25)))

    offsets = asyncio.run(scenario())
    flat = sorted(o for per_client in offsets for o in per_client)
    assert flat == list(range(250))
    assert all(per_client == sorted(per_client) for per_client in offsets)  # per-connection order


def test_pipelined_requests_beyond_the_in_flight_limit_all_complete(tmp_path: Path) -> None:
    async def scenario(addr: str) -> list[tuple[int, int]]:
        async with AsyncSpuClient(addr) as client:
            await client.create_topic("p")
            return await asyncio.gather(*(client.produce("p", 0, [b"%d" % i]) for i in range(60)))

    with running_spu(tmp_path / "d", limits=small_limits(max_inflight=2)) as server:
        results = asyncio.run(scenario(server.addr))
    assert [first for first, _ in results] == list(range(60))  # in the order sent


def test_request_bodies_beyond_the_in_flight_byte_budget_wait_their_turn(tmp_path: Path) -> None:
    async def scenario(addr: str) -> list[tuple[int, int]]:
        async with AsyncSpuClient(addr) as client:
            await client.create_topic("big")
            value = b"v" * 20_000
            return await asyncio.gather(*(client.produce("big", 0, [value] * 3) for _ in range(20)))

    limits = small_limits(max_inflight_bytes=100_000)
    with running_spu(tmp_path / "d", limits=limits) as server:
        results = asyncio.run(scenario(server.addr))
    assert [first for first, _ in results] == list(range(0, 60, 3))


def test_private_port_answers_api_versions_only(spu: EmbeddedSpu) -> None:
    assert spu.private_addr and probe(spu.private_addr)
    raw = RawConnection(spu.private_addr)
    assert (
        raw.request(ApiKey.FETCH, {"topic": "t", "partition": 0, "offset": 0})["error"]
        == ErrorCode.UNSUPPORTED_API
    )
    raw.close()
