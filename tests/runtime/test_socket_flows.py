"""ws and unix socket connectors in a running flow: a ws_server answering through a pipeline, and
ws_client and unix_socket_client sinks whose peers go away (the breaker opens, the source stops)
and come back (the breaker closes, the flow goes on); pausing the flow stops the ws_server's reads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import orjson
from websockets.asyncio.client import connect
from websockets.asyncio.server import Server, ServerConnection, serve

from contraflow.runtime.flow import FlowInstance
from tests.runtime.harness import flow_id, running, troy, wait_for
from tests.runtime.test_contraflow import emitted, free_port

RETRY = 'reconnect = {"retry": {"interval_ms": 100, "growth_rate": 1, "max_retries": 1000}}'


def flow(fid: str, ws_port: int, unix_path: Path, server_port: int) -> str:
    """ws_server -> pass -> back to ws_server (the answer), and to a ws_client and a unix_socket_client."""
    return troy(
        fid,
        f"""
  define connector ws_out from ws_client
  with codec = "json", config = {{"url": "ws://127.0.0.1:{ws_port}/"}}, {RETRY}
  end;
  define connector unix_out from unix_socket_client
  with codec = "json", postprocessors = ["separate"], config = {{"path": "{unix_path}"}}, {RETRY}
  end;
  define connector questions from ws_server
  with codec = "json", config = {{"url": "127.0.0.1:{server_port}"}}
  end;
  create connector ws_out;
  create connector unix_out;
  create connector questions;
  create pipeline pass;
  connect /connector/questions to /pipeline/pass;
  connect /pipeline/pass to /connector/questions;
  connect /pipeline/pass to /connector/ws_out;
  connect /pipeline/pass to /connector/unix_out;
""",
    )


class Peers:
    """The two servers the sinks talk to, each able to go away and come back on the same address."""

    def __init__(self, ws_port: int, unix_path: Path) -> None:
        self.ws_port, self.unix_path = ws_port, unix_path
        self.ws_ids: list[int] = []
        self.unix_ids: list[int] = []
        self._ws: Server | None = None
        self._unix: asyncio.Server | None = None
        self._unix_writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        async def ws_peer(ws: ServerConnection) -> None:
            async for message in ws:
                self.ws_ids.append(orjson.loads(message)["id"])

        async def unix_peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._unix_writers.append(writer)
            while line := await reader.readline():
                self.unix_ids.append(orjson.loads(line)["id"])

        self._ws = await serve(ws_peer, "127.0.0.1", self.ws_port)
        self._unix = await asyncio.start_unix_server(unix_peer, self.unix_path)

    async def stop(self) -> None:
        assert self._ws is not None and self._unix is not None
        self._ws.close()
        self._unix.close()
        for writer in self._unix_writers:
            writer.close()
        self._unix_writers.clear()
        await self._ws.wait_closed()
        await self._unix.wait_closed()
        self.unix_path.unlink()


def both_open(flow: FlowInstance) -> Callable[[], bool]:
    return lambda: {"ws_out", "unix_out"} <= set(flow.breakers)


async def ask(port: int, answers: list[int], stop: asyncio.Event) -> None:
    """A websockets client sending `{"id": n}` every 20 ms to the flow's ws_server, reading the answers."""
    async with connect(f"ws://127.0.0.1:{port}/") as client:

        async def read() -> None:
            async for message in client:
                answers.append(orjson.loads(message)["id"])

        reader = asyncio.create_task(read())
        for n in range(1_000_000):
            if stop.is_set():
                break
            await client.send(orjson.dumps({"id": n}))
            await asyncio.sleep(0.02)
        reader.cancel()


def test_ws_server_answers_and_socket_sinks_open_the_breaker_while_their_peers_are_away(
    spark, spu_addr, tmp_path: Path
) -> None:
    fid = flow_id("sockets")
    ws_port, server_port, unix_path = free_port(), free_port(), tmp_path / "peer.sock"
    peers = Peers(ws_port, unix_path)

    async def scenario() -> None:
        await peers.start()
        answers: list[int] = []
        stop = asyncio.Event()
        stopped_at = 0
        async with running(
            spu_addr, spark, tmp_path / "data", flow(fid, ws_port, unix_path, server_port)
        ) as runtime:
            flow_ = runtime.flows[fid]
            asking = asyncio.create_task(ask(server_port, answers, stop))
            await wait_for(
                lambda: min(len(answers), len(peers.ws_ids), len(peers.unix_ids)) >= 10,
                what="answers, and events at both peers",
            )

            await peers.stop()
            await wait_for(both_open(flow_), what="both sinks' breakers to open")
            await asyncio.sleep(0.3)  # a pull already under way completes
            stopped_at = emitted(flow_, "questions")
            await asyncio.sleep(0.7)
            assert emitted(flow_, "questions") == stopped_at, "the source kept pulling with the breakers open"

            await peers.start()
            await wait_for(lambda: not flow_.breakers, what="the breakers to close")
            await wait_for(
                lambda: min(max(answers), max(peers.ws_ids), max(peers.unix_ids)) > stopped_at,
                what="answers and events after the peers came back",
            )

            await flow_.pause()  # the ws_server stops being pulled; its client is held back, not dropped
            await asyncio.sleep(0.3)  # a pull already under way completes
            paused_at = emitted(flow_, "questions")
            await asyncio.sleep(0.5)
            assert emitted(flow_, "questions") == paused_at, "the source kept pulling while paused"
            await flow_.resume()
            await wait_for(lambda: emitted(flow_, "questions") > paused_at, what="reading again after resume")
            stop.set()
            await asking
        for ids in (answers, peers.ws_ids, peers.unix_ids):
            assert ids == sorted(ids), "events reordered"
        assert answers[:stopped_at] == list(range(stopped_at)), "an answer was lost"
        await peers.stop()

    asyncio.run(scenario())
