"""One SPU with its Kafka listener for the Kafka tests, and a fresh topic per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from contraflow.spu.embedded import EmbeddedSpu

_names = itertools.count()


@pytest.fixture(scope="session")
def kafka_spu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedSpu]:
    with EmbeddedSpu(tmp_path_factory.mktemp("kafka-spu"), kafka_addr="127.0.0.1:0") as spu:
        yield spu


@pytest.fixture()
def bootstrap(kafka_spu: EmbeddedSpu) -> str:
    return kafka_spu.kafka_addr


@pytest.fixture()
def fresh_name() -> str:
    return f"kafka-test-{next(_names)}"
