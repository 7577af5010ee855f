"""Connector ingest benchmark: what the file and tcp_server connectors cost over bare reads.

Prints one JSON object. Figures (medians over REPEATS runs, ~200-byte JSON lines):
- `file`: MB/s and lines/s pulling a file through the file connector (8 KiB
  chunks cut on line ends, every chunk acknowledged, checkpoint written) against
  a bare loop reading the same file in 8 KiB chunks in the event loop's thread.
- `tcp_server`: MB/s receiving over loopback through the tcp_server connector
  (bounded inbox, one pull per read) against a bare asyncio stream server.
Each `ratio` is connector / baseline: 1.0 means the connector is free.

With `--flows`, the socket servers in a whole flow instead: `<kind>_server`
(codec json, `separate`) -> `select event from in into out` -> a file sink, for
tcp, ws and unix sockets, runs interleaved; events/s from the peer's go until
the sink file holds every event. The peers, each in a process of its own
(`--peer-in-process`: on the runtime's event loop, as before): one TCP or unix
socket connection writing the lines in 64 KiB chunks; one WebSocket connection
writing, in 64 KiB chunks too, one masked text message per event (how ws peers
send events) framed by websockets' client protocol before the clock starts. `ratio` is each kind's
rate over tcp's in the same run (target: >= 0.7); `peer_cpu_s`, the CPU seconds
each peer spent feeding, shows whether a peer could be what a flow waits for.
The runs of all kinds are interleaved, so they see the same load: give the
load average with the figures.

With `--ws-ingest`, the ws_server connector alone (pulled in a loop) against a
bare websockets server counting messages, the same peer process sending one
message per event to each, interleaved: `ratio` is bare seconds / connector
seconds (1.0: the connector adds nothing to the library's cost).

Run: PYTHONPATH=src .venv/bin/python benchmarks/connectors.py [--lines N]
     [--flows [--peer-in-process] | --ws-ingest] [--events N] [--repeats N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import statistics
import sys
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
    spec = ConnectorSpec(
        kind, kind, kind, config, codec=PluginRef("json", {}), preprocessors=[PluginRef("separate", {})]
    )
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


# -- socket servers in a whole flow ----------------------------------------------------------------

FLOW_KINDS = ("tcp", "ws", "unix")


def socket_flow(fid: str, kind: str, address: str, out: Path) -> str:
    key = "path" if kind == "unix_socket" else "url"
    return f"""
define flow {fid}
flow
  define connector input from {kind}_server
  with codec = "json", preprocessors = ["separate"], config = {{"{key}": "{address}"}}
  end;
  define connector output from file
  with codec = "json", postprocessors = ["separate"], config = {{"path": "{out}", "mode": "truncate"}}
  end;
  define pipeline pass
  pipeline
    select event from in into out;
  end;
  create connector input;
  create connector output;
  create pipeline pass;
  connect /connector/input to /pipeline/pass;
  connect /pipeline/pass to /connector/output;
end;
deploy flow {fid};
"""


async def feed(kind: str, address: str, data: bytes) -> None:
    """The peer: the lines over one connection, as a client of that kind would send them."""
    if kind == "ws":
        from websockets.asyncio.client import connect

        # close_timeout=None: the closing handshake waits until the flow has read every message
        # (websockets' default aborts the connection after 10 s, dropping what the server had not read).
        async with connect(f"ws://{address}/", compression=None, close_timeout=None) as ws:
            for line in data.splitlines(keepends=True):
                await ws.send(line, text=True)
        return
    if kind == "unix":
        _, writer = await asyncio.open_unix_connection(address)
    else:
        host, port = address.rsplit(":", 1)
        _, writer = await asyncio.open_connection(host, int(port))
    view = memoryview(data)
    for start in range(0, len(data), 1 << 16):
        writer.write(view[start : start + (1 << 16)])
        await writer.drain()
    writer.close()
    await writer.wait_closed()  # everything written is flushed before a peer process exits


class PeerProcess:
    """A peer in a process of its own, as a real one would be (a peer in the runtime's process spends
    the runtime's CPU on its sends: a WebSocket client's per-message framing, masking and syscall)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def ready(cls, kind: str, address: str, data_file: Path) -> PeerProcess:
        """Started, its data read and its imports done: waiting for `go`."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--peer",
            kind,
            address,
            str(data_file),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        await proc.stdout.readline()
        return cls(proc)

    async def go(self) -> float:
        """Feed the data; return once the peer is done, with the CPU seconds its feeding took."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"go\n")
        await self.proc.stdin.drain()
        cpu = await self.proc.stdout.readline()
        if await self.proc.wait() != 0:
            raise RuntimeError("the peer failed")
        return float(cpu)


