"""The consumer-group coordinator: membership, generations and rebalances.

Kafka's group protocol leaves the assignment to the clients: the coordinator
collects every member's join (with the assignors it supports, e.g. range and
roundrobin), picks the protocol all members share, names a leader, hands the
leader the members' metadata, and relays the leader's assignment to everyone in
SyncGroup. Each completed rebalance bumps the generation; commits and
heartbeats from an older generation are fenced with ILLEGAL_GENERATION.

States follow Kafka's: EMPTY, PREPARING_REBALANCE (waiting for members to
(re)join), COMPLETING_REBALANCE (waiting for the leader's assignment), STABLE.
A member that sends no heartbeat within its session timeout is removed and the
group rebalances; a member that does not rejoin within the rebalance timeout is
dropped from the new generation. Membership lives in memory (a restarted SPU
starts every group empty; clients rejoin); committed offsets live in the store.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from contraflow.spu.kafka.errors import KafkaError, KafkaErrorCode
from contraflow.spu.protocol.errors import InvalidTopicNameError
from contraflow.spu.protocol.topics import validate_name

log = logging.getLogger(__name__)

MIN_SESSION_TIMEOUT_MS = 1_000
MAX_SESSION_TIMEOUT_MS = 1_800_000
EXPIRY_CHECK_S = 0.2


def check_group_id(group_id: str) -> None:
    """Group ids name the SPU's consumer offsets, so they follow its naming rules."""
    try:
        validate_name(group_id, "group")
    except InvalidTopicNameError as err:
        raise KafkaError(KafkaErrorCode.INVALID_GROUP_ID, str(err)) from None


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class JoinResult:
    generation: int
    protocol: str
    leader: str
    member_id: str
    members: list[tuple[str, bytes]]  # only the leader gets them


@dataclass(slots=True)
class Member:
    member_id: str
    session_timeout_s: float
    rebalance_timeout_s: float
    protocols: list[tuple[str, bytes]]
    client_id: str = ""
    last_seen: float = field(default_factory=time.monotonic)
    joining: asyncio.Future[JoinResult] | None = None
    syncing: asyncio.Future[bytes] | None = None
    assignment: bytes = b""

    def metadata_for(self, protocol: str) -> bytes:
        return next(meta for name, meta in self.protocols if name == protocol)


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_timer: asyncio.TimerHandle | None = None

    def check_member(self, member_id: str, generation: int) -> Member:
        member = self.members.get(member_id)
        if member is None:
            raise KafkaError(
                KafkaErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not in group {self.group_id}"
            )
        if generation != self.generation:
            raise KafkaError(
                KafkaErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} of group {self.group_id} is over (now {self.generation})",
            )
        return member


