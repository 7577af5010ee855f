"""One Spark session and one SPU for all Spark tests: starting Spark costs seconds."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu

_names = itertools.count()


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


@pytest.fixture()
def spu(spu_addr: str) -> Iterator[SpuClient]:
    client = SpuClient(spu_addr)
    yield client
    client.close()


@pytest.fixture()
def topic_name() -> str:
    return f"t{next(_names)}"


@pytest.fixture()
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")
