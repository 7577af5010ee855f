"""wal: events (value and metadata) persisted in a topic of their own, replayed until acknowledged."""

from __future__ import annotations

import itertools

import pytest

from contraflow.connectors.base import Connector, ConnectorConfigError
from contraflow.connectors.wal import wal_topic
from contraflow.spu.client import SpuClient
from tests.connectors.support import make, run, sink_event

_aliases = itertools.count()
CONFIG = {"dir": "state", "chunk_size": 1024, "max_chunks": 100}


async def pull_events(conn: Connector, count: int) -> list:
    out = []
    while len(out) < count:
        item = await conn.pull()  # every record ready, each the event it was
        assert item is not None and item.events is not None
        out.extend((event, item.token) for event in item.events)
    assert len(out) == count
    return out


def test_events_come_back_with_their_metadata_once_and_unacked_ones_again_after_a_restart(
    spu_addr: str, spu: SpuClient
) -> None:
    alias = f"wal{next(_aliases)}"
    events = [sink_event({"n": i}, {"correlation": i}, offset=i) for i in range(5)]

    async def first_run() -> list:
        conn = make("wal", CONFIG, alias=alias, spu_addr=spu_addr)
        await conn.connect()
        await conn.send(events[:3])
        got = await pull_events(conn, 3)
        for _, token in got:
            await conn.ack(token)
        await conn.send(events[1:])  # redelivered from a batch boundary: written once
        got += await pull_events(conn, 2)  # not acknowledged
        await conn.close()  # waits for the offset commit
        return [event for event, _ in got]

    assert run(first_run()) == [({"n": i}, {"correlation": i}) for i in range(5)]
    topic = wal_topic("test", alias)
    assert spu.list_offsets(topic, 0, "latest") == 5  # five records, not seven

    async def second_run() -> list:
        conn = make("wal", CONFIG, alias=alias, spu_addr=spu_addr)
        await conn.connect()
        got = await pull_events(conn, 2)
        await conn.close()
        return [event for event, _ in got]

    assert run(second_run()) == [({"n": i}, {"correlation": i}) for i in range(3, 5)]


def test_tremors_keys_are_required() -> None:
    with pytest.raises(ConnectorConfigError, match="missing config key 'chunk_size'"):
        make("wal", {"dir": "state", "max_chunks": 10})
