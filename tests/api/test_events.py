"""`GET /v1/events`: Server-Sent Events from the runtime's event stream, with history and a `flow` filter."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.api.conftest import InMemoryRuntime, ServerThread


@pytest.fixture
def served() -> Iterator[tuple[ServerThread, InMemoryRuntime, str]]:
    runtime = InMemoryRuntime()
    thread = ServerThread(runtime)
    address = thread.start()
    yield thread, runtime, f"http://{address}"
    thread.run(runtime.events.close())
    thread.stop()


async def _emit(runtime: InMemoryRuntime, kind: str, flow: str | None, **fields: Any) -> None:
    runtime.events.emit(kind, flow, **fields)


def read_events(url: str, count: int, into: list[dict[str, Any]], last_event_id: int | None = None) -> None:
    """Read `count` events of the stream at `url` (with its SSE framing checked) into `into`."""
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    with httpx.stream("GET", url, timeout=10, headers=headers) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        ids = []
        for line in reply.iter_lines():
            if line.startswith("id:"):
                ids.append(int(line.removeprefix("id:").strip()))
            if line.startswith("data:"):
                into.append(orjson.loads(line.removeprefix("data:").strip()))
                if len(into) == count:
                    assert ids == [e["seq"] for e in into]
                    return


def test_history_then_live_events_of_one_flow(served: tuple[ServerThread, InMemoryRuntime, str]) -> None:
    thread, runtime, base = served
    thread.run(_emit(runtime, "deploy", "main", definition="ingest"))
    thread.run(_emit(runtime, "deploy", "second", definition="ingest"))
    thread.run(_emit(runtime, "watchdog", None, what="loop", blocked_s=0.7))
    got: list[dict[str, Any]] = []
    reader = threading.Thread(target=read_events, args=(f"{base}/v1/events?flow=main", 2, got))
    reader.start()
    while not runtime.events._subscribers:  # the reader is subscribed: what follows is live
        reader.join(0.05)
    thread.run(_emit(runtime, "breaker", "second", connector="dst", state="open", reason="down"))
    thread.run(_emit(runtime, "breaker", "main", connector="dst", state="open", reason="down"))
    reader.join(10)
    assert [(e["kind"], e["flow"]) for e in got] == [("deploy", "main"), ("breaker", "main")]
    assert got[1]["reason"] == "down" and got[1]["ts"].endswith("Z")


def test_without_a_filter_every_event_and_history_is_bounded(
    served: tuple[ServerThread, InMemoryRuntime, str],
) -> None:
    thread, runtime, base = served
    for n in range(5):
        thread.run(_emit(runtime, "pause", f"f{n}"))
    got: list[dict[str, Any]] = []
    read_events(f"{base}/v1/events?history=2", 2, got)
    assert [e["flow"] for e in got] == ["f3", "f4"]


def test_a_client_reconnecting_with_last_event_id_gets_what_it_missed(
    served: tuple[ServerThread, InMemoryRuntime, str],
) -> None:
    thread, runtime, base = served
    for n in range(6):
        thread.run(_emit(runtime, "pause", f"f{n % 2}"))
    got: list[dict[str, Any]] = []
    read_events(f"{base}/v1/events?history=1", 4, got, last_event_id=2)  # `history` gives way
    assert [e["seq"] for e in got] == [3, 4, 5, 6]
    got = []
    reader = threading.Thread(target=read_events, args=(f"{base}/v1/events?flow=f0", 2, got, 3))
    reader.start()
    while not runtime.events._subscribers:
        reader.join(0.05)
    thread.run(_emit(runtime, "resume", "f0"))
    reader.join(10)
    assert [(e["seq"], e["kind"]) for e in got] == [(5, "pause"), (7, "resume")]


def test_a_bad_last_event_id_is_400(served: tuple[ServerThread, InMemoryRuntime, str]) -> None:
    _, _, base = served
    for bad in ("soon", "-3"):
        reply = httpx.get(f"{base}/v1/events", headers={"Last-Event-ID": bad}, timeout=10)
        assert reply.status_code == 400 and "Last-Event-ID" in reply.json()["error"], reply.text


@pytest.mark.parametrize("query", ["history=-1", "history=501", "history=lots"])
def test_bad_parameters_are_400(served: tuple[ServerThread, InMemoryRuntime, str], query: str) -> None:
    _, _, base = served
    reply = httpx.get(f"{base}/v1/events?{query}", timeout=10)
    assert reply.status_code == 400 and "history" in reply.json()["error"]