def run_peer(kind: str, address: str, data_file: Path) -> None:
    """`--peer`: read the data, say ready, wait for the go line, feed it; then print the CPU seconds
    the feeding took (is the peer what a flow waits for?)."""
    data = data_file.read_bytes()
    if kind == "ws":
        asyncio.run(feed_ws_frames(address, data))
        return
    go()
    cpu = time.process_time()
    asyncio.run(feed(kind, address, data))
    print(time.process_time() - cpu, flush=True)


def go() -> None:
    print("ready", flush=True)
    sys.stdin.readline()


async def feed_ws_frames(address: str, data: bytes) -> None:
    """The ws peer process: websockets' client protocol frames one text message per line, masked as
    any client's are, before the go; then the frames are written as the tcp peer writes its lines,
    and the closing handshake waits for the server to have read them all. A live websockets client
    spends tens of microseconds per message (framing, a random mask from the OS, a send); on a loaded
    two-core box that made the peer, not the flow, what a ws run waited for."""
    from websockets.client import ClientProtocol
    from websockets.protocol import State
    from websockets.uri import parse_uri

    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    protocol = ClientProtocol(parse_uri(f"ws://{address}/"))
    protocol.send_request(protocol.connect())
    writer.write(b"".join(protocol.data_to_send()))
    while protocol.state is State.CONNECTING:
        protocol.receive_data(await reader.read(1 << 16))
        protocol.events_received()
    if protocol.state is not State.OPEN:
        raise RuntimeError(f"the WebSocket handshake failed: {protocol.handshake_exc}")
    for line in data.splitlines(keepends=True):
        protocol.send_text(line)
    frames = memoryview(b"".join(protocol.data_to_send()))
    go()
    cpu = time.process_time()
    for start in range(0, len(frames), 1 << 16):
        writer.write(frames[start : start + (1 << 16)])
        await writer.drain()
    protocol.send_close()
    writer.write(b"".join(protocol.data_to_send()))
    while chunk := await reader.read(1 << 16):  # the server's close comes after it read every message
        protocol.receive_data(chunk)
    writer.close()
    print(time.process_time() - cpu, flush=True)


async def flow_seconds(
    spu: str, spark: Any, work: Path, fid: str, kind: str, data: bytes, events: int, in_process: bool
) -> tuple[float, float | None]:
    """Seconds from the peer's go until the flow's sink file holds every event, and the CPU seconds
    the peer spent feeding (None when it is in this process): far below the flow's seconds, the peer
    is not what the flow waits for."""
    from contraflow.runtime.runtime import Runtime

    address = str(work / f"{fid}.sock") if kind == "unix" else f"127.0.0.1:{free_port()}"
    out = work / f"{fid}.out.jsonl"
    troy = socket_flow(fid, "unix_socket" if kind == "unix" else kind, address, out)
    runtime = Runtime(spu, spark, work / "data")
    await runtime.deploy(troy, "<bench>")
    peer_cpu = None
    if in_process:
        started = time.perf_counter()
        await feed(kind, address, data)
    else:
        data_file = work / f"{fid}.in"
        data_file.write_bytes(data)
        peer = await PeerProcess.ready(kind, address, data_file)
        started = time.perf_counter()
        peer_cpu = await peer.go()
    counted = LineCounter(out)
    while counted.lines() < events:
        await asyncio.sleep(0.02)
    elapsed = time.perf_counter() - started
    await runtime.quiesce_all(shutdown=False)
    return elapsed, peer_cpu


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LineCounter:
    """The lines of a growing file, reading only what was added since the last look: the poll runs on
    the runtime's event loop, and re-reading the whole output every 20 ms cost a slow flow's runtime a
    fifth of its CPU (the longer a flow took, the more it was slowed down)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.count = 0

    def lines(self) -> int:
        if self.path.exists():
            with self.path.open("rb") as f:
                f.seek(self.offset)
                added = f.read()
            self.offset += len(added)
            self.count += added.count(b"\n")
        return self.count


def flows(events: int, repeats: int, in_process: bool) -> dict[str, Any]:
    """tcp, ws and unix socket servers through the same passthrough flow, interleaved."""
    from contraflow.spark.session import session
    from contraflow.spu.embedded import EmbeddedSpu

    data = make_data(events)
    seconds: dict[str, list[float]] = {kind: [] for kind in FLOW_KINDS}
    peer_cpu: dict[str, list[float]] = {kind: [] for kind in FLOW_KINDS}
    with tempfile.TemporaryDirectory(prefix="contraflow-bench-") as tmp:
        work = Path(tmp)
        with EmbeddedSpu(work / "spu", mode="process") as spu:
            spark = session(master="local[2]", data_dir=work)
            warmup = make_data(events // 20)  # Spark's Python workers start cold
            asyncio.run(
                flow_seconds(spu.addr, spark, work, "warmup", "tcp", warmup, events // 20, in_process)
            )
            for i in range(repeats):
                for kind in FLOW_KINDS:
                    fid = f"{kind}{i}"
                    elapsed, cpu = asyncio.run(
                        flow_seconds(spu.addr, spark, work, fid, kind, data, events, in_process)
                    )
                    seconds[kind].append(elapsed)
                    if cpu is not None:
                        peer_cpu[kind].append(cpu)
            spark.stop()
    rates = {kind: events / statistics.median(s) for kind, s in seconds.items()}
    return {
        "events": events,
        "repeats": repeats,
        "peer": "in the runtime's process" if in_process else "a process of its own",
        "load_average": [round(x, 2) for x in os.getloadavg()],
        **{
            kind: {
                "events_per_s": round(rate),
                "seconds": [round(x, 2) for x in seconds[kind]],
                "ratio_to_tcp": round(rate / rates["tcp"], 3),
                # the peer's CPU seconds for its feeding, per run: well under `seconds`, it is not the bottleneck
                "peer_cpu_s": [round(x, 2) for x in peer_cpu[kind]],
            }
            for kind, rate in rates.items()
        },
    }


# -- ws_server alone against a bare websockets server ------------------------------------------------


async def ws_pulled_seconds(data_file: Path, size: int) -> float:
    """Seconds from the peer's go until the ws_server connector handed out every byte."""
    conn = connector("ws_server", {"url": "127.0.0.1:0"})
    await conn.connect()
    peer = await PeerProcess.ready("ws", f"127.0.0.1:{conn.port}", data_file)
    started = time.perf_counter()
    sending = asyncio.create_task(peer.go())
    total = 0
    while total < size:
        item = await conn.pull()
        total += len(item.data or b"")
    elapsed = time.perf_counter() - started
    await sending
    await conn.close()
    return elapsed


