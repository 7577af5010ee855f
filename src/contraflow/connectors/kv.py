"""`kv`: Tremor's key-value store: commands in `$kv` on `in`, replies on `out`, durable on disk.

Config: `dir` (required, Tremor's): where the store lives. A relative `dir`
is inside the connector's state directory under the runtime's data directory
(`DATA_DIR/connectors/<flow>/<alias>/<dir>`), so it survives restarts and
moves with the data directory; an absolute one is used as it is (created if
missing). The store is one SQLite file written with full synchronous commits:
a reply goes out only after its write reached the disk.

Commands (the event's `$kv`; the event's value is the value to store):
- `{"get": key}`: the stored value, or null;
- `{"put": key}`: stores the value, replies with it;
- `{"swap": key}`: stores the value, replies with the old one (null if none);
- `{"cas": key, "old": v}`: stores the value only if the key holds `v`
  (no `old`: only if the key is absent); replies null, or an error;
- `{"delete": key}`: removes the key, replies with the old value;
- `{"scan": start, "end": end}`: one reply per key in `[start, end)` (no
  `end`: to the last key), in key order.
Replies carry `$kv = {"op", "ok": key}` and the request's `$correlation`.
A bad command or a failed `cas` is an error event on `err`:
`{"error", "connector", "event"}` with `$kv = {"op", "key"}`, `$error` and
`$correlation`. Replies are kept only while `out` (errors: `err`) is
connected; a full reply queue holds the sink back (back-pressure).

The store moves with `contraflow state export/import FLOW ALIAS FILE`:
`export_store` reads it as JSON (`{"format", "keys": {key: value}}`, while
the flow runs too: SQLite's read transaction is a snapshot); `stage_import`
puts a snapshot in the connector's state directory, and the connector loads
it into its (empty) store when it next connects.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from contraflow.connectors.base import Connector, ConnectorContext, SinkEvent, SourceData, register
from contraflow.connectors.base.inbox import Inbox
from contraflow.connectors.base.options import ConfigReader
from contraflow.errors import UserError

STORE_FILE = "kv.sqlite3"
IMPORT_FILE = "kv.import.json"  # in the connector's state directory, until the connector loads it
STATE_FORMAT = "contraflow.kv-state/1"
OPS = ("get", "put", "swap", "cas", "delete", "scan")

Reply = tuple[Any, dict[str, Any]]


class KvError(Exception):
    """A command that cannot be carried out (bad shape, a `cas` that found another value)."""


class KvStore:
    """Keys (text) to JSON values in one SQLite file; each command is one transaction."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL)")

    def close(self) -> None:
        self._db.close()

    def is_empty(self) -> bool:
        return self._db.execute("SELECT 1 FROM kv LIMIT 1").fetchone() is None

    def load(self, keys: Mapping[str, Any]) -> None:
        """Store every key of an imported snapshot, in one transaction."""
        with self._transaction():
            self._db.executemany(
                "INSERT OR REPLACE INTO kv VALUES (?, ?)", [(k, orjson.dumps(v)) for k, v in keys.items()]
            )

    def get(self, key: str) -> Any:
        row = self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else orjson.loads(row[0])

    def put(self, key: str, value: Any) -> Any:
        """Store `value`; the old value (None if there was none)."""
        with self._transaction():
            old = self.get(key)
            self._db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, orjson.dumps(value)))
        return old

    def cas(self, key: str, expected: Any, absent: bool, value: Any) -> None:
        with self._transaction():
            row = self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
            current = None if row is None else orjson.loads(row[0])
            if (row is not None) if absent else (row is None or current != expected):
                wanted = "no value" if absent else orjson.dumps(expected).decode()
                found = "no value" if row is None else orjson.dumps(current).decode()
                raise KvError(f"CAS error: expected {wanted} but found {found}.")
            self._db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, orjson.dumps(value)))

    def delete(self, key: str) -> Any:
        with self._transaction():
            old = self.get(key)
            self._db.execute("DELETE FROM kv WHERE key = ?", (key,))
        return old

    def scan(self, start: str, end: str | None) -> list[tuple[str, Any]]:
        if end is None:
            rows = self._db.execute("SELECT key, value FROM kv WHERE key >= ? ORDER BY key", (start,))
        else:
            rows = self._db.execute(
                "SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key", (start, end)
            )
        return [(key, orjson.loads(value)) for key, value in rows]

    def _transaction(self) -> sqlite3.Connection:
        self._db.execute("BEGIN IMMEDIATE")
        return self._db  # its context manager commits, or rolls back on an exception


def store_in(state_dir: Path) -> Path | None:
    """The store of the kv connector whose state directory is `state_dir` (its relative `dir` is
    somewhere inside), or None when it has none there."""
    stores = sorted(state_dir.glob(f"**/{STORE_FILE}")) if state_dir.is_dir() else []
    if len(stores) > 1:
        raise UserError(f"more than one kv store under {state_dir}: {', '.join(map(str, stores))}")
    return stores[0] if stores else None


