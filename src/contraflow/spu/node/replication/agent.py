"""An SPU's link to the controller: heartbeats, the metadata it learns, admin forwarding.

Every `HEARTBEAT_INTERVAL_S` the SPU reports its replicas' offsets and gets the
whole cluster metadata back, which it applies to its replicas. Beating and applying
are two tasks: applying may wait (a worker thread busy appending, a follower
stopping), and a heartbeat held behind it would cost the SPU its session, on a loaded
box, while it was alive. The applier takes the newest metadata heard. The tick loop
also notices when the process itself was stopped (SIGSTOP, a long stall)
for longer than the session timeout: the controller has then likely elected
another leader, so this SPU refuses writes ("suspended") until a heartbeat
answers again and that answer is applied: it says what the SPU leads now.

A loop gap is not the only way to miss a session: a stop shorter than a session, begun
just before a beat was due, does not show as a gap, yet the controller counts the session
from the last beat it heard. So each answered beat also grants a lease: the controller
cannot declare this SPU lost before the beat's send time plus a session, and past that
(less `LEASE_MARGIN`) the SPU may have been replaced. A write acknowledged by the leader
alone (acks=0/1) is then refused until metadata from a later beat is applied
(`lease_lapsed`). acks=all writes need no lease, their followers fence them (a follower
that moved to a new leader stops fetching), so while the controller is merely
unreachable the SPU keeps taking them as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from contraflow.spu.client.aio import AsyncSpuClient
from contraflow.spu.node.replication.replicas import ReplicaManager
from contraflow.spu.node.replication.tables import offset_key
from contraflow.spu.protocol import ApiKey, ErrorCode, SpuError
from contraflow.spu.protocol.cluster_metadata import ClusterMetadata
from contraflow.spu.protocol.messages import DEFAULT_SESSION_TIMEOUT_S
from contraflow.spu.protocol.topics import TopicConfig, TopicPartition
from contraflow.spu.rpc.client import RetryPolicy
from contraflow.spu.rpc.server import Reply

if TYPE_CHECKING:
    from contraflow.spu.node.replication.tables import ReplicatedTable

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 0.25
TICK_INTERVAL_S = 0.05
REFRESH_WAIT_S = 10.0
LEASE_MARGIN = 0.1  # of a session: the lease ends this much before the controller may act


class Fence:
    """Set at a moment when this SPU may have been replaced; only metadata from a beat sent
    after that moment says what it leads now, so only applying such metadata clears it
    (a beat sent before a SIGSTOP may be answered only after the SIGCONT)."""

    __slots__ = ("since",)

    def __init__(self) -> None:
        self.since: float | None = None

    @property
    def up(self) -> bool:
        return self.since is not None

    def set(self, moment: float) -> None:
        """Fence from `moment` on; a fence already up keeps its earlier moment."""
        if self.since is None:
            self.since = moment

    def applied(self, sent: float) -> None:
        """Metadata from a beat sent at `sent` is applied: it clears a fence set before then."""
        if self.since is not None and sent > self.since:
            self.since = None


def beat_timeout_s(session_timeout_s: float) -> float:
    """How long a beat waits for its answer: as long as the answer could still renew the lease
    (a session less LEASE_MARGIN from the beat's send), and no longer, so that the next beat
    follows a lost one within about a session."""
    return session_timeout_s * (1 - LEASE_MARGIN)


class ClusterAgent:
    def __init__(
        self, spu_id: int, controller_addr: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.spu_id = spu_id
        self._clock = clock  # the tests' to drive: sessions and leases are measured on it
        self.controller_addr = controller_addr
        self.session = secrets.token_hex(8)
        self.controller = AsyncSpuClient(
            controller_addr, request_timeout_s=5.0, connect_timeout_s=1.0, retry=RetryPolicy(attempts=1)
        )
        # Beats go on a connection of their own, with a timeout tied to the session
        # (`beat_timeout_s`): with 5 s for an answer, one beat lost on a 1 s session held the
        # next one back, so the lease lapsed and acks=0/1 writes were refused for up to 5 s. A timed-out
        # beat with nothing heard since closes its connection (a cut link retransmits ever more
        # slowly), which must not fail an admin request waiting on the shared one.
        self._beats = AsyncSpuClient(
            controller_addr,
            request_timeout_s=beat_timeout_s(DEFAULT_SESSION_TIMEOUT_S),
            connect_timeout_s=beat_timeout_s(DEFAULT_SESSION_TIMEOUT_S),
            retry=RetryPolicy(attempts=1),
        )
        self.replicas: ReplicaManager | None = None  # set by the server once storage is open
        # consumer offsets and control values, also set by the server (replication/tables.py)
        self.offsets: ReplicatedTable | None = None
        self.controls: ReplicatedTable | None = None
        self.metadata: dict[str, Any] | None = None
        self.session_timeout_s = DEFAULT_SESSION_TIMEOUT_S
        self._last_tick = self._clock()
        self._suspension = Fence()  # set when a loop gap is noticed: fences every write
        self._answered_sent: float | None = None  # when the last answered beat was sent
        self._lapse = Fence()  # set when the last lease ended: fences acks=0/1 writes
        # The newest metadata heard and when the beat that brought it was sent; the applier's.
        self._heard: tuple[ClusterMetadata, float] | None = None
        self._news = asyncio.Event()  # set when `_heard` changes
        self._applied = asyncio.Condition()  # notified after each apply (`refresh` waits on it)
        self._applied_version = 0
        self._last_beat: float | None = None  # when the last heartbeat was sent
        self.public_addr = ""
        self.private_addr = ""
        self.kafka_addr = ""

    def suspended(self) -> bool:
        """True while this SPU may have been replaced: its event loop did not run for a
        whole session (SIGSTOP, a stall), and no heartbeat has answered since."""
        now = self._clock()
        if now - self._last_tick > self.session_timeout_s:
            self._suspension.set(now)
        return self._suspension.up

    def lease_lapsed(self) -> bool:
        """True while the controller may have declared this SPU lost: a session (less the
        margin) passed since the send time of the last answered beat, and no metadata from
        a beat sent after that moment is applied yet. A suspended SPU's lease lapsed too."""
        self._note_lapse(self._clock())
        return self._lapse.up or self.suspended()

    def _note_lapse(self, now: float) -> None:
        if self._answered_sent is not None:
            ends = self._answered_sent + self.session_timeout_s * (1 - LEASE_MARGIN)
            if now >= ends:
                self._lapse.set(ends)

    async def tick(self) -> None:
        """The loop's pulse: a gap between two ticks longer than a session fences the SPU."""
        while True:
            self.pulse()
            await asyncio.sleep(TICK_INTERVAL_S)

    def pulse(self) -> None:
        """One tick: notice a gap since the last one, then start the next interval."""
        self.suspended()
        self._last_tick = self._clock()

    async def run(self) -> None:
        """Beat and apply, each in its own task, until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._beat_loop())
            group.create_task(self._apply_loop())

    async def _beat_loop(self) -> None:
        while True:
            try:
                await self.heartbeat()
            except SpuError as err:
                log.debug("heartbeat to the controller at %s failed: %s", self.controller_addr, err)
            except Exception:
                log.exception("the heartbeat failed")
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)

    async def heartbeat(self) -> int:
        """Report to the controller; hand the metadata it answers to the applier and
        return its version."""
        assert self.replicas is not None
        fields = {
            "spu_id": self.spu_id,
            "session": self.session,
            "public_addr": self.public_addr,
            "private_addr": self.private_addr,
            "kafka_addr": self.kafka_addr,
            "partitions": self.replicas.reports(),
        }
        sent = self._clock()
        self._warn_if_late(sent)
        self._beats.request_timeout_s = self._beats.connect_timeout_s = beat_timeout_s(self.session_timeout_s)
        answer = (await self._beats.request(ApiKey.SC_HEARTBEAT, fields)).fields
        # a lease that ended before this answer came stays ended until its metadata is applied
        self._note_lapse(self._clock())
        self._answered_sent = sent if self._answered_sent is None else max(self._answered_sent, sent)
        self.session_timeout_s = int(answer["session_timeout_ms"]) / 1000
        meta = ClusterMetadata.from_dict(answer["metadata"])
        if self._heard is None or meta.version >= self._heard[0].version:
            self.metadata = answer["metadata"]
            self._heard = (meta, sent)
            self._news.set()
        return meta.version

    def _warn_if_late(self, now: float) -> None:
        """A beat later than half a session puts the SPU at risk of being declared lost:
        say so, so that a lost session of a live SPU can be traced."""
        last, self._last_beat = self._last_beat, now
        late = 0.0 if last is None else now - last - HEARTBEAT_INTERVAL_S
        if late > self.session_timeout_s / 2:
            log.warning("heartbeat %.2fs late (session %.1fs)", late, self.session_timeout_s)

    async def _apply_loop(self) -> None:
        assert self.replicas is not None
        while True:
            await self._news.wait()
            self._news.clear()
            assert self._heard is not None
            meta, sent = self._heard
            began = self._clock()
            try:
                await self.replicas.apply(meta)
            except Exception:
                log.exception("applying the cluster metadata failed")
                self._news.set()  # try again with the newest
                await asyncio.sleep(HEARTBEAT_INTERVAL_S)
                continue
            took = self._clock() - began
            if took > self.session_timeout_s / 2:
                log.warning("applying cluster metadata version %d took %.2fs", meta.version, took)
            self._suspension.applied(sent)
            self._lapse.applied(sent)
            async with self._applied:
                self._applied_version = max(self._applied_version, meta.version)
                self._applied.notify_all()

    async def refresh(self) -> None:
        """Beat now and return once what the controller answered is applied (or after
        REFRESH_WAIT_S: the change is the controller's already, the SPU applies it soon)."""
        version = await self.heartbeat()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REFRESH_WAIT_S), self._applied:
                await self._applied.wait_for(lambda: self._applied_version >= version)

    def metadata_reply(self) -> Reply:
        if self.metadata is None:
            raise SpuError(
                ErrorCode.NO_CONTROLLER, f"SPU {self.spu_id} has not heard from the controller yet"
            )
        return Reply({"cluster": True, "metadata": self.metadata})

    async def forward(self, api: ApiKey, fields: dict[str, Any]) -> Reply:
        """Topic admin is the controller's: pass the request on, answer what it answers."""
        try:
            response = await self.controller.request(api, fields)
        except SpuError as err:
            if err.code in (ErrorCode.CONNECTION_ERROR, ErrorCode.TIMEOUT):
                raise SpuError(ErrorCode.NO_CONTROLLER, f"the controller is unreachable: {err}") from None
            raise
        if api is ApiKey.CREATE_TOPIC or api is ApiKey.DELETE_TOPIC:
            await self.refresh()  # learn the change now rather than at the next beat
        return Reply(dict(response.fields))

    async def create_topic(self, name: str, config: TopicConfig) -> None:
        await self.forward(ApiKey.CREATE_TOPIC, {"name": name, "config": config.to_dict()})

    def spu_count(self) -> int:
        """SPUs the cluster knows (registered, alive or not)."""
        return 1 if self.metadata is None else len(self.metadata["spus"])

    async def commit_offset(self, consumer: str, topic: str, partition: int, offset: int) -> None:
        """Store a consumer offset in the replicated offsets table (this SPU must lead it)."""
        if offset < 0:
            raise SpuError(ErrorCode.INVALID_ARGUMENT, f"cannot commit offset {offset}")
        assert self.offsets is not None
        await self.offsets.put(offset_key(consumer, topic, partition), [offset, self._created(topic)])

    async def committed_offset(self, consumer: str, topic: str, partition: int) -> int | None:
        """The consumer's committed offset of this life of the topic (None: none committed)."""
        assert self.offsets is not None
        created = self._created(topic)
        found = await self.offsets.get(offset_key(consumer, topic, partition))
        # an offset committed before the topic was deleted and created again is not its
        return int(found[0]) if found is not None and found[1] == created else None

    def _created(self, topic: str) -> int:
        """When the cluster created `topic` (ms): an offset belongs to one life of a topic."""
        if self.metadata is None:  # restarted, the controller not heard yet: ask again, elsewhere
            raise SpuError(ErrorCode.NOT_LEADER, f"SPU has no cluster metadata yet to know {topic!r}")
        created = self.topic_created_ms(topic)
        if created is None:
            raise SpuError(ErrorCode.UNKNOWN_TOPIC, f"topic {topic!r} does not exist")
        return created

    def topic_created_ms(self, name: str) -> int | None:
        """When the controller created topic `name`; None if it does not exist."""
        topic = None if self.metadata is None else self.metadata["topics"].get(name)
        return None if topic is None else int(topic["created_ms"])

    async def alter_isr(self, tp: TopicPartition, epoch: int, isr: list[int]) -> list[int]:
        fields = {
            "topic": tp[0],
            "partition": tp[1],
            "leader_id": self.spu_id,
            "leader_epoch": epoch,
            "isr": isr,
        }
        answer = (await self.controller.request(ApiKey.SC_ALTER_ISR, fields)).fields
        return [int(r) for r in answer["isr"]]

    async def close(self) -> None:
        if self.replicas is not None:
            await self.replicas.close()
        await self.controller.close()
        await self._beats.close()
