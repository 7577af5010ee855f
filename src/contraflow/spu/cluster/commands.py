"""`contraflow sc run` (the controller) and `contraflow cluster start|status|stop`
(a controller and N SPUs on loopback as background processes)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click
import orjson

from contraflow.errors import UserError
from contraflow.spu.units import parse_count, parse_duration_ms

READY_PREFIX = "sc ready"
PROCESSES_FILE = "cluster-processes.json"
DEFAULT_CLUSTER_DIR = "contraflow-cluster"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


@click.group()
def sc() -> None:
    """The streaming controller of an SPU cluster."""


@sc.command("run")
@click.option(
    "--data-dir",
    default="contraflow-sc",
    show_default=True,
    metavar="DIR",
    help="Where the cluster metadata is kept (survives restarts).",
)
@click.option("--addr", default="127.0.0.1:9003", show_default=True, metavar="HOST:PORT", help="Listen here.")
@click.option(
    "--session-timeout",
    default="2s",
    show_default=True,
    metavar="DURATION",
    help="An SPU silent for this long is lost: its partitions get new leaders.",
)
def sc_run(data_dir: str, addr: str, session_timeout: str) -> None:
    """Run the controller until SIGINT/SIGTERM; prints `sc ready addr=HOST:PORT` once listening."""
    from contraflow.security import resolve_token
    from contraflow.spu.cluster.controller import Controller

    timeout_s = parse_duration_ms(session_timeout, "--session-timeout") / 1000
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    controller = Controller(Path(data_dir), addr, session_timeout_s=timeout_s, token=resolve_token(None))
    try:
        asyncio.run(_serve(controller))
    except OSError as err:
        raise UserError(f"cannot start the controller: {err}") from None


async def _serve(controller: Any) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    host, port = await controller.start()
    print(f"{READY_PREFIX} addr={host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        await controller.stop()


# -- cluster start|status|stop ----------------------------------------------------------------------

_cluster_dir = click.option(
    "--data-dir",
    default=DEFAULT_CLUSTER_DIR,
    show_default=True,
    metavar="DIR",
    help="The cluster's directory: the controller's and each SPU's data, and the process list.",
)


@click.group()
def cluster() -> None:
    """A local SPU cluster: a controller and N SPUs on loopback, in the background."""


def _spawn(args: list[str], root: Path, name: str) -> subprocess.Popen[bytes]:
    """A detached child (its own session: it outlives this command; `cluster stop` ends it)
    whose stdout (the ready line) and stderr (its log) go to files in the cluster directory."""
    with open(root / f"{name}.out", "wb") as out, open(root / f"{name}.log", "ab") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "contraflow", *args],
            stdout=out,
            stderr=log_file,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _ready_line(proc: subprocess.Popen[bytes], root: Path, name: str, prefix: str) -> dict[str, str]:
    """The fields of the process's ready line (`prefix key=value ...`), once it printed it."""
    deadline = time.monotonic() + START_TIMEOUT_S
    out = root / f"{name}.out"
    while True:
        line = out.read_text().partition("\n")[0].strip() if out.exists() else ""
        if line.startswith(prefix):
            return dict(item.split("=", 1) for item in line[len(prefix) :].split())
        if proc.poll() is not None or time.monotonic() > deadline:
            raise UserError(f"{name} did not start (see {root / (name + '.log')})")
        time.sleep(0.05)


def _load(root: Path) -> dict[str, Any] | None:
    path = root / PROCESSES_FILE
    return orjson.loads(path.read_bytes()) if path.exists() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@cluster.command("start")
