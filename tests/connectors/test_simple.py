"""metronome, exit, null, bench and stdio: timing, stopping, discarding, measuring, real std streams."""

from __future__ import annotations

import asyncio
import base64
import lzma
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import pytest

from contraflow.codecs import preprocessors
from contraflow.connectors.base import ConnectorConfigError, SinkEvent
from contraflow.connectors.base.histogram import Histogram
from contraflow.connectors.bench import BenchConnector
from contraflow.connectors.exit import ExitConnector
from tests.cli_process import child_env
from tests.connectors.support import make, run, sink_event


def test_metronome_ticks_at_its_interval_with_increasing_ids() -> None:
    async def body() -> tuple[float, list[tuple[float, dict]]]:
        conn = make("metronome", {"interval": 50_000_000})  # 50 ms
        started = time.monotonic()
        await conn.connect()  # the schedule starts here
        ticks = []
        for _ in range(4):
            item = await conn.pull()
            assert item is not None and item.events is not None
            ticks.append((time.monotonic(), item.events[0][0]))
        conn.ctx.quiescing.set()
        assert await conn.pull() is None
        return started, ticks

    started, ticks = run(body())
    assert [t[1]["id"] for t in ticks] == [0, 1, 2, 3]
    assert all(
        t[1]["onramp"] == "metronome" and abs(t[1]["ingest_ns"] - time.time_ns()) < 10**10 for t in ticks
    )
    # A fixed-rate schedule: tick k never comes before k + 1 intervals from the start (no bursts); a
    # tick delayed by a busy machine may be followed by an on-time one, so single gaps can be short.
    since_start = [t[0] - started for t in ticks]
    assert all(since_start[k] >= (k + 1) * 0.05 for k in range(4)), since_start
    assert since_start[-1] < 2.0, since_start


def test_metronome_requires_a_positive_interval() -> None:
    with pytest.raises(ConnectorConfigError, match="missing config key 'interval'"):
        make("metronome", {})
    with pytest.raises(ConnectorConfigError, match="config key 'interval' must be an integer >= 1"):
        make("metronome", {"interval": 0})


def test_exit_stops_the_runtime_after_the_delay_with_the_event_code() -> None:
    async def body() -> tuple[float, ExitConnector]:
        stopped = asyncio.Event()
        conn = make("exit", {"delay": 10_000_000}, stop_runtime=stopped.set)  # 10 ms by config
        assert isinstance(conn, ExitConnector)
        started = time.monotonic()
        await conn.send([sink_event({"exit": 3, "delay": 100_000_000})])  # the event asks for 100 ms
        assert not stopped.is_set()  # send returns at once; the stop follows
        await conn.send([sink_event({"exit": 9})])  # only the first event counts
        await asyncio.wait_for(stopped.wait(), 2)
        return time.monotonic() - started, conn

    elapsed, conn = run(body())
    assert 0.09 < elapsed < 3.0
    assert conn.status() == {"exit_requested": True, "code": 3, "graceful": True, "delay_ns": 100_000_000}


def test_null_discards_and_its_source_waits_for_quiescence() -> None:
    async def body() -> None:
        conn = make("null", {})
        await conn.send([sink_event(i) for i in range(100)])
        pulling = asyncio.create_task(conn.pull())
        await asyncio.sleep(0.05)
        assert not pulling.done()
        conn.ctx.quiescing.set()
        assert await asyncio.wait_for(pulling, 1) is None

    run(body())


def test_histogram_keeps_significant_figures() -> None:
    h = Histogram(2)
    for v in [1234, 1299, 5, 1_000_000, 987_654]:
        h.record(v)
    assert h.bucket(1299) == 1200 and h.bucket(987_654) == 980_000 and h.bucket(7) == 7
    assert h.percentile(50) == 1200 and h.percentile(100) == 1_000_000 and h.percentile(1) == 5
    assert h.summary()["count"] == 5


