"""Running Troy flows in this process against the session's SPU and Spark session."""

from __future__ import annotations

import asyncio
import itertools
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson

from contraflow.runtime.runtime import Runtime

_ids = itertools.count()

JSON_LINES = """
  define connector lines from file
  args path, mode = "read"
  with
    codec = "json",
    preprocessors = ["separate"],
    postprocessors = ["separate"],
    config = {"path": args.path, "mode": args.mode}
  end;
  define pipeline pass
  pipeline
    select event from in into out;
  end;
"""


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound and released), for a flow's server to listen on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def flow_id(prefix: str) -> str:
    """A flow id no other test uses (they share one SPU)."""
    return f"{prefix}{next(_ids)}"


def troy(fid: str, body: str, args: str = "") -> str:
    """A Troy source deploying one flow `fid` with the json-lines file connector and `pass` pipeline."""
    head = f"args\n  {args}\n" if args else ""
    return f"define flow {fid}\n{head}flow\n{JSON_LINES}\n{body}\nend;\ndeploy flow {fid};\n"


def files_through_pass(fid: str, source: Path, sink: Path, args: str = "") -> str:
    """`troy` of the simplest flow: a json-lines file -> `pass` -> a json-lines file (truncated)."""
    return troy(
        fid,
        f"""
  create connector input from lines with path = "{source}" end;
  create connector output from lines with path = "{sink}", mode = "truncate" end;
  create pipeline pass;
  connect /connector/input to /pipeline/pass;
  connect /pipeline/pass to /connector/output;
""",
        args=args,
    )


def write_events(path: Path, count: int, start: int = 0) -> list[dict[str, Any]]:
    events = [{"n": i, "msg": f"event number {i}"} for i in range(start, start + count)]
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    return events


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


async def wait_for(check: Callable[[], bool], timeout_s: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.1)


@asynccontextmanager
async def running(spu_addr: str, spark: Any, data_dir: Path, source: str) -> AsyncIterator[Runtime]:
    """A runtime with `source` deployed; quiesced on exit (within the undeploy ceiling: a flow a
    test left stuck costs 10 s, not the shutdown ceiling's 120)."""
    runtime = Runtime(spu_addr, spark, data_dir)
    await runtime.deploy(source, "<test>")
    try:
        yield runtime
    finally:
        await runtime.quiesce_all(shutdown=False)
