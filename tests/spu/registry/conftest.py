"""A schema registry per test (its own topic) beside one SPU with a Kafka listener, in threads."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.registry import ThreadedRegistry

_topics = itertools.count()


@pytest.fixture(scope="session")
def registry_spu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedSpu]:
    with EmbeddedSpu(tmp_path_factory.mktemp("registry-spu"), kafka_addr="127.0.0.1:0") as spu:
        yield spu


@pytest.fixture()
def registry_url(registry_spu: EmbeddedSpu) -> Iterator[str]:
    registry = ThreadedRegistry(registry_spu.addr, topic=f"schemas-{next(_topics)}")
    yield registry.url
    registry.stop()
