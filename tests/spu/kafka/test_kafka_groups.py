"""Consumer groups with real librdkafka consumers: sharing partitions, rebalancing
when members leave and join, commits that fence old generations."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_harness import consume, consumer, create_topic, produce

PARTITIONS = 6


def _assignments(members: list[Consumer]) -> list[set[int]]:
    return [{tp.partition for tp in m.assignment()} for m in members]


def _settle(members: list[Consumer], timeout_s: float = 40.0) -> list[set[int]]:
    """Poll every member until their assignments split the topic's partitions between them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for member in members:
            msg = member.poll(0.05)
            assert msg is None or msg.error() is None, msg.error()
        owned = _assignments(members)
        flat = [p for parts in owned for p in parts]
        if sorted(flat) == list(range(PARTITIONS)) and all(owned):
            return owned
    raise AssertionError(f"no settled assignment: {_assignments(members)}")


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_three_members_share_and_rebalance_on_leave_and_join(
    bootstrap: str, fresh_name: str, assignor: str
) -> None:
    create_topic(bootstrap, fresh_name, PARTITIONS)
    group = f"{fresh_name}-group"
    config = {"partition.assignment.strategy": assignor}
    members = [consumer(bootstrap, group, **config) for _ in range(3)]
    for member in members:
        member.subscribe([fresh_name])
    owned = _settle(members)
    assert [len(parts) for parts in owned] == [2, 2, 2]

    members.pop().close()  # leaves the group: the other two take over its partitions
    owned = _settle(members)
    assert sorted(len(parts) for parts in owned) == [3, 3]

    joiner = consumer(bootstrap, group, **config)
    joiner.subscribe([fresh_name])
    members.append(joiner)
    owned = _settle(members)
    assert [len(parts) for parts in owned] == [2, 2, 2]
    for member in members:
        member.close()


def test_group_members_consume_every_record_once_and_resume_from_commits(
    bootstrap: str, fresh_name: str
) -> None:
    create_topic(bootstrap, fresh_name, PARTITIONS)
    group = f"{fresh_name}-group"
    members = [consumer(bootstrap, group) for _ in range(3)]
    for member in members:
        member.subscribe([fresh_name])
    # The records come once the group is stable: before, a member may read some of a partition
    # that a rebalance then hands to another member, which (nothing committed yet) reads them again.
    _settle(members)
    values = [f"r{i}".encode() for i in range(600)]
    produce(bootstrap, fresh_name, [(str(i).encode(), v) for i, v in enumerate(values)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < len(values) and time.monotonic() < deadline:
        for member in members:
            msg = member.poll(0.05)
            if msg is not None:
                assert msg.error() is None
                seen.append(msg.value())
    assert sorted(seen) == sorted(values)  # each record once, across the three
    for member in members:  # all commit before any leaves: a leave starts a rebalance
        member.commit(asynchronous=False)  # each member's position in each of its partitions
    for member in members:
        member.close()
    more = [f"s{i}".encode() for i in range(30)]
    produce(bootstrap, fresh_name, [(None, v) for v in more])
    late = consumer(bootstrap, group)
    late.subscribe([fresh_name])
    assert sorted(m.value() for m in consume(late, len(more))) == sorted(more)
    assert late.poll(1.0) is None  # nothing before the commits comes again
    late.close()


def test_manual_assignment_commits_without_joining(bootstrap: str, fresh_name: str) -> None:
    create_topic(bootstrap, fresh_name)
    produce(bootstrap, fresh_name, [(None, f"m{i}".encode()) for i in range(5)])
    group = f"{fresh_name}-group"
    cons = consumer(bootstrap, group)
    cons.assign([TopicPartition(fresh_name, 0, 0)])
    consume(cons, 3)
    cons.commit(offsets=[TopicPartition(fresh_name, 0, 3)], asynchronous=False)
    [committed] = cons.committed([TopicPartition(fresh_name, 0)], timeout=10)
    assert committed.offset == 3
    cons.close()


def test_admin_describes_and_lists_groups(bootstrap: str, fresh_name: str) -> None:
    create_topic(bootstrap, fresh_name, PARTITIONS)
    group = f"{fresh_name}-group"
    members = [consumer(bootstrap, group, **{"client.id": f"member-{i}"}) for i in range(2)]
    for member in members:
        member.subscribe([fresh_name])
    _settle(members)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(10)
    assert description.state.name == "STABLE"
    assert sorted(m.client_id for m in description.members) == ["member-0", "member-1"]
    owned = sorted(tp.partition for m in description.members for tp in m.assignment.topic_partitions)
    assert owned == list(range(PARTITIONS))
    listed = admin.list_consumer_groups().result(10)
    assert group in {g.group_id for g in listed.valid}
    for member in members:
        member.close()
