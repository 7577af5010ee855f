"""Connector ingest benchmark: what the file and tcp_server connectors cost over bare reads.

Prints one JSON object. Figures (medians over REPEATS runs, ~200-byte JSON lines):
- `file`: MB/s and lines/s pulling a file through the file connector (8 KiB
  chunks cut on line ends, every chunk acknowledged, checkpoint written) against
  a bare loop reading the same file in 8 KiB chunks in the event loop's thread.
- `tcp_server`: MB/s receiving over loopback through the tcp_server connector
  (bounded inbox, one pull per read) against a bare asyncio stream server.
Each `ratio` is connector / baseline: 1.0 means the connector is free.

Run: PYTHONPATH=src .venv/bin/python benchmarks/connectors.py [--lines N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from contraflow.connectors.base import ConnectorContext, connector_class
from contraflow.lang.graph import ConnectorSpec, PluginRef

REPEATS = 3
CHUNK = 8192


def make_data(lines: int) -> bytes:
    return b"".join(
        orjson.dumps({"ts": 1_700_000_000_000 + i, "host": f"web-{i % 17:02d}", "msg": "x" * 120, "n": i})
        + b"\n"
        for i in range(lines)
    )


def connector(kind: str, config: dict[str, Any], state_dir: Path | None = None) -> Any:
    spec = ConnectorSpec(kind, kind, kind, config, PluginRef("json", {}), [PluginRef("separate", {})])
    ctx = ConnectorContext(kind, "bench", kind, config, spec, logging.getLogger(kind), state_dir=state_dir)
    return connector_class(kind)(ctx)


async def file_connector(path: Path) -> int:
    state = Path(tempfile.mkdtemp(dir=path.parent))  # fresh: a saved checkpoint would resume at the end
    conn = connector("file", {"path": str(path), "mode": "read", "chunk_size": CHUNK}, state)
    await conn.connect()
    total = 0
    while (item := await conn.pull()) is not None:
        total += len(item.data)
        await conn.ack(item.token)
    await conn.close()
    return total


async def file_baseline(path: Path) -> int:
    total = 0
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            total += len(chunk)
            await asyncio.sleep(0)
    return total


async def tcp_connector(data: bytes) -> int:
    conn = connector("tcp_server", {"url": "127.0.0.1:0"})
    await conn.connect()
    sender = asyncio.create_task(_send(conn.port, data))
    total = 0
    while total < len(data):
        item = await conn.pull()
        total += len(item.data or b"")
    await sender
    await conn.close()
    return total


async def tcp_baseline(data: bytes) -> int:
    received = asyncio.get_running_loop().create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        total = 0
        while chunk := await reader.read(CHUNK):
            total += len(chunk)
        received.set_result(total)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    await _send(server.sockets[0].getsockname()[1], data)
    total: int = await received
    server.close()
    return total


async def _send(port: int, data: bytes) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    view = memoryview(data)
    for start in range(0, len(data), 1 << 16):
        writer.write(view[start : start + (1 << 16)])
        await writer.drain()
    writer.close()


def timed(run: Callable[[], Awaitable[int]], size: int) -> float:
    start = time.perf_counter()
    got = asyncio.run(run())
    elapsed = time.perf_counter() - start
    assert got == size, (got, size)
    return size / elapsed / 1e6


def compare(
    connector_run: Callable[[], Awaitable[int]],
    baseline_run: Callable[[], Awaitable[int]],
    size: int,
    lines: int,
) -> dict[str, Any]:
    ours = statistics.median(timed(connector_run, size) for _ in range(REPEATS))
    base = statistics.median(timed(baseline_run, size) for _ in range(REPEATS))
    per_line = lines / size * 1e6
    return {
        "mb_per_s": round(ours, 1),
        "lines_per_s": round(ours * per_line),
        "baseline_mb_per_s": round(base, 1),
        "ratio": round(ours / base, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=100_000)
    args = parser.parse_args()
    data = make_data(args.lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.json"
        path.write_bytes(data)
        results = {
            "lines": args.lines,
            "bytes": len(data),
            "repeats": REPEATS,
            "file": compare(lambda: file_connector(path), lambda: file_baseline(path), len(data), args.lines),
            "tcp_server": compare(
                lambda: tcp_connector(data), lambda: tcp_baseline(data), len(data), args.lines
            ),
        }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
