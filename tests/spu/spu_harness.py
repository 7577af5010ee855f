"""Shared helpers for the SPU server/client tests: a live SPU on loopback and raw frames."""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.cli_process import start_cli

from contraflow.spu.app import ServerConfig
from contraflow.spu.embedded import EmbeddedSpu, recv_exactly
from contraflow.spu.protocol import HEADER_SIZE, encode_frame, parse_header, unpack_meta
from contraflow.spu.protocol.address import parse_addr
from contraflow.spu.server import Limits


@contextmanager
def running_spu(data_dir: Path, *, addr: str = "127.0.0.1:0", **config: Any) -> Iterator[EmbeddedSpu]:
    """An in-thread SPU; `config` overrides ServerConfig fields (limits, transaction_timeout_s...)."""
    base = replace(ServerConfig(data_dir), **config)
    spu = EmbeddedSpu(data_dir, public_addr=addr, config=base)
    spu.start()
    try:
        yield spu
    finally:
        spu.stop()


@contextmanager
def spu_process(data_dir: Path, *options: str | Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`contraflow spu run` in a child process on loopback (free ports): yields (process,
    public address); SIGTERM at the end unless the test already killed it."""
    proc: subprocess.Popen[str] = start_cli(
        "spu",
        "run",
        "--data-dir",
        data_dir,
        "--public-addr",
        "127.0.0.1:0",
        "--private-addr",
        "127.0.0.1:0",
        *options,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("spu ready"), proc.communicate(timeout=10)[1]
    try:
        yield proc, line.split("public=")[1].split()[0]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def small_limits(**kwargs: int) -> Limits:
    return replace(Limits(), **kwargs)


class RawConnection:
    """A blocking socket speaking frames by hand, to send what a real client never would."""

    def __init__(self, addr: str, timeout_s: float = 5.0) -> None:
        self.sock = socket.create_connection(parse_addr(addr), timeout=timeout_s)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(
        self, api_key: int, fields: dict[str, Any], payload: bytes = b"", cid: int = 7
    ) -> dict[str, Any]:
        self.send(encode_frame(api_key, 0, cid, fields, payload))
        return self.receive()[0]

    def receive(self) -> tuple[dict[str, Any], bytes, int]:
        """(fields, payload, correlation id) of the next frame."""
        header = parse_header(self._exactly(HEADER_SIZE), 1 << 30)
        body = self._exactly(header.body_length)
        return unpack_meta(body[: header.meta_length]), body[header.meta_length :], header.correlation_id

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, TimeoutError):
            return True

    def _exactly(self, size: int) -> bytes:
        return recv_exactly(self.sock, size)

    def close(self) -> None:
        self.sock.close()
