"""One SPU process: opens the store, recovers transactions, listens on two ports.

It composes what sits below it: the node (its partitions, and its membership,
alone or in the cluster of `controller_addr`, chosen here once), the SPU
protocol's door onto it, and the Kafka listener's when asked for one.

The public port serves producers, consumers and admin; the private port serves
replication between SPUs of a cluster (`controller_addr`; docs/spu-cluster.md)
and answers API_VERSIONS only on a lone SPU.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contraflow.spu.node.exactly_once.journal import BatchLedger
from contraflow.spu.node.exactly_once.rollback import truncate_partition_dir
from contraflow.spu.node.exactly_once.transactions import TransactionCoordinator
from contraflow.spu.node.membership import REPLICATION_APIS, ClusterMember, LoneSpu, Membership
from contraflow.spu.node.partitions import Partitions
from contraflow.spu.node.signals import PartitionSignals
from contraflow.spu.protocol import ApiKey
from contraflow.spu.protocol.address import parse_addr, tune_socket
from contraflow.spu.rpc.budget import ByteBudget, ConnectionCount, SharedLimits
from contraflow.spu.rpc.server import Connection, Dispatch, Limits
from contraflow.spu.server.handlers import Handlers
from contraflow.spu.server.in_process import InProcessDoor
from contraflow.spu.server.streams import StreamRegistry
from contraflow.spu.storage.scrub import Scrubber
from contraflow.spu.storage.store import Store

if TYPE_CHECKING:
    from contraflow.spu.kafka import KafkaListener

log = logging.getLogger(__name__)

LEDGER_PATH = Path("transactions") / "ledger.log"
STAGING_DIR = Path("transactions") / "spill"  # staged batches past the memory limit (unlinked files)
# Replication between SPUs and the controller's own APIs are not for clients.
PUBLIC_APIS = frozenset(ApiKey) - REPLICATION_APIS - {ApiKey.SC_HEARTBEAT, ApiKey.SC_ALTER_ISR}
READ_AHEAD = 256 * 1024


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path
    public_addr: str = "127.0.0.1:9005"
    private_addr: str | None = "127.0.0.1:9006"
    spu_id: int = 0
    limits: Limits = field(default_factory=Limits)
    transaction_timeout_s: float = 60.0
    worker_threads: int = 8
    token: str | None = None  # clients must AUTHENTICATE with it first (None: no handshake)
    tls: ssl.SSLContext | None = None  # serve TLS on the public and private ports
    kafka_addr: str | None = None  # the Kafka protocol listener (docs/kafka.md), off by default
    controller_addr: str | None = None  # join the cluster of this controller (docs/spu-cluster.md)
    scrub: bool = True  # CRC-check the existing log in the background (storage/scrub.py)


class SpuServer:
    """Start with `await start()`, stop with `await stop()`; `public_addr` is the bound address."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._executor = ThreadPoolExecutor(config.worker_threads, thread_name_prefix="spu-io")
        self._servers: list[asyncio.Server] = []
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._store: Store | None = None
        self._ledger: BatchLedger | None = None
        self.transactions: TransactionCoordinator
        self._stopped = False
        self.public_addr: tuple[str, int] = ("", 0)
        self.private_addr: tuple[str, int] | None = None
        self._budget: ByteBudget | None = None  # made on the server's loop
        self._connection_count = ConnectionCount(config.limits.max_connections)
        self.kafka_addr: tuple[str, int] | None = None
        self._kafka: KafkaListener | None = None
        self.membership: Membership | None = None  # alone or in a cluster, made at start
        self.scrubber: Scrubber | None = None
        self.door: InProcessDoor | None = None  # a lone SPU's appends and tails for its own process

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        store, ledger, undone = await loop.run_in_executor(self._executor, self._open_storage)
        self._store, self._ledger = store, ledger
        for producer_id, batch_id in undone:
            log.warning("undid the appends of unfinished commit %s/%s", producer_id, batch_id)
        signals = PartitionSignals(loop)
        partitions = Partitions(store, signals.wake_threadsafe)
        self.transactions = TransactionCoordinator(
            ledger,
            partitions,
            spill_dir=store.data_dir / STAGING_DIR,
            timeout_s=self.config.transaction_timeout_s,
            max_staged_bytes_per_owner=self.config.limits.max_staged_bytes,
            memory_limit=self.config.limits.staged_memory_bytes,
        )
        streams = StreamRegistry(partitions, signals)
        membership = self.membership = self._membership(partitions, signals, streams)
        handlers = Handlers(
            partitions, self.transactions, streams, self._executor, self.config.spu_id, membership
        )
        if self.config.controller_addr is None:  # a cluster's clients follow leaders: the network's
            self.door = InProcessDoor(loop, partitions, signals, membership, self._executor)
        try:
            self.public_addr = await self._listen(self.config.public_addr, handlers.dispatch, PUBLIC_APIS)
            if self.config.private_addr is not None:
                private = membership.private_apis | {ApiKey.API_VERSIONS}
                self.private_addr = await self._listen(self.config.private_addr, handlers.dispatch, private)
            if self.config.kafka_addr is not None:
                from contraflow.spu.kafka import Broker, KafkaListener  # imported only when asked for

                broker = Broker(
                    partitions,
                    signals,
                    self._executor,
                    self.config.spu_id,
                    streams.topic_deleted,
                    membership,
                )
                assert self._budget is not None  # made by the first _listen
                shared = SharedLimits(self._budget, self._connection_count)
                self._kafka = KafkaListener(broker, self.config.kafka_addr, shared)
                self.kafka_addr = await self._kafka.start()
        except BaseException:
            await self.stop()  # e.g. the port is taken: release the data directory again
            raise
        self._spawn(self._expire_staging())
        if self.config.scrub:  # once the caller has announced the SPU ready
            self.scrubber = Scrubber(store)
            loop.call_soon(self.scrubber.start)
        membership.start(self._spawn, self._addresses())

    def _membership(
        self, partitions: Partitions, signals: PartitionSignals, streams: StreamRegistry
    ) -> Membership:
        """Alone, or in the cluster of `controller_addr`: chosen here, once."""
        if self.config.controller_addr is None:
            return LoneSpu(partitions, self.transactions, self._executor, streams.topic_deleted)
        if self.config.private_addr is None:
            raise ValueError("an SPU of a cluster needs a private port (replication)")
        return ClusterMember(
            self.config.spu_id,
            self.config.controller_addr,
            partitions,
            signals,
            self.transactions,
            self._executor,
        )

    def _addresses(self) -> dict[str, str]:
        """The bound addresses, as the controller hands them to clients and other SPUs."""
        bound = {"public": self.public_addr, "private": self.private_addr, "kafka": self.kafka_addr}
        return {name: "{}:{}".format(*addr) for name, addr in bound.items() if addr is not None}

    def _open_storage(self) -> tuple[Store, BatchLedger, list[tuple[str, int]]]:
        """Open the store (takes the data-directory lock) and the ledger, then undo the
        appends of commits a crash interrupted: before any partition is opened (they
        open lazily), so the engine's recovery sees the already-cut logs."""
        # In a cluster each partition's leader moves the high watermark, not the local fsync.
        store = Store(self.config.data_dir, hw_follows_flush=self.config.controller_addr is None)
        try:
            ledger = BatchLedger(self.config.data_dir / LEDGER_PATH)
            topics = store.topics_dir

            def cut(tp: tuple[str, int], offset: int) -> None:
                truncate_partition_dir(topics / tp[0] / str(tp[1]), offset)

            undone = TransactionCoordinator.recover(ledger, cut)
        except BaseException:
            store.close()
            raise
        return store, ledger, undone

    async def _listen(
        self, addr: str, dispatch: Dispatch, allowed: frozenset[ApiKey] | None
    ) -> tuple[str, int]:
        host, port = parse_addr(addr)

        limits = self.config.limits
        if self._budget is None:
            self._budget = ByteBudget(limits.max_buffered_bytes)
        budget = self._budget

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if not self._connection_count.try_open():
                log.warning(
                    "refused a connection: %d connections open (--max-connections)", limits.max_connections
                )
                writer.transport.abort()
                return
            try:
                if not tune_socket(writer.get_extra_info("socket")):
                    return  # the peer closed the connection before it was served
                conn = Connection(reader, writer, dispatch, limits, allowed, budget, self.config.token)
                self._connections.add(conn)
                try:
                    await conn.serve()
                finally:
                    self._connections.discard(conn)
                    self.transactions.release_owner(conn.id)
            finally:
                self._connection_count.close()

        # The reader's read-ahead (twice this limit) is held per connection outside the
        # byte budget, so it is kept small: --max-connections x 2 x READ_AHEAD at most.
        server = await asyncio.start_server(on_connect, host, port, limit=READ_AHEAD, ssl=self.config.tls)
        self._servers.append(server)
        bound = server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _expire_staging(self) -> None:
        """Drop the staging of writers that went quiet (checked a few times per timeout)."""
        interval = max(0.05, min(1.0, self.config.transaction_timeout_s / 4))
        while True:
            await asyncio.sleep(interval)
            for producer_id, batch_id in self.transactions.expire():
                log.info("dropped staged batch %s/%s after the transaction timeout", producer_id, batch_id)

    async def stop(self) -> None:
        """Stop listening, drop connections, close the store and ledger (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        for server in self._servers:
            server.close()
        if self._kafka is not None:
            await self._kafka.stop()
        for task in list(self._tasks):
            task.cancel()
        if self.membership is not None:
            await self.membership.close()
        await asyncio.gather(*(c.close() for c in list(self._connections)), return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._executor.shutdown(wait=True)
        if self.scrubber is not None:
            self.scrubber.stop()
        if self._ledger is not None:
            self._ledger.close()
        if self._store is not None:
            self._store.close()

    async def serve_forever(self) -> None:
        await asyncio.gather(*(s.serve_forever() for s in self._servers))
