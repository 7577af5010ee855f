"""One SPU (in a thread) for the log connector tests."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu

_topics = itertools.count()


@pytest.fixture(scope="session")
def spu_addr(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data: Path = tmp_path_factory.mktemp("spu")
    with EmbeddedSpu(data, mode="thread") as spu:
        yield spu.addr


@pytest.fixture()
def spu(spu_addr: str) -> Iterator[SpuClient]:
    client = SpuClient(spu_addr)
    yield client
    client.close()


@pytest.fixture()
def topic(spu: SpuClient) -> str:
    name = f"user-topic-{next(_topics)}"
    spu.create_topic(name)
    return name
