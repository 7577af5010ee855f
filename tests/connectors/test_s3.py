"""s3_reader and s3_streamer against moto's S3 server on loopback, boto3 on the other side."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contraflow.connectors.base import ConnectorConfigError, DeliveryFailed
from contraflow.events import Event, encode_value
from contraflow.runtime.connection import ReconnectPolicy
from contraflow.spu.client import AsyncSpuClient, SpuClient
from tests.cli_process import child_env
from tests.connectors import s3_sink_process
from tests.connectors.s3_peer import (
    CREDENTIALS,
    moto_process,
    moto_server,
    new_bucket,
    object_bytes,
    open_uploads,
    s3_client,
    serving,
)
from tests.connectors.s3_sink_process import sink_runner
from tests.connectors.support import make, run, sink_event
from tests.runtime.harness import flow_id, free_port, running, wait_for

MB = 1024 * 1024
_topics = itertools.count()


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture()
def bucket(s3_url: str) -> str:
    return new_bucket(s3_url)


def chunk(i: int) -> str:
    """An event's text: one MB, numbered (six make a part)."""
    return f"<{i:03d}>".ljust(MB, ".")


def test_streamer_uploads_parts_and_releases_events_only_once_their_object_is_complete(
    s3_url: str, bucket: str
) -> None:
    released: list[dict[str, int]] = []

    def event(i: int, name: str | None) -> Any:
        meta = {"s3_streamer": {"name": name}} if name else {}
        sent = sink_event(chunk(i), meta, frames=[chunk(i).encode()], offset=i)
        sent.channel = "ch"
        return sent

    async def body() -> None:
        conn = make("s3_streamer", {"url": s3_url, "bucket": bucket, "mode": "consistent"}, codec="string")
        conn.ctx.release = lambda marks: released.append(dict(marks))
        await conn.connect()
        await conn.send([event(i, "a.txt") for i in range(7)])
        assert open_uploads(s3_url, bucket) == [("a.txt", 1)]  # six MB sent as part 1, one waiting
        assert released == []
        with pytest.raises(DeliveryFailed) as failed:
            await conn.send([event(7, "b.txt"), event(8, None), event(9, "b.txt")])
        assert [e.offset for e in failed.value.rejected or []] == [8]  # only the unnamed one
        assert released == [{"ch": 6}]  # a.txt is complete
        await conn.send([event(9, "b.txt")])  # a batch sent again: taken once
        await conn.settle()
        assert released == [{"ch": 6}, {"ch": 9}]
        assert open_uploads(s3_url, bucket) == []

    run(body())
    assert object_bytes(s3_url, bucket, "a.txt") == "".join(chunk(i) for i in range(7)).encode()
    assert object_bytes(s3_url, bucket, "b.txt") == (chunk(7) + chunk(9)).encode()


def test_yolo_streamer_releases_what_it_takes(s3_url: str, bucket: str) -> None:
    released: list[dict[str, int]] = []

    async def body() -> None:
        conn = make("s3_streamer", {"url": s3_url, "bucket": bucket}, codec="string")
        conn.ctx.release = lambda marks: released.append(dict(marks))
        await conn.connect()
        sent = sink_event("hello", {"s3_streamer": {"name": "y.txt"}}, frames=[b"hello\n"], offset=3)
        sent.channel = "ch"
        await conn.send([sent])
        assert released == [{"ch": 3}]
        await conn.settle()

    run(body())
    assert object_bytes(s3_url, bucket, "y.txt") == b"hello\n"


def test_streamer_config_is_tremors(s3_url: str) -> None:
    conn = make("s3_streamer", {"aws_region": "eu-west-1", "url": s3_url, "buffer_size": 1024})
    assert conn.options.buffer_size == 5 * MB + 100  # raised to S3's smallest part, as Tremor does
    assert conn.options.endpoint.path_style and not conn.options.consistent
    with pytest.raises(ConnectorConfigError, match="'mode' must be one of consistent, yolo"):
        make("s3_streamer", {"mode": "safe"})
    with pytest.raises(ConnectorConfigError, match="missing config key 'bucket'"):
        make("s3_reader", {"url": s3_url})


def test_a_missing_bucket_keeps_the_streamer_unconnected(s3_url: str) -> None:
    conn = make("s3_streamer", {"url": s3_url, "bucket": "no-such-bucket"})
    with pytest.raises(Exception, match="cannot access bucket 'no-such-bucket'"):
        run(conn.connect())


