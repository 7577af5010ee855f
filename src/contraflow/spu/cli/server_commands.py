"""`contraflow spu run`: run an SPU in the foreground until interrupted."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from contraflow.errors import UserError
from contraflow.security import listener_options
from contraflow.spu.cli.commands import log_data_dir_option
from contraflow.spu.cli.listeners import check_listener, door_options

if TYPE_CHECKING:
    from contraflow.spu.app import SpuServer

READY_PREFIX = "spu ready"
SWITCH_INTERVAL_S = 0.0005


@click.group()
def spu() -> None:
    """Run and manage a streaming processing unit (the log server)."""


@spu.command()
@log_data_dir_option
@click.option(
    "--public-addr",
    default="127.0.0.1:9005",
    metavar="HOST:PORT",
    show_default=True,
    help="Address for producers, consumers and admin (port 0 picks a free one).",
)
@click.option(
    "--private-addr",
    default="127.0.0.1:9006",
    metavar="HOST:PORT",
    show_default=True,
    help="Address for replication between SPUs.",
)
@click.option("--id", "spu_id", default="0", show_default=True, metavar="N", help="This SPU's id.")
@click.option(
    "--sc",
    "controller_addr",
    default=None,
    metavar="HOST:PORT",
    help="Join the cluster of the controller at HOST:PORT (`contraflow sc run`); alone without it.",
)
@door_options("The SPU")
@click.option(
    "--max-buffered-bytes",
    default="256MiB",
    show_default=True,
    metavar="SIZE",
    help="Request bytes the whole SPU holds at once; past it, clients wait (not read).",
)
@click.option(
    "--staged-memory",
    default="64MiB",
    show_default=True,
    metavar="SIZE",
    help="Transaction staging the SPU holds in memory; past it, staged batches go to disk.",
)
@click.option(
    "--max-connections",
    default="1024",
    show_default=True,
    metavar="N",
    help="Open connections; a newer one past it is closed at once.",
)
@click.option(
    "--frame-timeout",
    default="30s",
    show_default=True,
    metavar="DURATION",
    help="A frame that started arriving must be complete by then, or the connection is closed.",
)
@click.option(
    "--idle-timeout",
    default="10m",
    show_default=True,
    metavar="DURATION",
    help="Close a connection with no request, no running work and no stream for this long.",
)
@click.option(
    "--no-scrub",
    "no_scrub",
    is_flag=True,
    help="Do not CRC-check the existing log in the background at start (reads still check it).",
)
@listener_options("the SPU (clients present it before any request)", "the SPU")
def run(
    data_dir: str,
    public_addr: str,
    private_addr: str,
    spu_id: str,
    controller_addr: str | None,
    kafka_addr: str | None,
    registry_addr: str | None,
    max_buffered_bytes: str,
    staged_memory: str,
    max_connections: str,
    frame_timeout: str,
    idle_timeout: str,
    no_scrub: bool,
    token: str | None,
    insecure: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
) -> None:
    """Serve the log until SIGINT/SIGTERM. Prints one `spu ready ...` line once listening."""
    from contraflow.security import resolve_token, server_tls
    from contraflow.spu.app import ServerConfig, SpuServer
    from contraflow.spu.server import Limits, parse_addr
    from contraflow.units import parse_count, parse_duration_ms, parse_size

    if not spu_id.isdigit():
        raise UserError(f"the SPU id must be a non-negative integer, got {spu_id!r}")
    token = resolve_token(token)
    for addr, what in ((public_addr, "the SPU"), (private_addr, "the SPU's private port")):
        check_listener(addr, what, token, insecure)
    if controller_addr is not None:
        try:
            parse_addr(controller_addr)
        except ValueError as err:
            raise UserError(f"--sc: {err}") from None
    if kafka_addr is not None:
        # the Kafka listener does not check the token: beyond loopback it is always open
        check_listener(kafka_addr, "the Kafka listener (no authentication)", None, insecure)
    if registry_addr is not None:
        check_listener(registry_addr, "the schema registry", token, insecure, "--registry-addr")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    limits = Limits(
        max_buffered_bytes=parse_size(max_buffered_bytes, "--max-buffered-bytes"),
        staged_memory_bytes=parse_size(staged_memory, "--staged-memory"),
        max_connections=parse_count(max_connections, "--max-connections", minimum=1),
        frame_timeout_s=parse_duration_ms(frame_timeout, "--frame-timeout") / 1000,
        idle_timeout_s=parse_duration_ms(idle_timeout, "--idle-timeout") / 1000,
    )
    config = ServerConfig(
        Path(data_dir),
        public_addr,
        private_addr,
        int(spu_id),
        kafka_addr=kafka_addr,
        controller_addr=controller_addr,
        limits=limits,
        token=token,
        tls=server_tls(tls_cert, tls_key),
        scrub=not no_scrub,
    )
    # The loop hands appends to worker threads and back: a shorter GIL switch
    # interval (default 5 ms) keeps a busy thread from delaying a push that long.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        tls = (tls_cert, tls_key) if tls_cert and tls_key else None
        asyncio.run(_serve(SpuServer(config), registry_addr, tls))
    except OSError as err:
        raise UserError(f"cannot start the SPU: {err}") from None


async def _serve(server: SpuServer, registry_addr: str | None, tls: tuple[Path, Path] | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    host, port = server.public_addr
    private = "{}:{}".format(*server.private_addr) if server.private_addr else "-"
    kafka = " kafka={}:{}".format(*server.kafka_addr) if server.kafka_addr else ""
    registry = None
    try:
        if registry_addr is not None:
            from contraflow.spu.registry import RegistryServer

            registry = RegistryServer(f"{host}:{port}", registry_addr, token=server.config.token, tls=tls)
            kafka += f" registry={await registry.start()}"
        print(f"{READY_PREFIX} public={host}:{port} private={private}{kafka}", flush=True)
        await stop.wait()
    finally:
        if registry is not None:
            await registry.stop()
        await server.stop()
    sys.stdout.flush()
