"""Issue 17: TLS on the SPU (`spu run --tls-cert --tls-key`, clients `--tls-ca`), with a
self-signed certificate made by the openssl command for 127.0.0.1."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.cli_process import run_cli, self_signed_certificate
from tests.spu.spu_harness import spu_process

from contraflow.spu.protocol import HEADER_SIZE, ApiKey, encode_frame


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("tls"))


@contextmanager
def tls_spu(data_dir: Path, cert: Path, key: Path, *options: str) -> Iterator[str]:
    with spu_process(data_dir, "--tls-cert", cert, "--tls-key", key, *options) as (_, addr):
        yield addr


def test_the_cli_talks_tls_to_the_spu_with_the_ca(tmp_path: Path, certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    with tls_spu(tmp_path / "data", cert, key, "--token", "tls-token") as addr:
        env = {"CONTRAFLOW_TOKEN": "tls-token"}
        assert run_cli("topic", "create", "t", "--spu", addr, "--tls-ca", cert, env=env).returncode == 0
        lines = "\n".join(f"line {i}" for i in range(2000)) + "\n"
        produced = run_cli("produce", "t", "--spu", addr, "--tls-ca", cert, stdin=lines, env=env)
        assert produced.returncode == 0, produced.stderr
        consumed = run_cli("consume", "t", "-B", "-d", "--spu", addr, "--tls-ca", cert, env=env)
        assert consumed.returncode == 0 and consumed.stdout == lines, "fetches (sendfile falls back) over TLS"
        plain = run_cli("topic", "list", "--spu", addr, env=env)
        assert plain.returncode != 0 and "Traceback" not in plain.stderr, "no TLS: no conversation"


def test_a_plain_connection_to_a_tls_spu_gets_nothing(tmp_path: Path, certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    with tls_spu(tmp_path / "data", cert, key) as addr:
        host, port = addr.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(encode_frame(ApiKey.API_VERSIONS, 0, 1, {}))
            try:
                answer = sock.recv(HEADER_SIZE)
            except ConnectionResetError:
                answer = b""
            assert not answer.startswith(b"\x00"), "no SPU frame comes back in clear text"
        context = ssl.create_default_context(cafile=str(cert))
        with (
            socket.create_connection((host, int(port)), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            tls.sendall(encode_frame(ApiKey.API_VERSIONS, 0, 1, {}))
            assert len(tls.recv(HEADER_SIZE)) > 0, "a verified TLS client is served"
