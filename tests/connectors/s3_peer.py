"""moto's S3 server on loopback, and boto3 as the other side of the s3 connectors."""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
_buckets = itertools.count()


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's server on 127.0.0.1 (a free port), its URL; the AWS SDK's credentials in the environment
    (the connectors, and child processes, find them there)."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    with pytest.MonkeyPatch.context() as env:
        for name, value in CREDENTIALS.items():
            env.setenv(name, value)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


# moto's server started by a line on stdin: a process can import moto (most of its start-up) early.
_SERVE_ON_CUE = "import sys, moto.server; sys.stdin.readline(); moto.server.main(sys.argv[1:])"


def moto_process(port: int) -> subprocess.Popen[bytes]:
    """moto's server as a process of its own, to listen on 127.0.0.1:`port` once `serve`d. Its buckets
    die with it (SIGKILL it to take S3 away)."""
    args = [sys.executable, "-c", _SERVE_ON_CUE, "-H", "127.0.0.1", "-p", str(port)]
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextlib.contextmanager
def serving(server: subprocess.Popen[bytes], port: int) -> Iterator[None]:
    """`server` (a `moto_process`) listens on `port` until the block ends; then it is killed."""
    try:
        assert server.stdin is not None
        server.stdin.write(b"serve\n")
        server.stdin.flush()
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, f"moto's server exited with {server.returncode}"
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline, "moto's server did not start listening"
            time.sleep(0.05)
        yield
    finally:
        server.kill()
        server.wait()


def s3_client(url: str) -> Any:
    return boto3.client("s3", endpoint_url=url, region_name="us-east-1")


def new_bucket(url: str) -> str:
    """A fresh bucket (tests share one server)."""
    name = f"bucket-{next(_buckets)}"
    s3_client(url).create_bucket(Bucket=name)
    return name


def object_bytes(url: str, bucket: str, key: str) -> bytes:
    body: bytes = s3_client(url).get_object(Bucket=bucket, Key=key)["Body"].read()
    return body


def open_uploads(url: str, bucket: str) -> list[tuple[str, int]]:
    """(key, parts uploaded) of every multipart upload not completed yet; one completed (or
    aborted) between the listing and its parts' listing is no longer open, not an error."""
    client = s3_client(url)
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    found: list[tuple[str, int]] = []
    for u in uploads:
        try:
            parts = client.list_parts(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
        except client.exceptions.NoSuchUpload:
            continue
        found.append((u["Key"], len(parts.get("Parts", []))))
    return found
