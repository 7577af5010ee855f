"""A fresh user topic per log connector test (the SPU itself is the shared `spu_addr` fixture)."""

from __future__ import annotations

import itertools

import pytest

from contraflow.spu.client import SpuClient

_topics = itertools.count()


@pytest.fixture()
def topic(spu: SpuClient) -> str:
    name = f"user-topic-{next(_topics)}"
    spu.create_topic(name)
    return name
