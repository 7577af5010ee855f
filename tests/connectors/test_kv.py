"""kv: Tremor's commands against the store on disk, replies on `out`, errors on `err`, kept across restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from contraflow.connectors.base import Connector, ConnectorConfigError
from contraflow.connectors.kv import STATE_FORMAT, STORE_FILE
from contraflow.pipeline.commands import state
from tests.connectors.support import make, run, sink_event


async def replies(conn: Connector, count: int) -> list[tuple[str, Any, dict[str, Any]]]:
    """The next `count` replies as (port, value, metadata)."""
    out = []
    while len(out) < count:
        item = await conn.pull()
        assert item is not None and item.events is not None
        out.extend((item.port, value, meta) for value, meta in item.events)
    return out


def command(kv: dict[str, Any], value: Any = None, correlation: Any = None) -> Any:
    meta: dict[str, Any] = {"kv": kv}
    if correlation is not None:
        meta["correlation"] = correlation
    return sink_event(value, meta)


def test_commands_reply_on_out_and_the_store_survives_a_restart(tmp_path: Path) -> None:
    async def first_run() -> list:
        conn = make("kv", {"dir": "store"}, state_dir=tmp_path)
        await conn.connect()
        await conn.send(
            [
                command({"put": "snot"}, "badger", correlation=7),
                command({"get": "snot"}),
                command({"get": "nothing"}),
                command({"swap": "snot"}, {"new": 1}),
                command({"put": "a"}, 1),
                command({"put": "b"}, 2),
                command({"put": "c"}, 3),
                command({"scan": "a", "end": "c"}),
                command({"delete": "a"}),
                command({"cas": "b", "old": 2}, 20),
                command({"cas": "fresh"}, "first"),
            ]
        )
        got = await replies(conn, 12)
        await conn.close()
        return got

    got = run(first_run())
    assert got == [
        ("out", "badger", {"kv": {"op": "put", "ok": "snot"}, "correlation": 7}),
        ("out", "badger", {"kv": {"op": "get", "ok": "snot"}}),
        ("out", None, {"kv": {"op": "get", "ok": "nothing"}}),
        ("out", "badger", {"kv": {"op": "swap", "ok": "snot"}}),  # the old value
        ("out", 1, {"kv": {"op": "put", "ok": "a"}}),
        ("out", 2, {"kv": {"op": "put", "ok": "b"}}),
        ("out", 3, {"kv": {"op": "put", "ok": "c"}}),
        ("out", 1, {"kv": {"op": "scan", "ok": "a"}}),  # [a, c): a and b
        ("out", 2, {"kv": {"op": "scan", "ok": "b"}}),
        ("out", 1, {"kv": {"op": "delete", "ok": "a"}}),
        ("out", None, {"kv": {"op": "cas", "ok": "b"}}),
        ("out", None, {"kv": {"op": "cas", "ok": "fresh"}}),
    ]
    assert (tmp_path / "store" / STORE_FILE).exists()  # inside the connector's state directory

    async def second_run() -> list:
        conn = make("kv", {"dir": "store"}, state_dir=tmp_path)
        await conn.connect()
        await conn.send([command({"scan": ""})])
        got = await replies(conn, 4)
        await conn.close()
        return got

    assert [(meta["kv"]["ok"], value) for _, value, meta in run(second_run())] == [
        ("b", 20),
        ("c", 3),
        ("fresh", "first"),
        ("snot", {"new": 1}),
    ]


def test_a_failed_cas_and_a_bad_command_are_errors_on_err(tmp_path: Path) -> None:
    async def body() -> list:
        conn = make("kv", {"dir": str(tmp_path / "abs")})
        await conn.connect()
        await conn.send(
            [
                command({"put": "k"}, 1),
                command({"cas": "k", "old": 5}, 6, correlation="c1"),
                command({"frobnicate": "k"}),
                command({"get": "k"}),
            ]
        )
        got = await replies(conn, 4)
        await conn.close()
        return got

    put, cas, bad, get = run(body())
    assert put[0] == "out" and get == ("out", 1, {"kv": {"op": "get", "ok": "k"}})  # the cas changed nothing
    assert cas[0] == "err" and cas[1]["error"] == "CAS error: expected 5 but found 1."
    assert cas[2] == {"kv": {"op": "cas", "key": "k"}, "error": cas[1]["error"], "correlation": "c1"}
    assert bad[0] == "err" and bad[1]["error"].startswith("Invalid KV command") and bad[2]["kv"] is None
    assert (tmp_path / "abs" / STORE_FILE).exists()  # an absolute `dir` is used as it is


def test_dir_is_required() -> None:
    with pytest.raises(ConnectorConfigError, match="missing config key 'dir'"):
        make("kv", {})


def test_the_store_moves_with_state_export_and_import(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"

    async def fill() -> None:
        conn = make("kv", {"dir": "store"}, state_dir=old / "connectors" / "f" / "kv")
        await conn.connect()
        await conn.send([command({"put": "a"}, {"n": 1}), command({"put": "b"}, [2, "two"])])
        await replies(conn, 2)
        await conn.close()

    run(fill())
    snapshot = tmp_path / "kv.json"
    exported = CliRunner().invoke(state, ["export", "f", "kv", str(snapshot), "--data-dir", str(old)])
    assert exported.exit_code == 0, exported.output
    assert orjson.loads(snapshot.read_bytes()) == {
        "format": STATE_FORMAT,
        "keys": {"a": {"n": 1}, "b": [2, "two"]},
    }
    imported = CliRunner().invoke(state, ["import", "g", "kv", str(snapshot), "--data-dir", str(new)])
    assert imported.exit_code == 0, imported.output

    async def read_back() -> list[tuple[str, Any, dict[str, Any]]]:
        conn = make("kv", {"dir": "elsewhere"}, state_dir=new / "connectors" / "g" / "kv")
        await conn.connect()
        await conn.send([command({"scan": ""})])
        got = await replies(conn, 2)
        await conn.close()
        return got

    assert [(value, meta["kv"]["ok"]) for _, value, meta in run(read_back())] == [
        ({"n": 1}, "a"),
        ([2, "two"], "b"),
    ]
    again = CliRunner().invoke(state, ["import", "g", "kv", str(snapshot), "--data-dir", str(new)])
    assert "already has keys" in str(again.exception)  # the command line prints it as an error
