"""The streaming controller (SC): the one place that decides who leads what.

SPUs heartbeat to it (registering on the first beat) and get the whole cluster
metadata back; it assigns replicas when a topic is created, accepts in-sync-set
changes from a partition's current leader (checked against its epoch), and when
an SPU misses its session timeout (or comes back as a new process) it elects a
new leader from the in-sync set and bumps the leader epoch. Every change is
fsynced to `cluster.json` before anyone hears of it, so a restarted controller
carries on where it stopped; that includes which process of each SPU it last
heard, so an SPU restarted while the controller was down is still seen to have
restarted. While it is down, leaders keep serving; only elections, in-sync-set
changes and topic admin wait for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from contraflow.spu.controller.assignment import assign_replicas
from contraflow.spu.controller.metadata_file import MetadataFile
from contraflow.spu.protocol import REQUEST_TYPES, ApiKey, ErrorCode, FrameHeader, SpuError, parse_request
from contraflow.spu.protocol import messages as m
from contraflow.spu.protocol.address import parse_addr
from contraflow.spu.protocol.cluster_metadata import (
    NO_LEADER,
    ClusterMetadata,
    PartitionState,
    SpuRecord,
    TopicRecord,
)
from contraflow.spu.protocol.frames import unpack_meta
from contraflow.spu.protocol.messages import API_VERSIONS, DEFAULT_SESSION_TIMEOUT_S
from contraflow.spu.protocol.topics import PartitionInfo, TopicConfig, TopicDescription, validate_topic_name
from contraflow.spu.rpc.errors import translate
from contraflow.spu.rpc.server import Connection, Limits, Reply

log = logging.getLogger(__name__)

TOPIC_READY_TIMEOUT_S = 10.0  # topic creation waits this long for the replicas to report it
CHECK_INTERVAL_S = 0.1

ReplicaReport = tuple[int, int, int, int, int, int]  # log start, log end, hw, epoch, size, segments


class Controller:
    """`await start()` returns the bound address; `await stop()`."""

    def __init__(
        self,
        data_dir: Path,
        addr: str = "127.0.0.1:9003",
        *,
        session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
        token: str | None = None,
    ) -> None:
        self._file = MetadataFile(data_dir)
        self._meta, self._incarnations = self._file.load()
        self._addr = addr
        self.session_timeout_s = session_timeout_s
        self._token = token
        self._limits = Limits()
        now = time.monotonic()
        # When each live SPU was last heard. Every known SPU gets a full session after our
        # (re)start before it counts as lost.
        self._last_heard = {spu: now for spu in self._meta.spus}
        self._reports: dict[tuple[str, int], dict[int, ReplicaReport]] = {}
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._monitor: asyncio.Task[None] | None = None
        self.addr: tuple[str, int] = ("", 0)
        self._table: dict[ApiKey, Callable[[Any], Awaitable[Reply]]] = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.AUTHENTICATE: self.authenticate,
            ApiKey.SC_HEARTBEAT: self.heartbeat,
            ApiKey.METADATA: self.metadata,
            ApiKey.SC_ALTER_ISR: self.alter_isr,
            ApiKey.CREATE_TOPIC: self.create_topic,
            ApiKey.DELETE_TOPIC: self.delete_topic,
            ApiKey.LIST_TOPICS: self.list_topics,
            ApiKey.DESCRIBE_TOPIC: self.describe_topic,
        }

    @property
    def cluster(self) -> ClusterMetadata:
        return self._meta

    async def start(self) -> tuple[str, int]:
        host, port = parse_addr(self._addr)

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = Connection(reader, writer, self._dispatch, self._limits, token=self._token)
            self._connections.add(conn)
            try:
                await conn.serve()
            finally:
                self._connections.discard(conn)

        self._server = await asyncio.start_server(on_connect, host, port)
        bound = self._server.sockets[0].getsockname()
        self.addr = (str(bound[0]), int(bound[1]))
        self._monitor = asyncio.create_task(self._watch_sessions())
        return self.addr

    async def stop(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
        if self._server is not None:
            self._server.close()
            await asyncio.gather(*(c.close() for c in list(self._connections)), return_exceptions=True)
            await self._server.wait_closed()

    async def _dispatch(self, conn: Connection, header: FrameHeader, body: memoryview) -> Reply | None:
        api = ApiKey(header.api_key)
        handler = self._table.get(api)
        if handler is None:
            raise SpuError(ErrorCode.UNSUPPORTED_API, f"the controller does not serve {api.name}")
        request: Any = parse_request(REQUEST_TYPES[api], unpack_meta(body[: header.meta_length]))
        try:
            return await handler(request)
        except Exception as err:
            raise translate(err) from err

    def _commit(self) -> None:
        """Persist a change before anyone hears of it (fsync + rename; small file)."""
        self._meta.version += 1
        self._file.save(self._meta, self._incarnations)

    # -- SPUs ------------------------------------------------------------------------------------

    async def api_versions(self, req: m.ApiVersionsRequest) -> Reply:
        return Reply({"apis": [[int(k), lo, hi] for k, (lo, hi) in API_VERSIONS.items()], "spu_id": -1})

    async def authenticate(self, req: m.AuthenticateRequest) -> Reply:
        return Reply()

    async def heartbeat(self, req: m.HeartbeatRequest) -> Reply:
        """Register or refresh an SPU. A new session of a registered SPU is a new process
        (`_new_incarnation`): it stops leading (epoch bump) like a lost SPU."""
        changed = False
        record = self._meta.spus.get(req.spu_id)
        heard = SpuRecord(req.spu_id, req.public_addr, req.private_addr, req.kafka_addr)
        if record != heard:
            self._meta.spus[req.spu_id] = heard
            changed = True
            log.info("SPU %d registered at %s (private %s)", req.spu_id, req.public_addr, req.private_addr)
        self._last_heard[req.spu_id] = time.monotonic()
        if self._new_incarnation(req.spu_id, req.session):
            changed = True
            if record is not None:
                log.info("SPU %d restarted (new session)", req.spu_id)
                self._spu_lost(req.spu_id)
        changed |= self._elect_offline()
        if changed:
            self._commit()
        self._record_reports(req.spu_id, req.partitions)
        return self._metadata_reply()

    def _new_incarnation(self, spu_id: int, session: str) -> bool:
        """Note the SPU process that beats; True when it is not the one last heard (also
        across our restarts: the incarnations are kept with the metadata).

        A new process of a leader must not lead on at its old epoch. It lost what it held
        in memory, and it may have lost the log's unflushed tail (a power loss), which
        its followers hold: at the same epoch its next writes would reuse offsets they
        hold with other records, and the epoch-based truncation (KIP-101) could not see
        it, so acknowledged records would be cut or replicas differ."""
        if self._incarnations.get(spu_id) == session:
            return False
        self._incarnations[spu_id] = session
        return True

    def _record_reports(self, spu_id: int, partitions: list[list[Any]]) -> None:
        for topic, partition, *numbers in partitions:
            self._reports.setdefault((str(topic), int(partition)), {})[spu_id] = tuple(numbers)

    def _metadata_reply(self) -> Reply:
        return Reply(
            {
                "cluster": True,
                "metadata": self._meta.to_dict(),
                "session_timeout_ms": int(self.session_timeout_s * 1000),
            }
        )

    async def metadata(self, req: m.MetadataRequest) -> Reply:
        return self._metadata_reply()

    async def _watch_sessions(self) -> None:
        checked = time.monotonic()
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            now = time.monotonic()
            self._excuse_own_stall(now - checked - CHECK_INTERVAL_S)
            checked = now
            lost = [i for i, heard in self._last_heard.items() if now - heard > self.session_timeout_s]
            changed = False
            for spu_id in lost:
                log.warning("SPU %d missed its session timeout", spu_id)
                del self._last_heard[spu_id]
                changed |= self._spu_lost(spu_id)
            if changed:
                self._commit()

    def _excuse_own_stall(self, stalled_s: float) -> None:
        """The controller's own loop did not run for `stalled_s` (an fsync of the metadata on
        a busy disk, no CPU): the heartbeats sent meanwhile wait unread in the sockets, and
        this check runs before they are read. That time is not the SPUs' silence: their
        sessions are extended by it, or live SPUs would be declared lost."""
        if stalled_s <= CHECK_INTERVAL_S:
            return
        level = logging.WARNING if stalled_s > self.session_timeout_s / 4 else logging.DEBUG
        log.log(
            level, "the controller did not run for %.2fs; the SPUs' sessions are extended by it", stalled_s
        )
        for spu_id in self._last_heard:
            self._last_heard[spu_id] += stalled_s

    # -- elections -------------------------------------------------------------------------------

    def _partitions(self) -> list[tuple[TopicRecord, PartitionState]]:
        return [(t, p) for t in self._meta.topics.values() for p in t.partitions]

    def _spu_lost(self, spu_id: int) -> bool:
        """Move leadership away from `spu_id` and take it out of the in-sync sets."""
        changed = False
        for topic, state in self._partitions():
            if state.leader == spu_id:
                changed |= self._elect(topic, state, avoid=spu_id)
            elif spu_id in state.isr and len(state.isr) > 1:
                state.isr = [r for r in state.isr if r != spu_id]
                changed = True
        return changed

    def _elect_offline(self) -> bool:
        """Partitions without a leader get one as soon as an eligible replica is alive."""
        changed = False
        for topic, state in self._partitions():
            if state.leader == NO_LEADER:
                changed |= self._elect(topic, state, avoid=None)
        return changed

    def _elect(self, topic: TopicRecord, state: PartitionState, avoid: int | None) -> bool:
        """A live in-sync replica other than `avoid` leads, at the next epoch; `avoid`
        itself only if nobody else can (it restarted and is the last in-sync copy).
        An out-of-sync replica only if the topic allows unclean elections."""
        alive = set(self._last_heard)
        clean = [r for r in state.replicas if r in state.isr and r in alive and r != avoid]
        if not clean and avoid is not None and avoid in state.isr and avoid in alive:
            clean = [avoid]
        unclean: list[int] = []
        if not clean and topic.config.unclean_leader_election:
            unclean = [r for r in state.replicas if r in alive]
        chosen = (clean or unclean or [NO_LEADER])[0]
        if chosen == NO_LEADER:
            if state.leader == NO_LEADER:
                return False
            log.warning("%s: no in-sync replica alive; the partition is offline", topic.name)
            state.leader = NO_LEADER
            return True
        state.leader = chosen
        state.leader_epoch += 1
        if unclean:
            state.isr = [chosen]
        elif avoid is not None and avoid != chosen:
            state.isr = [r for r in state.isr if r != avoid]
        log.info(
            "%s: SPU %d leads at epoch %d%s",
            topic.name,
            chosen,
            state.leader_epoch,
            " (unclean)" if unclean else "",
        )
        return True

    async def alter_isr(self, req: m.AlterIsrRequest) -> Reply:
        state = self._meta.partition(req.topic, req.partition)
        if state is None:
            raise SpuError(ErrorCode.UNKNOWN_TOPIC, f"no partition {req.topic}/{req.partition}")
        if (req.leader_id, req.leader_epoch) != (state.leader, state.leader_epoch):
            raise SpuError(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"{req.topic}/{req.partition} is led by SPU {state.leader} at epoch {state.leader_epoch}",
            )
        isr = sorted(set(req.isr))
        if req.leader_id not in isr or not set(isr) <= set(state.replicas):
            raise SpuError(ErrorCode.INVALID_ARGUMENT, f"bad in-sync set {isr} for replicas {state.replicas}")
        isr = self._without_lost_additions(req, state, isr)
        if isr != sorted(state.isr):
            log.info("%s/%d: in-sync set %s -> %s", req.topic, req.partition, state.isr, isr)
            state.isr = isr
            self._commit()
        return Reply({"isr": state.isr})

    def _without_lost_additions(
        self, req: m.AlterIsrRequest, state: PartitionState, isr: list[int]
    ) -> list[int]:
        """`isr` less the replicas it adds that have no live session: an SPU this controller
        declared lost may still look caught up to its leader (its last fetch was recent),
        but taking it back would make every acks=all produce wait for it until the leader
        drops it again. It rejoins once its heartbeats are back."""
        lost = sorted(set(isr) - set(state.isr) - set(self._last_heard))
        if lost:
            log.debug(
                "%s/%d: SPU(s) %s not taken back in sync: no live session", req.topic, req.partition, lost
            )
        return [r for r in isr if r not in lost]

    # -- topics ----------------------------------------------------------------------------------

    async def create_topic(self, req: m.CreateTopicRequest) -> Reply:
        validate_topic_name(req.name)
        config = TopicConfig.from_dict(req.config)
        if req.name in self._meta.topics:
            raise SpuError(ErrorCode.TOPIC_EXISTS, f"topic {req.name!r} already exists")
        leaders = Counter(p.leader for _, p in self._partitions())
        replicas = assign_replicas(config.partitions, config.replication_factor, self._last_heard, leaders)
        states = [PartitionState(r, r[0], 1, list(r)) for r in replicas]
        self._meta.topics[req.name] = TopicRecord(req.name, config, time.time_ns() // 1_000_000, states)
        self._commit()
        await self._wait_reported(req.name)
        return Reply()

    async def _wait_reported(self, name: str) -> None:
        """Answer a creation once every replica has the topic (so producing right after works)."""

        def ready() -> bool:
            record = self._meta.topics.get(name)
            if record is None:
                return True
            return all(
                set(p.replicas) <= set(self._reports.get((name, n), {}))
                for n, p in enumerate(record.partitions)
            )

        deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
        while not ready():
            if time.monotonic() > deadline:
                log.warning("topic %s: not every replica reported it within %ss", name, TOPIC_READY_TIMEOUT_S)
                return
            await asyncio.sleep(CHECK_INTERVAL_S / 2)  # heartbeats come every 250 ms

    async def delete_topic(self, req: m.DeleteTopicRequest) -> Reply:
        if self._meta.topics.pop(req.name, None) is None:
            raise SpuError(ErrorCode.UNKNOWN_TOPIC, f"topic {req.name!r} does not exist")
        self._reports = {tp: r for tp, r in self._reports.items() if tp[0] != req.name}
        self._commit()
        return Reply()

    async def list_topics(self, req: m.ListTopicsRequest) -> Reply:
        return Reply({"topics": sorted(self._meta.topics)})

    async def describe_topic(self, req: m.DescribeTopicRequest) -> Reply:
        return Reply({"topic": self.describe(req.name).to_dict()})

    def describe(self, name: str) -> TopicDescription:
        """Assignment from the metadata, offsets as the leader last reported them."""
        record = self._meta.topics.get(name)
        if record is None:
            raise SpuError(ErrorCode.UNKNOWN_TOPIC, f"topic {name!r} does not exist")
        infos = []
        for n, state in enumerate(record.partitions):
            report = self._reports.get((name, n), {}).get(state.leader, (0, 0, 0, 0, 0, 0))
            start, end, hw, _, size, segments = report
            infos.append(
                PartitionInfo(
                    n,
                    start,
                    end,
                    hw,
                    size,
                    segments,
                    leader=None if state.leader == NO_LEADER else state.leader,
                    replicas=list(state.replicas),
                    in_sync_replicas=list(state.isr),
                    leader_epoch=state.leader_epoch,
                )
            )
        return TopicDescription(name, record.config, record.created_ms, infos)
