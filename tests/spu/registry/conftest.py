"""A schema registry per test (its own topic) beside one SPU with a Kafka listener, in threads."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.registry import RegistryServer

_topics = itertools.count()


class RegistryThread:
    """A `RegistryServer` on an event loop of its own thread, for tests whose clients block."""

    def __init__(self, spu_addr: str, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.server = self._run(self._make(spu_addr, options))
        self.url = f"http://{self._run(self.server.start())}"

    async def _make(self, spu_addr: str, options: dict[str, Any]) -> RegistryServer:
        return RegistryServer(spu_addr, "127.0.0.1:0", **options)  # its client belongs to this loop

    def _run(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(30)

    def stop(self) -> None:
        self._run(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture(scope="session")
def registry_spu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedSpu]:
    with EmbeddedSpu(tmp_path_factory.mktemp("registry-spu"), kafka_addr="127.0.0.1:0") as spu:
        yield spu


@pytest.fixture()
def registry_url(registry_spu: EmbeddedSpu) -> Iterator[str]:
    registry = RegistryThread(registry_spu.addr, topic=f"schemas-{next(_topics)}")
    yield registry.url
    registry.stop()