def test_bench_replays_iters_times_and_reports_what_came_back(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "data.json.xz"
    lines = [orjson.dumps({"n": i, "pad": "x" * 50}) for i in range(100)]
    path.write_bytes(lzma.compress(b"\n".join(lines) + b"\n"))  # compressed data is detected

    async def body() -> dict:
        stopped = asyncio.Event()
        conn = make(
            "bench", {"path": str(path), "iters": 3}, preprocessors=["separate"], stop_runtime=stopped.set
        )
        assert isinstance(conn, BenchConnector)
        await conn.connect()
        chain = preprocessors(["separate"])
        while (item := await conn.pull()) is not None:
            assert item.data is not None and item.meta is not None
            frames = chain.process(item.data)
            # The "flow": every event comes back to the bench sink with its metadata.
            await conn.send([SinkEvent(f, dict(item.meta), [f]) for f in frames])
        await asyncio.wait_for(stopped.wait(), 5)
        await conn.close()
        return conn.finish()

    report = run(body())
    assert report["sent"] == report["received"] == 300 and report["iterations"] == 3
    assert report["latency_ns"]["count"] == 300 and report["latency_ns"]["p50"] > 0
    assert report["events_per_s"] > 0 and report["mb_per_s"] > 0
    printed = orjson.loads(capfd.readouterr().out)
    assert printed["bench"]["sent"] == 300


def test_bench_stops_after_secs_and_reports_when_nothing_comes_back(tmp_path: Path) -> None:
    path = tmp_path / "data.b64"
    path.write_bytes(b"\n".join(base64.b64encode(f"event {i}".encode()) for i in range(10)))

    async def body() -> tuple[dict, list[bytes]]:
        stopped = asyncio.Event()
        conn = make(
            "bench",
            {"source": str(path), "stop_after_secs": 0.2, "base64": True, "interval": 1_000_000},
            stop_runtime=stopped.set,
            inputs=frozenset(),  # nothing comes back: the report follows the source at once
        )
        assert isinstance(conn, BenchConnector)
        await conn.connect()
        seen = []
        while (item := await conn.pull()) is not None:
            assert item.data is not None
            seen.append(item.data)
        await asyncio.wait_for(stopped.wait(), 1)
        return conn.finish(), seen

    report, seen = run(body())
    assert seen[:2] == [b"event 0", b"event 1"]  # one decoded line per pull without a separate preprocessor
    assert 10 < report["sent"] <= 201  # one event per 1 ms interval, for 0.2 s at most
    assert report["received"] == 0 and report["latency_ns"] is None
    assert report["seconds"] < 0.5  # the rate is over the sending time, not any waiting after it


def test_bench_reports_after_a_drain_timeout_when_some_events_never_come_back(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_bytes(b"".join(orjson.dumps({"n": i}) + b"\n" for i in range(10)))

    async def body() -> dict:
        stopped = asyncio.Event()
        conn = make("bench", {"path": str(path), "iters": 1}, stop_runtime=stopped.set)
        assert isinstance(conn, BenchConnector)
        conn.drain_timeout_s = 0.2
        await conn.connect()
        while (item := await conn.pull()) is not None:
            assert item.data is not None and item.meta is not None
            if orjson.loads(item.data)["n"] % 2 == 0:  # a "pipeline" that filters odd events out
                await conn.send([SinkEvent(item.data, dict(item.meta), [item.data])])
        await asyncio.wait_for(stopped.wait(), 5)
        return conn.finish()

    report = run(body())
    assert report["sent"] == 10 and report["received"] == 5 and report["latency_ns"]["count"] == 5


def test_bench_config_needs_exactly_one_path() -> None:
    with pytest.raises(ConnectorConfigError, match="config key 'path' is required"):
        BenchConnector.check_config("b", {"iters": 1})
    with pytest.raises(ConnectorConfigError, match="config key 'path' is required"):
        BenchConnector.check_config("b", {"path": "a", "source": "b"})


STDIO_SCRIPT = textwrap.dedent(
    """
    import asyncio
    from tests.connectors.support import make, sink_event

    async def main():
        conn = make("stdio", {})
        await conn.connect()
        while (item := await conn.pull()) is not None:
            for line in item.data.decode().split():
                text = line.upper()
                port = "stderr" if text.startswith("ERR") else "stdout"
                await conn.send([sink_event(text, port=port, frames=[text.encode() + b"\\n"])])
        await conn.close()

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("from_file", [False, True])
def test_stdio_reads_stdin_and_writes_stdout_and_stderr(tmp_path: Path, from_file: bool) -> None:
    data = b"hello\nerr: bad\n"
    root = Path(__file__).parents[2]
    env = child_env(tests=True)
    if from_file:  # a regular file on stdin is read through a thread (epoll cannot watch files)
        source = tmp_path / "in.txt"
        source.write_bytes(data)
        with source.open("rb") as stdin:
            done = subprocess.run(
                [sys.executable, "-c", STDIO_SCRIPT],
                stdin=stdin,
                capture_output=True,
                timeout=30,
                cwd=root,
                env=env,
            )
    else:
        done = subprocess.run(
            [sys.executable, "-c", STDIO_SCRIPT],
            input=data,
            capture_output=True,
            timeout=30,
            cwd=root,
            env=env,
        )
    assert done.returncode == 0, done.stderr
    assert b"HELLO" in done.stdout and b"ERR" not in done.stdout
    assert done.stderr == b"ERR:\n" and done.stdout == b"HELLO\nBAD\n"


def test_bench_paces_high_rates_in_batches_stamped_when_due(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_bytes(b"".join(orjson.dumps({"n": i}) + b"\n" for i in range(1000)))

    async def body() -> tuple[dict, list[tuple[int, int, int]]]:
        conn = make(
            "bench",
            {"path": str(path), "interval": 100_000, "stop_after_secs": 0.5},  # 10k events/s
            preprocessors=["separate"],
            inputs=frozenset(),
        )
        assert isinstance(conn, BenchConnector)
        await conn.connect()
        pulls = []
        while (item := await conn.pull()) is not None:
            assert item.data is not None and item.meta is not None
            pulls.append((item.data.count(b"\n"), item.meta["bench"]["ingest_ns"], time.time_ns()))
        return conn.finish(), pulls

    report, pulls = run(body())
    sent = sum(n for n, _, _ in pulls)
    assert report["sent"] == sent
    # A rate one event per wake-up could never reach: many events per pull, close to 10k/s overall.
    assert len(pulls) < sent / 2, (len(pulls), sent)
    assert 3_500 <= sent <= 5_001, sent
    assert report["sent_per_s"] >= 7_000, report
    # Stamped when the first event of the pull was due: never after it left, and in schedule order
    # (within the few microseconds between reading the wall and the monotonic clock).
    assert all(stamp <= left for _, stamp, left in pulls)
    stamps = [s for _, s, _ in pulls]
    assert all(b - a > -1_000_000 for a, b in zip(stamps, stamps[1:], strict=False))


def test_bench_measures_only_events_sent_after_the_warmup(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_bytes(b"".join(orjson.dumps({"n": i}) + b"\n" for i in range(10)))

    async def body() -> dict:
        conn = make("bench", {"path": str(path), "interval": 20_000_000, "warmup_secs": 0.1, "iters": 1})
        assert isinstance(conn, BenchConnector)
        await conn.connect()
        held = []
        while (item := await conn.pull()) is not None:
            assert item.data is not None and item.meta is not None
            held.append(SinkEvent(item.data, dict(item.meta), [item.data]))
        await conn.send(held)  # all come back late, after the warm-up: only the late-sent ones count
        await conn.close()
        return conn.finish()

    report = run(body())
    assert report["received"] == 10
    assert 3 <= report["latency_ns"]["count"] <= 7, report  # 20 ms apart, the first ~100 ms are warm-up
