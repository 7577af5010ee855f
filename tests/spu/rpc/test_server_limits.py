"""Issue 17 #2: the SPU's memory and connections are bounded for the whole process,
checked against a real `contraflow spu run` process over real sockets."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from tests.spu.spu_harness import spu_process

from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import ApiKey, encode_frame
from contraflow.spu.protocol.address import parse_addr

MiB = 1 << 20
FRAME_BYTES = 16 * MiB - 4096  # just under the default frame limit


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def connect(addr: str) -> socket.socket:
    return socket.create_connection(parse_addr(addr), timeout=10)


def closed_by_peer(sock: socket.socket, within_s: float) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def send_most_of(sock: socket.socket, frame: memoryview, stop: threading.Event) -> None:
    """Push all but the last 4 KiB of a frame, as far as the SPU takes it, until told to stop."""
    sock.settimeout(0.5)
    sent, end = 0, len(frame) - 4096
    while sent < end and not stop.is_set():
        try:
            sent += sock.send(frame[sent:end])
        except TimeoutError:
            continue
        except OSError:
            return


def round_trip(addr: str, value: bytes) -> None:
    with SpuClient(addr) as client:
        first, _ = client.produce("t", 0, [value])
        [batch] = client.fetch("t", 0, first).batches
        assert bytes(batch.values()[0]) == value


def test_many_partial_16mib_frames_stay_within_the_buffer_cap(tmp_path: Path) -> None:
    cap = 64 * MiB
    frame = memoryview(encode_frame(ApiKey.PRODUCE, 0, 1, {}, bytes(FRAME_BYTES)))
    with spu_process(tmp_path, "--max-buffered-bytes", "64MiB") as (proc, addr), ExitStack() as stack:
        with SpuClient(addr) as client:
            client.create_topic("t")
        stop = threading.Event()
        stack.callback(stop.set)
        senders = []
        for _ in range(60):
            sock = stack.enter_context(connect(addr))
            sender = threading.Thread(target=send_most_of, args=(sock, frame, stop), daemon=True)
            sender.start()
            senders.append(sender)
        time.sleep(3)  # let the SPU take in all it will
        round_trip(addr, b"served meanwhile")
        peak = rss_bytes(proc.pid, "VmHWM")
        assert peak <= cap + 100 * MiB, f"peak RSS {peak / MiB:.0f} MiB with a {cap / MiB:.0f} MiB cap"
        stop.set()
        for sender in senders:
            sender.join(timeout=10)
    assert proc.returncode == 0, "the SPU stopped cleanly: it never died"


def test_stalled_half_frames_are_closed_after_the_frame_deadline(tmp_path: Path) -> None:
    with spu_process(tmp_path, "--frame-timeout", "1s") as (_, addr), ExitStack() as stack:
        stalled = [stack.enter_context(connect(addr)) for _ in range(500)]
        for sock in stalled:
            sock.sendall(b"\x00\x00\x01")  # 3 bytes of a frame header, then nothing
        started = time.monotonic()
        assert all(closed_by_peer(sock, within_s=15) for sock in stalled)
        assert time.monotonic() - started < 15
        with SpuClient(addr) as client:
            client.create_topic("t")
        round_trip(addr, b"still serving")


def test_connections_past_the_limit_are_refused_and_idle_ones_closed(tmp_path: Path) -> None:
    options = ("--max-connections", "4", "--idle-timeout", "2s")
    with spu_process(tmp_path, *options) as (_, addr), ExitStack() as stack:
        held = [stack.enter_context(connect(addr)) for _ in range(4)]
        time.sleep(0.2)
        newest = stack.enter_context(connect(addr))
        assert closed_by_peer(newest, within_s=5), "the fifth connection is closed at once"
        assert not closed_by_peer(held[0], within_s=0.5), "the first four stay open"
        assert all(closed_by_peer(sock, within_s=10) for sock in held), "idle connections are closed"
        with SpuClient(addr) as client:  # room again
            client.create_topic("t")
        round_trip(addr, b"after the idle ones left")
