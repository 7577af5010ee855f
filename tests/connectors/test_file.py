"""The file connector against real files: chunking on lines, checkpoint resume, rewinds, write modes."""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from contraflow.connectors import file as file_connector
from contraflow.connectors.base import Connector, ConnectorConfigError
from contraflow.connectors.base.filereader import AlignedChunks, Chunk, ContentReader
from contraflow.connectors.file import FileConnector
from tests.connectors.support import make, run, sink_event

LINES = [f'{{"n":{i},"text":"{"x" * (i % 13)}"}}\n'.encode() for i in range(200)]
CONTENT = b"".join(LINES)


@pytest.fixture(autouse=True)
def one_read_per_pull(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests here follow single reads (chunk_size bytes); a flow's pulls merge up to PULL_BYTES of them."""
    monkeypatch.setattr(file_connector, "PULL_BYTES", 1)


def reader(path: Path, state: Path | None, chunk_size: int = 37, pre: list | None = None) -> FileConnector:
    conn = make(
        "file",
        {"path": str(path), "mode": "read", "chunk_size": chunk_size},
        state_dir=state,
        preprocessors=["separate"] if pre is None else pre,
    )
    assert isinstance(conn, FileConnector)
    return conn


async def drain(conn: Connector, limit: int | None = None) -> list[tuple[bytes, int]]:
    """Pull up to `limit` chunks (all when None): (data, token)."""
    out = []
    while limit is None or len(out) < limit:
        data = await conn.pull()
        if data is None:
            break
        assert data.data is not None
        out.append((data.data, data.token))
    return out


def test_chunks_end_on_lines_and_cover_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_connector, "PULL_BYTES", 200)  # a pull merges up to 5 of the 37-byte reads
    path = tmp_path / "in.json"
    path.write_bytes(CONTENT + b'{"tail":true}')  # an unterminated last line comes last

    async def body() -> list[bytes]:
        conn = reader(path, None)
        await conn.connect()
        chunks = [d for d, _ in await drain(conn)]
        await conn.close()
        return chunks

    chunks = run(body())
    assert b"".join(chunks) == CONTENT + b'{"tail":true}'
    assert all(c.endswith(b"\n") for c in chunks[:-1])
    assert chunks[-1].endswith(b'{"tail":true}')
    assert len(chunks) > 20  # many pulls, each holding whole lines only
    assert max(map(len, chunks)) < 300  # five 37-byte reads at most, cut after their last line


def test_a_pull_read_at_once_is_the_chunks_merged(tmp_path: Path) -> None:
    """A plain file's pull is one read of a pull's bytes: the same bytes and the same cut after
    the last line as merging one chunk_size read after another (the file's end aside, where the
    unterminated tail comes as a pull of its own)."""
    path = tmp_path / "in.json"
    path.write_bytes(CONTENT + b'{"tail":true}')

    def pulls(read: Callable[[AlignedChunks], list[Chunk]]) -> list[tuple[int, int, bytes]]:
        chunks = AlignedChunks(ContentReader(path, 37), b"\n")
        chunks.seek(0)
        out = []
        while pulled := read(chunks):
            out.append((pulled[0].start, pulled[-1].end, b"".join(c.data for c in pulled)))
        return out

    at_once = pulls(lambda c: c.next_many(8))
    merged = pulls(lambda c: [chunk for _ in range(8) if (chunk := c.next()) is not None])
    assert all(len(p[2]) <= 8 * 37 + max(map(len, LINES)) for p in at_once)  # a carried part line at most
    assert at_once[:-2] == merged[:-1] and len(at_once) > 10
    assert b"".join(p[2] for p in at_once) == CONTENT + b'{"tail":true}'
    assert at_once[-1][2] == b'{"tail":true}'


def test_restart_resumes_after_the_last_acknowledged_line(tmp_path: Path) -> None:
    path, state = tmp_path / "in.json", tmp_path / "state"
    path.write_bytes(CONTENT)

    async def first_run() -> int:
        conn = reader(path, state)
        await conn.connect()
        pulled = await drain(conn, 10)
        for _, token in pulled[:6]:  # the last four are in flight when the runtime "dies"
            await conn.ack(token)
        await conn.close()  # flushes the checkpoint
        return sum(len(d) for d, _ in pulled[:6])

    async def second_run() -> bytes:
        conn = reader(path, state)
        await conn.connect()
        rest = b"".join(d for d, _ in await drain(conn))
        await conn.close()
        return rest

    delivered = run(first_run())
    assert 0 < delivered < len(CONTENT)
    assert run(second_run()) == CONTENT[delivered:]


