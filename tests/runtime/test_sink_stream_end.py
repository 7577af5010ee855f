"""A sink whose postprocessors end their stream per batch (`streaming-compress`): what reached the file is
whole compressed streams after every batch, and a restarted sink appends a new one."""

from __future__ import annotations

import asyncio
import io
import json
import lzma
import uuid
from pathlib import Path

import pytest
import zstandard

from contraflow.codecs import ConfigError, postprocessors
from contraflow.spu.client import AsyncSpuClient
from contraflow.spu.protocol.topics import TopicConfig
from tests.runtime.sink_support import file_sink_runner
from tests.runtime.test_sink_log_outage import until

XZ_MAGIC = b"\xfd7zXZ\x00"


def decompressed(out: Path) -> list[int] | None:
    """The events in the file, or None while it is not whole xz streams."""
    try:
        text = lzma.decompress(out.read_bytes()) if out.exists() else b""
    except lzma.LZMAError:
        return None
    return [json.loads(line)["n"] for line in text.splitlines()]


def test_streaming_compress_leaves_whole_streams_after_each_batch_and_across_a_restart(
    spu_addr: str, tmp_path: Path
) -> None:
    topic = f"stream-end-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "out.json.xz"
    chain = ["separate", ("streaming-compress", {"algorithm": "xz2"})]

    async def deliver_until(client: AsyncSpuClient, expected: list[int]) -> None:
        runner = file_sink_runner(client, out, topic, chain)
        assert await runner.connect()
        running = asyncio.create_task(runner.run())
        await until(lambda: decompressed(out) == expected, f"events {expected} in whole streams")
        runner.stop.set()
        await running

    async def scenario() -> None:
        client = AsyncSpuClient(spu_addr)
        await client.create_topic(topic, TopicConfig(partitions=1))
        await client.produce(topic, 0, [json.dumps({"n": n}).encode() for n in range(5)])
        await deliver_until(client, list(range(5)))
        await client.produce(topic, 0, [json.dumps({"n": n}).encode() for n in range(5, 10)])
        await deliver_until(client, list(range(10)))  # a new runner: resumes after what was delivered
        await client.close()

    asyncio.run(scenario())
    assert out.read_bytes().count(XZ_MAGIC) >= 2  # the restart began a stream of its own


def test_streaming_compress_takes_tremors_algorithms_and_either_name() -> None:
    chain = postprocessors([{"name": "stream-compress", "config": {"algorithm": "zstd", "level": 5}}])
    first = b"".join([*chain.process(b"a\n"), *chain.process(b"b\n"), *chain.finish()])
    second = b"".join([*chain.process(b"c\n"), *chain.finish()])  # after `finish`, a new stream
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(first + second), read_across_frames=True)
    assert reader.read() == b"a\nb\nc\n"
    with pytest.raises(ConfigError, match="must be one of 'xz2', 'zstd', got 'gzip'"):
        postprocessors([{"name": "streaming-compress", "config": {"algorithm": "gzip"}}])
