"""FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups and
ListGroups: the wire side of the group coordinator (`kafka/coordinator.py`)."""

from __future__ import annotations

from collections.abc import Callable

from contraflow.spu.kafka.apis.base import NO_AUTHORIZED_OPERATIONS, KafkaRequest, response
from contraflow.spu.kafka.broker import Broker
from contraflow.spu.kafka.coordinator import Group, JoinResult, Member
from contraflow.spu.kafka.errors import KafkaError
from contraflow.spu.kafka.wire import Reader, Writer


async def find_coordinator(broker: Broker, request: KafkaRequest) -> Writer:
    out = response(request.version, 1)
    try:
        node = await broker.topology.coordinator(request.body.string())  # a group (or transactional) id
    except KafkaError as err:
        out.int16(err.code)
        if request.version >= 1:
            out.string(str(err))
        return out.int32(-1).string("").int32(-1)
    out.int16(0)
    if request.version >= 1:
        out.string(None)  # error message
    return out.int32(node.id).string(node.host).int32(node.port)


def _read_protocol(r: Reader) -> tuple[str, bytes]:
    return r.string(), bytes(r.bytes_())


async def join_group(broker: Broker, request: KafkaRequest) -> Writer:
    body, version = request.body, request.version
    group_id = body.string()
    session_timeout_ms = body.int32()
    rebalance_timeout_ms = body.int32() if version >= 1 else session_timeout_ms
    member_id = body.string()
    if version >= 5:
        body.nullable_string()  # group instance id: static membership is not kept
    protocol_type = body.string()
    protocols = body.array(_read_protocol)
    try:
        await broker.check_coordinator(group_id)
        result = await broker.coordinator.join(
            group_id,
            member_id,
            request.header.client_id or "",
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            protocols,
        )
        error = 0
    except KafkaError as err:
        result, error = JoinResult(-1, "", "", member_id, []), int(err.code)

    def write_member(w: Writer, member: tuple[str, bytes]) -> None:
        w.string(member[0])
        if version >= 5:
            w.string(None)
        w.bytes_(member[1])

    out = response(version, 2).int16(error).int32(result.generation).string(result.protocol)
    return out.string(result.leader).string(result.member_id).array(result.members, write_member)


async def sync_group(broker: Broker, request: KafkaRequest) -> Writer:
    body, version = request.body, request.version
    group_id, generation, member_id = body.string(), body.int32(), body.string()
    if version >= 3:
        body.nullable_string()  # group instance id
    assignments = body.array(_read_protocol)
    try:
        await broker.check_coordinator(group_id)
        assignment, error = await broker.coordinator.sync(group_id, generation, member_id, assignments), 0
    except KafkaError as err:
        assignment, error = b"", int(err.code)
    return response(version, 1).int16(error).bytes_(assignment)


async def heartbeat(broker: Broker, request: KafkaRequest) -> Writer:
    body, version = request.body, request.version
    group_id, generation, member_id = body.string(), body.int32(), body.string()
    try:
        await broker.check_coordinator(group_id)
        broker.coordinator.heartbeat(group_id, generation, member_id)
        error = 0
    except KafkaError as err:
        error = int(err.code)
    return response(version, 1).int16(error)


async def leave_group(broker: Broker, request: KafkaRequest) -> Writer:
    group_id, member_id = request.body.string(), request.body.string()
    try:
        await broker.check_coordinator(group_id)
        broker.coordinator.leave(group_id, member_id)
        error = 0
    except KafkaError as err:
        error = int(err.code)
    return response(request.version, 1).int16(error)


def _write_description(w: Writer, version: int, group_id: str, group: Group | None) -> None:
    if group is None:  # Kafka describes an unknown group as Dead with no members
        w.int16(0).string(group_id).string("Dead").string("").string("").array(
            [], _write_member(version, None)
        )
    else:
        w.int16(0).string(group_id).string(group.state.value).string(group.protocol_type or "")
        w.string(group.protocol or "").array(group.members.values(), _write_member(version, group.protocol))
    if version >= 3:
        w.int32(NO_AUTHORIZED_OPERATIONS)


def _write_member(version: int, protocol: str | None) -> Callable[[Writer, Member], None]:
    def write(w: Writer, member: Member) -> None:
        w.string(member.member_id)
        if version >= 4:
            w.string(None)  # group instance id
        metadata = member.metadata_for(protocol) if protocol else b""
        w.string(member.client_id).string("").bytes_(metadata).bytes_(member.assignment)

    return write


async def describe_groups(broker: Broker, request: KafkaRequest) -> Writer:
    """Each group's state, protocol and members with their assignments (what admin tools show)."""
    group_ids = request.body.array(Reader.string)
    out = response(request.version, 1)
    return out.array(
        group_ids, lambda w, g: _write_description(w, request.version, g, broker.coordinator.describe(g))
    )


async def list_groups(broker: Broker, request: KafkaRequest) -> Writer:
    groups = broker.coordinator.groups()
    out = response(request.version, 1).int16(0)
    return out.array(groups, lambda w, g: w.string(g.group_id).string(g.protocol_type or ""))
