"""An SPU owned by the current process: in a thread (its own event loop) or a child process.

`contraflow run` starts one on loopback when no `--spu` is given; tests and
benchmarks use it too. `start()` returns once the SPU answers API_VERSIONS and
gives the address to hand to clients (port 0 picks a free port).
"""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Literal

import contraflow
from contraflow.errors import UserError
from contraflow.security import client_token
from contraflow.spu.app import ServerConfig, SpuServer
from contraflow.spu.cli.server_commands import READY_PREFIX
from contraflow.spu.client.in_process import close_door, open_door
from contraflow.spu.protocol import HEADER_SIZE, ApiKey, encode_frame, parse_header, unpack_meta
from contraflow.spu.protocol.address import parse_addr

Mode = Literal["thread", "process"]


def probe(addr: str, timeout_s: float = 1.0) -> bool:
    """True if an SPU at `addr` answers API_VERSIONS (a blocking one-off check)."""
    host, port = parse_addr(addr)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(encode_frame(ApiKey.API_VERSIONS, 0, 1, {}))
            head = recv_exactly(sock, HEADER_SIZE)
            header = parse_header(head)
            body = recv_exactly(sock, header.body_length)
            return header.correlation_id == 1 and unpack_meta(body[: header.meta_length]).get("error") == 0
    except (OSError, ValueError, UserError):
        return False


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    """`size` bytes from `sock`, however the peer split them; ConnectionError if it closes first."""
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("closed")
        chunks += chunk
    return bytes(chunks)


def wait_until_ready(addr: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe(addr):
        if time.monotonic() > deadline:
            raise UserError(f"the SPU at {addr} did not become ready within {timeout_s:.0f}s")
        time.sleep(0.02)


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when the process that started it dies (Linux).

    A runtime killed with `kill -9` must not leave its SPU behind holding the
    log's lock, or the next run could not start."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


PR_SET_PDEATHSIG = 1


class EmbeddedSpu:
    """Start/stop an SPU next to this process. Use as a context manager or call start/stop."""

    def __init__(
        self,
        data_dir: str | Path,
        *,
        mode: Mode = "thread",
        public_addr: str = "127.0.0.1:0",
        private_addr: str = "127.0.0.1:0",
        spu_id: int = 0,
        config: ServerConfig | None = None,
        ready_timeout_s: float = 30.0,
        kafka_addr: str | None = None,
    ) -> None:
        base = config or ServerConfig(Path(data_dir))
        self.config = replace(
            base, data_dir=Path(data_dir), public_addr=public_addr, private_addr=private_addr, spu_id=spu_id
        )
        if kafka_addr is not None:
            self.config = replace(self.config, kafka_addr=kafka_addr)
        if self.config.token is None:  # this process's clients send $CONTRAFLOW_TOKEN: expect it
            self.config = replace(self.config, token=client_token())
        self.mode = mode
        self.ready_timeout_s = ready_timeout_s
        self.addr = ""
        self.private_addr = ""
        self.kafka_addr = ""  # HOST:PORT of the Kafka listener once started, if asked for
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._process: subprocess.Popen[bytes] | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> str:
        """Start and wait until ready; returns HOST:PORT of the public port."""
        if self.mode == "thread":
            self._start_thread()
        else:
            self._start_process()
        wait_until_ready(self.addr, self.ready_timeout_s)
        return self.addr

    def stop(self, timeout_s: float = 10.0) -> None:
        """Graceful stop (SIGTERM for a child, then SIGKILL after `timeout_s`)."""
        if self._thread is not None:
            if self._loop is not None and self._stop_event is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._stop_event.set)
            self._thread.join(timeout_s)
            self._thread = None
        if self._process is not None:
            if self._process.poll() is None:
                self._process.send_signal(signal.SIGTERM)
                try:
                    self._process.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
            self._close_pipes()

    def kill(self) -> None:
        """SIGKILL the child process (crash testing); no-op in thread mode."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
            self._close_pipes()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> EmbeddedSpu:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- thread mode -----------------------------------------------------------------------------

    def _start_thread(self) -> None:
        ready = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            server = SpuServer(self.config)
            self._loop = asyncio.get_running_loop()
            self._stop_event = asyncio.Event()
            try:
                await server.start()
            except BaseException as err:
                failure.append(err)
                ready.set()
                await server.stop()
                return
            self.addr = "{}:{}".format(*server.public_addr)
            self.private_addr = "{}:{}".format(*server.private_addr) if server.private_addr else ""
            self.kafka_addr = "{}:{}".format(*server.kafka_addr) if server.kafka_addr else ""
            if server.door is not None:  # this process's clients of it skip the socket
                open_door(self.addr, server.door)
            ready.set()
            try:
                await self._stop_event.wait()
            finally:
                close_door(self.addr)
                await server.stop()

        self._thread = threading.Thread(target=asyncio.run, args=(main(),), name="embedded-spu", daemon=True)
        self._thread.start()
        if not ready.wait(self.ready_timeout_s):
            raise UserError(f"the embedded SPU did not start within {self.ready_timeout_s:.0f}s")
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]

    # -- process mode ----------------------------------------------------------------------------

    def _start_process(self) -> None:
        src = str(Path(contraflow.__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
        args = [
            sys.executable, "-m", "contraflow", "spu", "run",
            "--data-dir", str(self.config.data_dir),
            "--public-addr", self.config.public_addr,
            "--private-addr", self.config.private_addr or "127.0.0.1:0",
            "--id", str(self.config.spu_id),
        ]  # fmt: skip
        if self.config.kafka_addr is not None:
            args += ["--kafka-addr", self.config.kafka_addr]
        if not self.config.scrub:
            args.append("--no-scrub")
        self._process = subprocess.Popen(args, stdout=subprocess.PIPE, env=env, preexec_fn=_die_with_parent)
        line = self._read_ready_line()
        fields = dict(part.split("=", 1) for part in line.split()[2:])
        self.addr, self.private_addr = fields["public"], fields.get("private", "")
        self.kafka_addr = fields.get("kafka", "")

    def _read_ready_line(self) -> str:
        assert self._process is not None and self._process.stdout is not None
        deadline = time.monotonic() + self.ready_timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(self._process.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if selector.select(timeout=0.1):
                    line = self._process.stdout.readline().decode(errors="replace")
                    if line.startswith(READY_PREFIX):
                        return line
                    if not line:
                        break
                if self._process.poll() is not None:
                    break
        self.kill()
        raise UserError(f"the SPU child process did not start (exit code {self._process.poll()})")

    def _close_pipes(self) -> None:
        if self._process is not None and self._process.stdout is not None:
            self._process.stdout.close()
