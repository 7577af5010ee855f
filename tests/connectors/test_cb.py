"""cb: replaying files line by line in turn, counting acks, and steering breakers and fails from events."""

from __future__ import annotations

import pytest

from contraflow.connectors.base import ConnectorConfigError
from contraflow.connectors.cb import ALL_RECEIVED, CbConnector
from tests.connectors.support import make, run, sink_event


def test_the_source_sends_every_line_of_its_files_in_turn_then_reports_and_stops(tmp_path, capsys) -> None:
    (tmp_path / "a.json").write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n')
    (tmp_path / "b.json").write_text('{"b": 1}\n\n')

    async def body() -> list[tuple[int, bytes | None, bool]]:
        conn = make("cb", {"paths": [str(tmp_path / "a.json"), str(tmp_path / "b.json")]})
        assert isinstance(conn, CbConnector)
        conn.ctx.stop_runtime = conn.ctx.quiescing.set  # as the runtime does: stopping quiesces
        await conn.connect()
        pulled = []
        while (item := await conn.pull()) is not None:
            pulled.append((item.stream, item.data, item.end_stream))
            if item.token is not None:
                await conn.ack(item.token)
        return pulled

    pulled = run(body())
    data = [(s, d) for s, d, end in pulled if not end]
    assert data == [(0, b'{"a": 1}'), (1, b'{"b": 1}'), (0, b'{"a": 2}'), (0, b'{"a": 3}')]
    assert {s for s, _, end in pulled if end} == {0, 1}  # each file ends its own stream
    assert ALL_RECEIVED in capsys.readouterr().err


def test_missing_acks_are_reported_after_the_timeout(tmp_path, capsys) -> None:
    (tmp_path / "in.json").write_text('{"x": 1}\n{"x": 2}\n')

    async def body() -> None:
        conn = make("cb", {"path": str(tmp_path / "in.json"), "timeout": 50_000_000})
        conn.ctx.stop_runtime = conn.ctx.quiescing.set
        await conn.connect()
        first = await conn.pull()
        assert first is not None
        await conn.ack(first.token)  # the second line is never acknowledged
        while await conn.pull() is not None:
            pass

    run(body())
    err = capsys.readouterr().err
    assert ALL_RECEIVED not in err and "Got acks: 1" in err


def test_the_sink_opens_and_closes_the_breaker_and_fails_single_events() -> None:
    breaker: list[str] = []

    async def body() -> list:
        conn = make("cb", {}, breaker=breaker)
        await conn.send(
            [
                sink_event({"cb": "trigger"}),
                sink_event({"n": 1}, {"cb": ["fail"]}),  # metadata first, as Tremor reads it
                sink_event({"cb": "ack"}),
                sink_event({"cb": ["restore", "ack"]}),
            ]
        )
        item = await conn.pull()  # the failed event comes out on `err`
        assert item is not None and item.port == "err" and item.events is not None
        return item.events

    events = run(body())
    assert breaker == ["open:cb: trigger", "close"]
    [(error, meta)] = events
    assert error["event"] == {"n": 1} and error["error"] == "cb: fail" and meta == {"cb": ["fail"]}


def test_paths_must_be_a_list_of_paths() -> None:
    with pytest.raises(ConnectorConfigError, match="config key 'paths' must be a list of file paths"):
        make("cb", {"paths": "in.json"})
    with pytest.raises(ConnectorConfigError, match="unknown config key 'file'"):
        make("cb", {"file": "in.json"})
