"""A request that times out on a connection the SPU has been silent on closes it.

Across a network partition TCP retransmits what was sent ever more slowly (seconds apart);
a request written later on the same socket waits behind those retries even once the link
heals (the partition scenarios' old leader took 7 s to rejoin). A connection on which
nothing was heard since the timed-out request was sent is closed, so the next request
opens a fresh one; a connection that answered other requests meanwhile is only slow on
that one request and is kept.
"""

from __future__ import annotations

import asyncio

from contraflow.spu.protocol import HEADER_SIZE, ErrorCode, SpuError, encode_header, pack_meta, parse_header
from contraflow.spu.protocol.frames import unpack_meta
from contraflow.spu.rpc.client import Connection

TIMEOUT_S = 0.3


async def answer_only_pings(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A peer that answers requests asking for an answer ({"ping": true}) and none other."""
    try:
        while True:
            header = parse_header(await reader.readexactly(HEADER_SIZE))
            body = await reader.readexactly(header.body_length)
            if unpack_meta(body[: header.meta_length]).get("ping"):
                writer.write(encode_header(header.api_key, 0, header.correlation_id, pack_meta({}), 0))
    except asyncio.IncompleteReadError:
        writer.close()


async def unanswered(conn: Connection) -> SpuError:
    try:
        await conn.request(1, {"ping": False}, timeout_s=TIMEOUT_S)
    except SpuError as err:
        return err
    raise AssertionError("the unanswered request was answered")


async def pinging(conn: Connection, until: asyncio.Task[SpuError]) -> int:
    pings = 0
    while not until.done():
        await conn.request(1, {"ping": True}, timeout_s=TIMEOUT_S)
        pings += 1
        await asyncio.sleep(0.02)
    return pings


async def outcomes() -> dict[str, tuple[ErrorCode, bool]]:
    server = await asyncio.start_server(answer_only_pings, "127.0.0.1", 0)
    addr = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    found = {}
    async with server:
        silent = await Connection.open(addr, 1.0)
        err = await unanswered(silent)
        found["silent"] = (err.code, silent.closed)
        await silent.close()

        talking = await Connection.open(addr, 1.0)
        waiting = asyncio.create_task(unanswered(talking))
        pings = await pinging(talking, waiting)
        assert pings > 3, pings
        found["talking"] = ((await waiting).code, talking.closed)
        await talking.close()
    return found


def test_a_timeout_closes_the_connection_only_when_the_spu_was_silent_since_the_request() -> None:
    assert asyncio.run(outcomes()) == {
        "silent": (ErrorCode.TIMEOUT, True),
        "talking": (ErrorCode.TIMEOUT, False),
    }