@click.option("--spus", default="3", show_default=True, metavar="N", help="How many SPUs.")
@_cluster_dir
def cluster_start(spus: str, data_dir: str) -> None:
    """Start the controller and the SPUs; print the SPUs' public addresses."""
    count = parse_count(spus, "--spus", minimum=1)
    root = Path(data_dir).resolve()
    running = _load(root)
    if running and any(_alive(p["pid"]) for p in running["processes"]):
        raise UserError(f"a cluster already runs from {root}; `contraflow cluster stop --data-dir {data_dir}`")
    root.mkdir(parents=True, exist_ok=True)
    processes: list[dict[str, Any]] = []
    sc_proc = _spawn(["sc", "run", "--data-dir", str(root / "sc"), "--addr", "127.0.0.1:0"], root, "sc")
    sc_addr = _ready_line(sc_proc, root, "sc", READY_PREFIX)["addr"]
    processes.append({"role": "sc", "pid": sc_proc.pid, "addr": sc_addr})
    for n in range(count):
        args = ["spu", "run", "--id", str(n), "--sc", sc_addr, "--data-dir", str(root / f"spu-{n}")]
        args += ["--public-addr", "127.0.0.1:0", "--private-addr", "127.0.0.1:0"]
        proc = _spawn(args, root, f"spu-{n}")
        fields = _ready_line(proc, root, f"spu-{n}", "spu ready")
        processes.append({"role": "spu", "id": n, "pid": proc.pid, "addr": fields["public"]})
    (root / PROCESSES_FILE).write_bytes(orjson.dumps({"sc": sc_addr, "processes": processes}))
    _wait_registered(sc_addr, count)
    addrs = ",".join(p["addr"] for p in processes if p["role"] == "spu")
    click.echo(f"controller {sc_addr}")
    click.echo(f"spus {addrs}")
    click.echo(f"use --spu {addrs}")


def _controller_metadata(sc_addr: str) -> dict[str, Any]:
    from contraflow.spu.client.aio import AsyncSpuClient
    from contraflow.spu.client.connection import RetryPolicy
    from contraflow.spu.protocol import ApiKey

    async def ask() -> dict[str, Any]:
        async with AsyncSpuClient(sc_addr, retry=RetryPolicy(attempts=1), request_timeout_s=5.0) as client:
            metadata: dict[str, Any] = (await client.request(ApiKey.METADATA, {})).fields["metadata"]
            return metadata

    return asyncio.run(ask())


def _wait_registered(sc_addr: str, count: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while len(_controller_metadata(sc_addr)["spus"]) < count:
        if time.monotonic() > deadline:
            raise UserError(f"the SPUs did not all register with the controller within {START_TIMEOUT_S:.0f}s")
        time.sleep(0.1)


@cluster.command("status")
@_cluster_dir
def cluster_status(data_dir: str) -> None:
    """Each process of the cluster, whether it runs, and the topics' leaders."""
    from contraflow.spu.protocol import SpuError

    state = _load(Path(data_dir).resolve())
    if state is None:
        raise UserError(f"no cluster was started from {data_dir}")
    for p in state["processes"]:
        name = "controller" if p["role"] == "sc" else f"spu {p['id']}"
        click.echo(f"{name:<12} {p['addr']:<22} pid {p['pid']:<8} {'running' if _alive(p['pid']) else 'stopped'}")
    try:
        metadata = _controller_metadata(state["sc"])
    except SpuError as err:
        click.echo(f"controller unreachable: {err}")
        return
    for name, topic in metadata["topics"].items():
        for n, (leader, epoch, replicas, isr) in enumerate(topic["partitions"]):
            click.echo(f"topic {name}/{n}: leader {leader} epoch {epoch} replicas {replicas} in-sync {isr}")


@cluster.command("stop")
@_cluster_dir
def cluster_stop(data_dir: str) -> None:
    """Stop every process of the cluster (SIGTERM, then SIGKILL after a grace period)."""
    root = Path(data_dir).resolve()
    state = _load(root)
    if state is None:
        raise UserError(f"no cluster was started from {data_dir}")
    pids = [p["pid"] for p in reversed(state["processes"]) if _alive(p["pid"])]
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        _reap(pids)
        time.sleep(0.05)
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    (root / PROCESSES_FILE).unlink()
    click.echo(f"stopped {len(pids)} process(es)")


def _reap(pids: list[int]) -> None:
    """Collect exited children of this process (when start and stop run in one process)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
