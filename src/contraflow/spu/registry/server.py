"""The registry as a listener of an SPU process: its REST API on `--registry-addr`, its data in the log.

It runs in the event loop of whoever starts it (`contraflow spu run`, or the
runtime of `contraflow run`) and reaches the log through the SPU's public port
like any client, with the same token; TLS on the SPU's certificate.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from contraflow.asgi_server import EmbeddedAsgiServer
from contraflow.errors import UserError
from contraflow.spu.client import AsyncSpuClient
from contraflow.spu.protocol.address import parse_addr
from contraflow.spu.registry.http import registry_app
from contraflow.spu.registry.service import RegistryService
from contraflow.spu.registry.state import RegistryTable
from contraflow.spu.registry.topic import SCHEMAS_TOPIC, SchemasTopic

GRACEFUL_SHUTDOWN_S = 2.0


class RegistryServer:
    """`await start()` returns the bound `host:port`; `await stop()` closes the listener and client."""

    def __init__(
        self,
        spu_addr: str,
        addr: str,
        *,
        token: str | None = None,
        tls: tuple[str | Path, str | Path] | None = None,
        topic: str = SCHEMAS_TOPIC,
    ) -> None:
        try:
            host, port = parse_addr(addr)
        except ValueError as err:
            raise UserError(f"--registry-addr: {err}") from None
        self.client = AsyncSpuClient(spu_addr, token=token)
        self.table = RegistryTable()
        self.service = RegistryService(SchemasTopic(self.client, self.table.apply, topic), self.table)
        cert, key = (str(tls[0]), str(tls[1])) if tls else (None, None)
        self._http = EmbeddedAsgiServer(
            registry_app(self.service, token),
            host,
            port,
            error=UserError,
            purpose="the schema registry",
            graceful_shutdown_s=GRACEFUL_SHUTDOWN_S,
            tls_cert=cert,
            tls_key=key,
        )

    async def start(self) -> str:
        await self.service.topic.open()  # the registry answers only once it holds the whole log
        return await self._http.start()

    async def stop(self) -> None:
        await self._http.stop()
        await self.client.close()


class ThreadedRegistry:
    """A `RegistryServer` on an event loop of its own thread, for callers whose clients block
    (tests, benchmarks): `url` once started, `stop()` when done."""

    def __init__(self, spu_addr: str, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="schema-registry", daemon=True)
        self._thread.start()
        self.server: RegistryServer = self._run(self._make(spu_addr, options))
        self.url = f"http://{self._run(self.server.start())}"

    async def _make(self, spu_addr: str, options: dict[str, Any]) -> RegistryServer:
        return RegistryServer(spu_addr, "127.0.0.1:0", **options)  # its SPU client belongs to this loop

    def _run(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(30)

    def stop(self) -> None:
        self._run(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