def export_store(path: Path) -> dict[str, Any]:
    """The store at `path` as JSON: `{"format", "keys": {key: value}}` (read-only; a snapshot)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT key, value FROM kv ORDER BY key").fetchall()
    finally:
        db.close()
    return {"format": STATE_FORMAT, "keys": {key: orjson.loads(value) for key, value in rows}}


def stage_import(state_dir: Path, snapshot: Mapping[str, Any]) -> Path:
    """Put `snapshot` (from `export_store`) where the connector loads it when it connects; refused
    when the connector already has keys. Returns the file it waits in."""
    if snapshot.get("format") != STATE_FORMAT or not isinstance(snapshot.get("keys"), dict):
        raise UserError(f"not a kv state snapshot (expected format {STATE_FORMAT!r})")
    existing = store_in(state_dir)
    if existing is not None and export_store(existing)["keys"]:
        raise UserError(f"the kv store at {existing} already has keys; stop the flow and remove it to import")
    target = state_dir / IMPORT_FILE
    state_dir.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_bytes(orjson.dumps(dict(snapshot)))
    os.replace(temporary, target)
    return target


def _load_staged(store: KvStore, state_dir: Path | None) -> None:
    """An imported snapshot waiting in `state_dir` goes into the (empty) store, then is removed."""
    staged = state_dir / IMPORT_FILE if state_dir is not None else None
    if staged is None or not staged.exists():
        return
    if not store.is_empty():
        raise UserError(f"{staged} waits to be imported but the kv store already has keys")
    store.load(orjson.loads(staged.read_bytes())["keys"])
    staged.unlink()


def execute(store: KvStore, command: Any, value: Any) -> list[Reply]:
    """Carry out one `$kv` command; its replies (value, `$kv`). Raises KvError."""
    op, key = _operation(command)
    if op == "get":
        return [_reply(op, key, store.get(key))]
    if op == "put":
        store.put(key, value)
        return [_reply(op, key, value)]
    if op == "swap":
        return [_reply(op, key, store.put(key, value))]
    if op == "cas":
        store.cas(key, command.get("old"), "old" not in command, value)
        return [_reply(op, key, None)]
    if op == "delete":
        return [_reply(op, key, store.delete(key))]
    end = command.get("end")
    if end is not None and not isinstance(end, str):
        raise KvError(f"Invalid KV command: `end` must be a string, got {end!r}")
    return [_reply(op, k, v) for k, v in store.scan(key, end)]


def _operation(command: Any) -> tuple[str, str]:
    if isinstance(command, dict):
        for op in OPS:
            key = command.get(op)
            if isinstance(key, str):
                return op, key
    raise KvError(f"Invalid KV command: {orjson.dumps(command).decode()}")


def _reply(op: str, key: str, value: Any) -> Reply:
    return value, {"kv": {"op": op, "ok": key}}


@register("kv")
class KvConnector(Connector[Path]):
    config_keys = frozenset({"dir"})
    required_keys = frozenset({"dir"})
    structured = True

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.inbox = Inbox(ctx.quiescing)
        self._store: KvStore | None = None

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> Path:
        return Path(cfg.string("dir"))

    @property
    def directory(self) -> Path:
        """`dir`, relative ones inside the connector's state directory."""
        if self.options.is_absolute() or self.ctx.state_dir is None:
            return self.options
        return self.ctx.state_dir / self.options

    async def connect(self) -> None:
        if self._store is None:
            store = await asyncio.to_thread(KvStore, self.directory / STORE_FILE)
            await asyncio.to_thread(_load_staged, store, self.ctx.state_dir)
            self._store = store

    async def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    async def pull(self) -> SourceData | None:
        return await self.inbox.get()

    async def send(self, events: Sequence[SinkEvent]) -> None:
        store = self._store
        assert store is not None, "kv: send before connect"
        for event in events:
            command = event.meta.get("kv")
            correlation = event.meta.get("correlation")
            value = event.value()
            try:
                replies = await asyncio.to_thread(execute, store, command, value)
            except KvError as err:
                await self._error(str(err), command, event, correlation)
                continue
            if "out" in self.ctx.outputs:
                for reply_value, meta in replies:
                    if correlation is not None:
                        meta["correlation"] = correlation
                    await self.inbox.put(SourceData(events=[(reply_value, meta)]))

    async def _error(self, reason: str, command: Any, event: SinkEvent, correlation: Any) -> None:
        self.ctx.metrics.count("in", 0, 0, errors=1)
        if "err" not in self.ctx.outputs:
            self.ctx.logger.error("kv command failed: %s", reason)
            return
        try:
            op, key = _operation(command)
            meta: dict[str, Any] = {"kv": {"op": op, "key": key}, "error": reason}
        except KvError:
            meta = {"kv": None, "error": reason}
        if correlation is not None:
            meta["correlation"] = correlation
        error = {"error": reason, "connector": self.ctx.name, "event": event.value()}
        await self.inbox.put(SourceData(events=[(error, meta)], port="err"))
