"""`contraflow sc run` (the controller) and `contraflow cluster start|status|stop`
(a controller and N SPUs on loopback as background processes)."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

import click

from contraflow.errors import UserError
from contraflow.spu.cli.local_cluster import SC_READY, LocalCluster, alive
from contraflow.units import parse_count, parse_duration_ms

DEFAULT_CLUSTER_DIR = "contraflow-cluster"


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
@click.option("--insecure", is_flag=True, help="Allow a non-loopback address without a token.")
def sc_run(data_dir: str, addr: str, session_timeout: str, insecure: bool) -> None:
    """Run the controller until SIGINT/SIGTERM; prints `sc ready addr=HOST:PORT` once listening.
    With $CONTRAFLOW_TOKEN, SPUs and clients must present it (they read the same variable)."""
    from contraflow.security import resolve_token
    from contraflow.spu.cli.listeners import check_listener
    from contraflow.spu.controller.controller import Controller

    timeout_s = parse_duration_ms(session_timeout, "--session-timeout") / 1000
    token = resolve_token(None)
    check_listener(addr, "the controller", token, insecure, "--addr")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    controller = Controller(Path(data_dir), addr, session_timeout_s=timeout_s, token=token)
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
    print(f"{SC_READY} addr={host}:{port}", flush=True)
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
    help="The cluster's directory: the controller's and each SPU's data, logs and the process list.",
)


@click.group()
def cluster() -> None:
    """A local SPU cluster: a controller and N SPUs on loopback, in the background."""


@cluster.command("start")
@click.option("--spus", default="3", show_default=True, metavar="N", help="How many SPUs.")
@click.option("--kafka", is_flag=True, help="Give each SPU a Kafka listener too (docs/kafka.md).")
@_cluster_dir
def cluster_start(spus: str, kafka: bool, data_dir: str) -> None:
    """Start the controller and the SPUs; print the SPUs' public (and Kafka) addresses."""
    count = parse_count(spus, "--spus", minimum=1)
    local = LocalCluster(Path(data_dir), kafka=kafka)
    if local.running():
        raise UserError(
            f"a cluster already runs from {data_dir}; `contraflow cluster stop --data-dir {data_dir}`"
        )
    local.members = {}
    try:
        local.start(count)
    except BaseException:
        local.stop()
        raise
    click.echo(f"controller {local.sc_addr}")
    click.echo(f"spus {local.bootstrap}")
    click.echo(f"use --spu {local.bootstrap}")
    if kafka:
        click.echo(f"kafka bootstrap.servers={local.kafka_bootstrap}")


@cluster.command("status")
@_cluster_dir
def cluster_status(data_dir: str) -> None:
    """Each process of the cluster, whether it runs, and each partition's leader."""
    from contraflow.spu.protocol import SpuError

    local = _started(data_dir)
    for m in local.members.values():
        name = "controller" if m.role == "sc" else f"spu {m.id}"
        kafka = f" kafka {m.kafka_addr}" if m.kafka_addr else ""
        click.echo(
            f"{name:<12} {m.addr:<22} pid {m.pid:<8} {'running' if alive(m.pid) else 'stopped'}{kafka}"
        )
    try:
        metadata = local.metadata()
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
    click.echo(f"stopped {_started(data_dir).stop()} process(es)")


def _started(data_dir: str) -> LocalCluster:
    """The cluster `cluster start` left in `data_dir` (its process list)."""
    local = LocalCluster(Path(data_dir))
    if not local.members:
        raise UserError(f"no cluster was started from {data_dir}")
    return local