def test_out_of_order_acks_advance_over_the_acknowledged_prefix_only(tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_bytes(CONTENT)

    async def body() -> None:
        conn = reader(path, tmp_path / "state")
        await conn.connect()
        (d0, t0), (d1, t1), (_d2, t2) = await drain(conn, 3)
        await conn.ack(t1)
        assert conn.committed == 0
        await conn.ack(t0)
        assert conn.committed == len(d0) + len(d1)
        await conn.ack(t2)
        assert conn.committed == len(d0) + len(d1) + len(_d2)
        await conn.close()

    run(body())


def test_fail_reads_again_from_the_failed_chunk(tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_bytes(CONTENT)

    async def body() -> None:
        conn = reader(path, None)
        await conn.connect()
        (d0, t0), (d1, t1), (d2, _t2) = await drain(conn, 3)
        await conn.ack(t0)
        await conn.fail(t1)
        again = await drain(conn, 2)
        assert [d for d, _ in again] == [d1, d2]
        await conn.close()

    run(body())


@pytest.mark.parametrize("compress", [gzip.compress, zstandard.ZstdCompressor().compress])
def test_compressed_file_is_decompressed_and_resumes(tmp_path: Path, compress) -> None:  # type: ignore[no-untyped-def]
    path, state = tmp_path / "in.log.z", tmp_path / "state"
    path.write_bytes(compress(CONTENT))

    async def first() -> int:
        conn = reader(path, state, chunk_size=64, pre=[("decompress", {}), "separate"])
        await conn.connect()
        pulled = await drain(conn, 5)
        for _, token in pulled:
            await conn.ack(token)
        await conn.close()
        return sum(len(d) for d, _ in pulled)

    async def second() -> bytes:
        conn = reader(path, state, chunk_size=64, pre=["separate"])
        await conn.connect()
        rest = b"".join(d for d, _ in await drain(conn))
        await conn.close()
        return rest

    done = run(first())
    assert run(second()) == CONTENT[done:]


def test_replaced_file_is_read_from_the_start(tmp_path: Path) -> None:
    path, state = tmp_path / "in.json", tmp_path / "state"
    path.write_bytes(CONTENT)

    async def read_some(ack: bool) -> bytes:
        conn = reader(path, state)
        await conn.connect()
        pulled = await drain(conn, None if not ack else 4)
        if ack:
            for _, token in pulled:
                await conn.ack(token)
        await conn.close()
        return b"".join(d for d, _ in pulled)

    run(read_some(ack=True))
    replacement = tmp_path / "new.json"
    replacement.write_bytes(b'{"fresh":1}\n' * 3)
    os.replace(replacement, path)  # a new inode under the same name (log rotation)
    assert run(read_some(ack=False)) == b'{"fresh":1}\n' * 3


def test_length_prefixed_framing_keeps_no_checkpoint(tmp_path: Path) -> None:
    path, state = tmp_path / "in.bin", tmp_path / "state"
    path.write_bytes(CONTENT)

    async def body() -> None:
        conn = reader(path, state, pre=["length-prefixed"])
        await conn.connect()
        for _, token in await drain(conn, 3):
            await conn.ack(token)
        await conn.close()

    run(body())
    assert not state.exists() or not any(state.iterdir())


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("append", b"old content\n" + b'{"a":1}\n{"a":2}\n'),
        ("truncate", b'{"a":1}\n{"a":2}\n'),
        ("write", b'{"a":1}\n{"a":2}\n'),
        ("overwrite", b'{"a":1}\n{"a":2}\n'),  # longer than the old content: nothing of it is left
    ],
)
def test_write_modes(tmp_path: Path, mode: str, expected: bytes) -> None:
    path = tmp_path / "out" / "out.json"
    path.parent.mkdir()
    path.write_bytes(b"old content\n")

    async def body() -> None:
        conn = make("file", {"path": str(path), "mode": mode})
        await conn.connect()
        await conn.send([sink_event({"a": 1})])
        await conn.send([sink_event({"a": 2})])
        await conn.close()

    run(body())
    assert path.read_bytes() == expected