class GroupCoordinator:
    """All groups of this SPU (it coordinates every group: there is one broker)."""

    def __init__(self, initial_rebalance_delay_s: float = 0.5) -> None:
        self._groups: dict[str, Group] = {}
        self._initial_delay_s = initial_rebalance_delay_s
        self._expiry: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._expiry = asyncio.ensure_future(self._expire_sessions())

    def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        for group in self._groups.values():
            if group.rebalance_timer is not None:
                group.rebalance_timer.cancel()
            for member in group.members.values():
                _cancel_waiters(member)

    def group(self, group_id: str) -> Group:
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = Group(group_id)
        return group

    # -- JoinGroup ------------------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        client_id: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        check_group_id(group_id)
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise KafkaError(
                KafkaErrorCode.INVALID_SESSION_TIMEOUT,
                f"session timeout {session_timeout_ms} ms outside "
                f"[{MIN_SESSION_TIMEOUT_MS}, {MAX_SESSION_TIMEOUT_MS}]",
            )
        group = self.group(group_id)
        self._check_protocols(group, protocol_type, protocols)
        if member_id:
            member = group.members.get(member_id)
            if member is None:
                raise KafkaError(
                    KafkaErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not in group {group_id}"
                )
            member.protocols = protocols
            member.session_timeout_s = session_timeout_ms / 1000
            member.rebalance_timeout_s = rebalance_timeout_ms / 1000
        else:
            member = Member(f"{client_id or 'member'}-{uuid.uuid4()}", 0, 0, protocols, client_id)
            member.session_timeout_s = session_timeout_ms / 1000
            member.rebalance_timeout_s = max(rebalance_timeout_ms, session_timeout_ms) / 1000
            group.members[member.member_id] = member
        group.protocol_type = protocol_type
        if member.joining is not None:  # a retried join replaces the earlier one
            _settle_error(member.joining, KafkaErrorCode.REBALANCE_IN_PROGRESS, "replaced by a newer join")
        waiter = member.joining = asyncio.get_running_loop().create_future()
        member.last_seen = time.monotonic()
        self._prepare_rebalance(group)
        self._complete_join_if_ready(group)  # may answer this join at once
        return await waiter

    @staticmethod
    def _check_protocols(group: Group, protocol_type: str, protocols: list[tuple[str, bytes]]) -> None:
        if not protocols:
            raise KafkaError(KafkaErrorCode.INCONSISTENT_GROUP_PROTOCOL, "the join names no protocol")
        if not group.members:
            return
        if protocol_type != group.protocol_type:
            raise KafkaError(
                KafkaErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"protocol type {protocol_type!r} differs from the group's {group.protocol_type!r}",
            )
        offered = {name for name, _ in protocols}
        shared = set.intersection(*({n for n, _ in m.protocols} for m in group.members.values()))
        if not offered & shared:
            raise KafkaError(
                KafkaErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"none of {sorted(offered)} is supported by every member of group {group.group_id}",
            )

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            return
        log.info("group %s: rebalancing (%s)", group.group_id, group.state.value)
        was_empty = group.state is GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        for member in group.members.values():
            if member.syncing is not None:
                _settle_error(member.syncing, KafkaErrorCode.REBALANCE_IN_PROGRESS, "the group rebalances")
                member.syncing = None
        # A new group waits briefly so members starting together share one generation.
        timeout = (
            self._initial_delay_s
            if was_empty
            else max((m.rebalance_timeout_s for m in group.members.values()), default=0.0)
        )
        loop = asyncio.get_running_loop()
        group.rebalance_timer = loop.call_later(timeout, self._complete_join, group)

    def _complete_join_if_ready(self, group: Group) -> None:
        waiting_for_initial_delay = group.generation == 0 and len(group.members) == 1
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and not waiting_for_initial_delay
            and all(m.joining is not None for m in group.members.values())
        ):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """Close the join phase: members that did not rejoin are out; the rest get the new generation."""
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        for member_id in [mid for mid, m in group.members.items() if m.joining is None]:
            log.info("group %s: %s did not rejoin in time; removed", group.group_id, member_id)
            del group.members[member_id]
        group.generation += 1
        log.info(
            "group %s: generation %d with %d member(s)", group.group_id, group.generation, len(group.members)
        )
        if not group.members:
            group.state, group.protocol, group.leader = GroupState.EMPTY, None, None
            return
        group.protocol = _choose_protocol(list(group.members.values()))
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        listed = [(m.member_id, m.metadata_for(group.protocol)) for m in group.members.values()]
        now = time.monotonic()
        for member in group.members.values():
            result = JoinResult(
                group.generation,
                group.protocol,
                group.leader,
                member.member_id,
                listed if member.member_id == group.leader else [],
            )
            if member.joining is not None and not member.joining.done():
                member.joining.set_result(result)
            member.joining = None
            member.last_seen = now

    # -- SyncGroup ------------------------------------------------------------------------------

    async def sync(
        self, group_id: str, generation: int, member_id: str, assignments: list[tuple[str, bytes]]
    ) -> bytes:
        group = self.group(group_id)
        member = group.check_member(member_id, generation)
        member.last_seen = time.monotonic()
        if group.state is GroupState.PREPARING_REBALANCE:
            raise KafkaError(KafkaErrorCode.REBALANCE_IN_PROGRESS, f"group {group_id} rebalances")
        if group.state is GroupState.STABLE:
            return member.assignment
        if member_id == group.leader:
            given = dict(assignments)
            for other in group.members.values():
                other.assignment = given.get(other.member_id, b"")
                if other.syncing is not None and not other.syncing.done():
                    other.syncing.set_result(other.assignment)
                other.syncing = None
            group.state = GroupState.STABLE
            return member.assignment
        waiter = member.syncing = asyncio.get_running_loop().create_future()
        return await waiter

    # -- Heartbeat, LeaveGroup, commits -----------------------------------------------------------

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> None:
        group = self.group(group_id)
        member = group.check_member(member_id, generation)
        member.last_seen = time.monotonic()
        if group.state is GroupState.PREPARING_REBALANCE:
            raise KafkaError(KafkaErrorCode.REBALANCE_IN_PROGRESS, f"group {group_id} rebalances: rejoin")

    def leave(self, group_id: str, member_id: str) -> None:
        group = self.group(group_id)
        member = group.members.pop(member_id, None)
        if member is None:
            raise KafkaError(KafkaErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not in group {group_id}")
        _cancel_waiters(member)
        self._member_gone(group)

    def check_commit(self, group_id: str, generation: int, member_id: str) -> None:
        """Fencing for OffsetCommit: a member of the current, settled generation, or a
        client outside group management (generation -1) while the group has no members."""
        group = self.group(group_id)
        if generation < 0 and not member_id and not group.members:
            return
        group.check_member(member_id, generation)
        if group.state is not GroupState.STABLE:
            raise KafkaError(KafkaErrorCode.REBALANCE_IN_PROGRESS, f"group {group_id} rebalances")

    def describe(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def groups(self) -> list[Group]:
        return list(self._groups.values())

    def _member_gone(self, group: Group) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            self._complete_join_if_ready(group)
        elif group.members:
            self._prepare_rebalance(group)
            self._complete_join_if_ready(group)
        else:
            group.state, group.protocol, group.leader = GroupState.EMPTY, None, None
            group.generation += 1

    async def _expire_sessions(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_CHECK_S)
            now = time.monotonic()
            for group in list(self._groups.values()):
                expired = [
                    m
                    for m in group.members.values()
                    if m.joining is None and m.syncing is None and now - m.last_seen > m.session_timeout_s
                ]
                for member in expired:
                    log.info(
                        "group %s: %s missed its session timeout; removed", group.group_id, member.member_id
                    )
                    del group.members[member.member_id]
                if expired:
                    self._member_gone(group)


def _choose_protocol(members: list[Member]) -> str:
    """The protocol every member supports that most members prefer (ties: the first seen)."""
    shared = set.intersection(*({name for name, _ in m.protocols} for m in members))
    votes = Counter(next(name for name, _ in m.protocols if name in shared) for m in members)
    return votes.most_common(1)[0][0]


def _settle_error(future: asyncio.Future[Any], code: KafkaErrorCode, message: str) -> None:
    if not future.done():
        future.set_exception(KafkaError(code, message))


def _cancel_waiters(member: Member) -> None:
    """A member that left or stopped: its pending join or sync answers UNKNOWN_MEMBER_ID."""
    for future in (member.joining, member.syncing):
        if future is not None:
            _settle_error(future, KafkaErrorCode.UNKNOWN_MEMBER_ID, f"{member.member_id} left the group")