def test_reader_reads_every_object_under_the_prefix_whole_or_in_ranges(s3_url: str, bucket: str) -> None:
    client = s3_client(s3_url)
    client.put_object(Bucket=bucket, Key="logs/small", Body=b"one\ntwo\n")
    client.put_object(Bucket=bucket, Key="logs/large", Body=b"0123456789" * 3)
    client.put_object(Bucket=bucket, Key="other/skipped", Body=b"no\n")
    config = {"url": s3_url, "bucket": bucket, "prefix": "logs/", "multipart_threshold": 16}
    config |= {"multipart_chunksize": 12, "max_connections": 2}

    async def body() -> dict[str, tuple[bytes, list[Any], bool]]:
        conn = make("s3_reader", config)
        await conn.connect()
        streams: dict[int, tuple[bytearray, list[Any], list[bool]]] = {}
        while (item := await conn.pull()) is not None:
            data, ranges, ended = streams.setdefault(item.stream, (bytearray(), [], [False]))
            if item.end_stream:
                ended[0] = True
                continue
            data += item.data or b""
            ranges.append((item.meta or {})["s3_reader"])
        await conn.close()
        return {ranges[0]["key"]: (bytes(data), ranges, ended[0]) for data, ranges, ended in streams.values()}

    got = run(body())
    assert set(got) == {"logs/small", "logs/large"}
    small, small_meta, small_ended = got["logs/small"]
    assert small == b"one\ntwo\n" and small_ended
    assert small_meta[0]["range"] is None and small_meta[0]["size"] == 8 and small_meta[0]["bucket"] == bucket
    large, large_meta, large_ended = got["logs/large"]
    assert large == b"0123456789" * 3 and large_ended
    assert [m["range"] for m in large_meta] == [
        {"start": 0, "end": 11},
        {"start": 12, "end": 23},
        {"start": 24, "end": 29},
    ]


def sink_process(spu_addr: str, topic: str, s3_url: str, bucket: str, mode: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "tests.connectors.s3_sink_process", spu_addr, topic, s3_url, bucket, mode]
    return subprocess.Popen(args, env=child_env(tests=True), stderr=subprocess.PIPE)


def test_sigkill_before_the_object_is_complete_delivers_its_events_again(
    spu_addr: str, spu: SpuClient, s3_url: str, bucket: str
) -> None:
    topic = f"s3-hold-{next(_topics)}"
    spu.create_topic(topic)
    meta = Event(None, {"s3_streamer": {"name": "held.txt"}}).headers()
    spu.produce(topic, 0, [encode_value(chunk(i)) for i in range(8)], headers=[meta] * 8)

    first = sink_process(spu_addr, topic, s3_url, bucket, "hold")
    try:
        deadline = time.monotonic() + 30
        while open_uploads(s3_url, bucket) != [("held.txt", 1)]:  # six of eight events are in part 1
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            assert time.monotonic() < deadline, "the first part was not uploaded"
            time.sleep(0.02)
    finally:
        first.kill()
        first.wait()
    assert spu.fetch_offset("s3-sink", topic, 0) in (None, 0)  # nothing released, nothing committed

    run(s3_sink_process.main(spu_addr, topic, s3_url, bucket, "finish"), timeout=60)  # in this process
    assert object_bytes(s3_url, bucket, "held.txt") == "".join(chunk(i) for i in range(8)).encode()
    assert open_uploads(s3_url, bucket) == []  # the killed run's upload was aborted
    assert spu.fetch_offset("s3-sink", topic, 0) == 8


def objects(url: str, bucket: str) -> dict[str, bytes]:
    client = s3_client(url)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {key: object_bytes(url, bucket, key) for key in keys}