async def ws_bare_seconds(data_file: Path, messages: int) -> float:
    """Seconds from the peer's go until a bare websockets server received every message."""
    from websockets.asyncio.server import ServerConnection, serve

    received = 0
    done = asyncio.Event()

    async def count(ws: ServerConnection) -> None:
        nonlocal received
        async for _ in ws:
            received += 1
            if received == messages:
                done.set()

    async with serve(count, "127.0.0.1", 0, compression=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        peer = await PeerProcess.ready("ws", f"127.0.0.1:{port}", data_file)
        started = time.perf_counter()
        await peer.go()
        await done.wait()
        return time.perf_counter() - started


def ws_ingest(events: int, repeats: int) -> dict[str, Any]:
    """The ws_server connector against a bare websockets server, the same peer process sending one
    message per event: what the connector adds to the library's own cost (ratio 1.0: nothing)."""
    data = make_data(events)
    with tempfile.TemporaryDirectory() as tmp:
        data_file = Path(tmp) / "events.json"
        data_file.write_bytes(data)
        ours, bare = [], []
        for _ in range(repeats):  # interleaved, so both see the same load
            ours.append(asyncio.run(ws_pulled_seconds(data_file, len(data))))
            bare.append(asyncio.run(ws_bare_seconds(data_file, events)))
    return {
        "events": events,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "ws_server_events_per_s": round(events / statistics.median(ours)),
        "bare_websockets_events_per_s": round(events / statistics.median(bare)),
        "ratio": round(statistics.median(bare) / statistics.median(ours), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--flows", action="store_true", help="the socket servers in a whole flow")
    parser.add_argument("--events", type=int, default=50_000, help="events per flow run (--flows)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs per kind (--flows)")
    parser.add_argument(
        "--peer-in-process", action="store_true", help="(--flows) the peer on the runtime's event loop"
    )
    parser.add_argument("--ws-ingest", action="store_true", help="ws_server alone against bare websockets")
    parser.add_argument("--peer", nargs=3, metavar=("KIND", "ADDRESS", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        run_peer(args.peer[0], args.peer[1], Path(args.peer[2]))
        return
    if args.flows:
        print(json.dumps(flows(args.events, args.repeats, args.peer_in_process)))
        return
    if args.ws_ingest:
        print(json.dumps(ws_ingest(args.events, args.repeats)))
        return
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