def test_overwrite_keeps_bytes_past_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    path.write_bytes(b"0123456789" * 3)

    async def body() -> None:
        conn = make("file", {"path": str(path), "mode": "overwrite"})
        await conn.connect()
        await conn.send([sink_event("ab", frames=[b"ab"])])
        await conn.close()

    run(body())
    assert path.read_bytes() == b"ab23456789" + b"0123456789" * 2


def test_missing_file_fails_connect(tmp_path: Path) -> None:
    async def body() -> None:
        conn = reader(tmp_path / "nope.json", None)
        with pytest.raises(FileNotFoundError):
            await conn.connect()

    run(body())


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"path": "x", "mode": "read", "chunksize": 1},
            "connector 'c' (file): unknown config key 'chunksize'",
        ),
        ({"path": "x"}, "connector 'c' (file): missing config key 'mode'"),
        ({"path": "x", "mode": "apend"}, "connector 'c' (file): config key 'mode' must be one of"),
        ({"path": "x", "mode": "read", "chunk_size": 0}, "config key 'chunk_size' must be an integer >= 1"),
        ({"path": "", "mode": "read"}, "config key 'path' must be a non-empty string"),
    ],
)
def test_config_errors_name_alias_and_key(config: dict, message: str) -> None:
    with pytest.raises(ConnectorConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        FileConnector.check_config("c", config)


def test_truncated_file_is_read_from_the_start(tmp_path: Path) -> None:
    path, state = tmp_path / "in.json", tmp_path / "state"
    path.write_bytes(CONTENT)

    async def body(ack_all: bool) -> bytes:
        conn = reader(path, state)
        await conn.connect()
        pulled = await drain(conn)
        if ack_all:
            for _, token in pulled:
                await conn.ack(token)
        await conn.close()
        return b"".join(d for d, _ in pulled)

    run(body(ack_all=True))
    with path.open("r+b") as f:  # same inode, shorter than the saved position
        f.truncate(0)
        f.write(b'{"again":1}\n')
    assert run(body(ack_all=False)) == b'{"again":1}\n'


@pytest.mark.parametrize("mode", ["truncate", "write", "overwrite"])
def test_a_resumed_flow_appends_instead_of_truncating(tmp_path: Path, mode: str) -> None:
    path, state = tmp_path / "out.json", tmp_path / "state"
    path.write_bytes(b"before the flow\n")

    async def write(value: int, state_dir: Path | None) -> None:
        conn = make("file", {"path": str(path), "mode": mode}, state_dir=state_dir)
        await conn.connect()
        await conn.send([sink_event({"run": value})])
        await conn.close()

    run(write(1, state))  # first start: the mode applies
    assert path.read_bytes() == b'{"run":1}\n' + (b"before the flow\n"[10:] if mode == "overwrite" else b"")
    first = path.read_bytes()
    run(write(2, state))  # the same flow resumes (e.g. after SIGKILL): nothing it delivered is lost
    assert path.read_bytes() == first + b'{"run":2}\n'
    run(write(3, None))  # without state (a fresh flow) the mode applies again
    assert path.read_bytes().startswith(b'{"run":3}\n')


def test_resume_continues_after_the_position_the_runtime_kept_in_the_log(tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_bytes(CONTENT)

    async def body() -> None:
        conn = reader(path, None)
        await conn.connect()
        first = await conn.pull()
        assert first is not None and first.position is not None
        await conn.close()

        again = reader(path, None)
        await again.connect()
        await again.resume(first.position)  # the runtime found this chunk's events in the channel log
        rest = b"".join(d for d, _ in await drain(again))
        assert rest == CONTENT[first.position["position"] :]
        await again.close()

        other = reader(path, None)
        await other.connect()
        await other.resume({**first.position, "inode": -1})  # another file: ignored, read from the start
        assert b"".join(d for d, _ in await drain(other)) == CONTENT
        await other.close()

    run(body())


def test_a_sink_file_that_cannot_seek_is_written_without_its_page_cache_handed_back(tmp_path: Path) -> None:
    """A FIFO as the sink's file: every write reaches the reader (the write-behind's advice needs a
    position, which a pipe has not, and must not turn each write into a delivery failure)."""
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()))
    reader.start()
    with fifo.open("wb") as out:
        behind = file_connector.WriteBehind()
        for _ in range(3):
            file_connector._write_all(out, b'{"a":1}\n' * 1000, behind)
    reader.join(timeout=10)
    assert read == [b'{"a":1}\n' * 3000]