def test_s3_going_away_opens_the_breaker_and_nothing_acknowledged_is_lost(
    spu_addr: str, spu: SpuClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto's server (a process) is SIGKILLed while the streamer writes: the breaker opens and nothing
    more is acknowledged; started again (empty: moto keeps nothing), the streamer writes the rest,
    the object it was writing included. Each event is its own object; the object being written is
    completed by the next event's."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    topic, port = f"s3-away-{next(_topics)}", free_port()
    url, bucket = f"http://127.0.0.1:{port}", "away"
    spu.create_topic(topic)

    def produce(numbers: range) -> None:
        meta = [Event(None, {"s3_streamer": {"name": f"o-{i:02d}"}}).headers() for i in numbers]
        spu.produce(topic, 0, [encode_value(f"event {i}") for i in numbers], headers=meta)

    def expected(numbers: range) -> dict[str, bytes]:
        return {f"o-{i:02d}": f"event {i}".encode() for i in numbers}

    breaker: list[tuple[bool, str]] = []
    first, second = moto_process(port), moto_process(port)  # both import moto now

    async def scenario() -> tuple[dict[str, bytes], dict[str, bytes]]:
        client = AsyncSpuClient(spu_addr)
        runner = sink_runner(client, topic, url, bucket, lambda opened, why: breaker.append((opened, why)))
        # Tremor's `reconnect = {"retry": {"interval_ms": 100, "growth_rate": 1}}`: back soon after S3 is
        runner.connect_shared.policy = ReconnectPolicy.of({"retry": {"interval_ms": 100, "growth_rate": 1}})
        with serving(first, port):
            s3_client(url).create_bucket(Bucket=bucket)
            assert await runner.connect()
            pump = asyncio.create_task(runner.run())
            produce(range(4))
            await wait_for(lambda: runner.committed.get(topic) == 3, what="o-00 to o-02 acknowledged")
            before = objects(url, bucket)  # o-03 is being written: its upload waits for o-04
        # moto's server is SIGKILLed
        produce(range(4, 8))
        await wait_for(lambda: breaker[-1][0], what="the breaker to open")
        assert "S3 unreachable" in breaker[-1][1]
        assert runner.committed[topic] == 3  # nothing acknowledged while S3 is away
        with serving(second, port):
            s3_client(url).create_bucket(Bucket=bucket)
            await wait_for(lambda: not breaker[-1][0], what="the breaker to close")
            await wait_for(lambda: runner.committed.get(topic) == 7, what="o-03 to o-06 acknowledged")
            runner.stop.set()  # the flow stops: o-07 is completed
            await pump
            assert runner.committed[topic] == 8
            after = objects(url, bucket)
        await client.close()
        return before, after

    try:
        before, after = run(scenario(), timeout=60)
    finally:
        for server in (first, second):
            server.kill()
            server.wait()
    assert before == expected(range(3))  # what was acknowledged was in S3
    assert after == expected(range(3, 8))  # and the rest, o-03's lost upload begun again
    assert [opened for opened, _ in breaker] == [True, False, True, False]  # connect, away, back


COPY_FLOW = """
define flow {fid}
flow
  define connector objects from s3_reader
  with codec = "json", preprocessors = ["separate"],
    config = {{"url": "{url}", "bucket": "{bucket}", "prefix": "in/", "max_connections": 1}}
  end;
  define connector copies from s3_streamer
  with codec = "json", postprocessors = ["separate"],
    config = {{"url": "{url}", "bucket": "{bucket}", "mode": "consistent"}}
  end;
  define pipeline rename
  pipeline
    define script to_out
    script
      let $s3_streamer = {{"name": "out/#{{$s3_reader.key}}"}};
      event
    end;
    create script to_out;
    select event from in into to_out;
    select event from to_out into out;
  end;
  create connector objects;
  create connector copies;
  create pipeline rename;
  connect /connector/objects to /pipeline/rename;
  connect /pipeline/rename to /connector/copies;
end;
deploy flow {fid};
"""


def test_a_flow_copies_objects_and_completes_the_last_one_when_it_stops(
    spark: Any, spu_addr: str, s3_url: str, bucket: str, tmp_path: Path
) -> None:
    client = s3_client(s3_url)
    client.put_object(Bucket=bucket, Key="in/a", Body=b'{"n":1}\n{"n":2}\n{"n":3}\n')
    client.put_object(Bucket=bucket, Key="in/b", Body=b'{"n":4}\n{"n":5}\n')
    fid = flow_id("s3copy")

    def completed() -> set[str]:
        return {o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="out/").get("Contents", [])}

    async def scenario() -> None:
        async with running(
            spu_addr, spark, tmp_path / "data", COPY_FLOW.format(fid=fid, url=s3_url, bucket=bucket)
        ):
            # b's upload starts once a is complete, and waits for the flow's stop to complete
            await wait_for(lambda: open_uploads(s3_url, bucket) == [("out/in/b", 0)], what="b's upload")
            assert completed() == {"out/in/a"}

    asyncio.run(scenario())
    assert object_bytes(s3_url, bucket, "out/in/a") == b'{"n":1}\n{"n":2}\n{"n":3}\n'
    assert object_bytes(s3_url, bucket, "out/in/b") == b'{"n":4}\n{"n":5}\n'
