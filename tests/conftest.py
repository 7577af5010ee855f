"""Fixtures shared across test areas: one SPU and one Spark session per test run (Spark costs seconds)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu
from tests.e2e.run_process import kill_leftovers


@pytest.fixture(scope="session")
def spu_addr(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with EmbeddedSpu(tmp_path_factory.mktemp("spu"), mode="thread") as spu:
        yield spu.addr


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from contraflow.spark import session

    spark = session(master="local[2]", data_dir=tmp_path_factory.mktemp("spark"))
    yield spark
    spark.stop()


@pytest.fixture(autouse=True)
def _runs_end_with_their_test() -> Iterator[None]:
    """A `contraflow run` child dies with the test that started it, even one that failed or was
    timed out (pytest-timeout raises in the test) before killing it."""
    yield
    kill_leftovers()


@pytest.fixture()
def spu(spu_addr: str) -> Iterator[SpuClient]:
    client = SpuClient(spu_addr)
    yield client
    client.close()


# A disk that fills for real: tests run as root (as CI does); a failed mount fails the test.
SMALL_DISK = "4m"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a tmpfs of SMALL_DISK bytes, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)
