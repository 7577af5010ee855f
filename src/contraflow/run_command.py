"""`contraflow run FILE.troy...`: SPU, Spark, REST API and every deployed flow in one process.

Runs until a flow's `exit` connector fires or SIGINT/SIGTERM arrives; both
quiesce (sources stop, pipelines and sinks drain, offsets commit) and exit 0.
A restart with the same `--data-dir` resumes every channel from its committed
offsets and every pipeline from its Spark checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from contraflow.errors import UserError
from contraflow.lang.graph import Deployment

log = logging.getLogger("contraflow.run")

STATUS_INTERVAL_S = 1.0


@dataclass(frozen=True)
class RunOptions:
    files: tuple[Path, ...]
    data_dir: Path
    api: str | None
    master: str | None
    spu: str | None
    status: bool
    kafka_addr: str | None = None


@click.command("run")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the SPU log, Spark checkpoints and connector state live (default ./contraflow-data or $CONTRAFLOW_DATA_DIR).",
)
@click.option("--api", default="127.0.0.1:9898", show_default=True, help="Address of the REST API.")
@click.option("--no-api", is_flag=True, help="Do not start the REST API.")
@click.option("--master", default=None, help="Spark master URL (default local[*]), e.g. spark://host:7077.")
@click.option(
    "--spu", default=None, metavar="HOST:PORT", help="Use this SPU instead of starting an embedded one."
)
@click.option("--no-status", is_flag=True, help="No live status lines (logs only).")
@click.option(
    "--kafka-addr",
    default=None,
    metavar="HOST:PORT",
    help="The embedded SPU also serves the Kafka protocol here (e.g. 127.0.0.1:9092; docs/kafka.md).",
)
def run(
    files: tuple[Path, ...],
    data_dir: Path | None,
    api: str,
    no_api: bool,
    master: str | None,
    spu: str | None,
    no_status: bool,
    kafka_addr: str | None,
) -> None:
    """Deploy every `deploy flow` of FILES and run until Ctrl-C (which drains the flows and exits 0)."""
    from contraflow.spark.session import default_data_dir

    for path in files:
        if not path.is_file():
            raise UserError(f"no such file: {path}")
    if kafka_addr and spu:
        raise UserError("--kafka-addr is for the embedded SPU; with --spu, start that SPU with --kafka-addr")
    options = RunOptions(
        files, data_dir or default_data_dir(), None if no_api else api, master, spu, not no_status, kafka_addr
    )
    deployment = compile_all(files)
    check_all(deployment, options.data_dir)
    asyncio.run(_main(options, deployment))


def compile_all(files: tuple[Path, ...]) -> Deployment:
    """Every flow of every file; a flow id deployed twice is a user error."""
    from contraflow.lang.troy.compiler import compile_file

    merged = Deployment()
    for path in files:
        for flow_id, graph in compile_file(path).flows.items():
            if flow_id in merged.flows:
                raise UserError(
                    f"{path}: flow '{flow_id}' is deployed twice; give one deployment another name"
                )
            merged.flows[flow_id] = graph
    if not merged.flows:
        raise UserError("nothing to run: no `deploy flow` in " + ", ".join(map(str, files)))
    return merged


def check_all(deployment: Deployment, data_dir: Path) -> None:
    """Connector kinds and configs, channel settings: every mistake before Spark takes seconds to start."""
    from contraflow.api.metrics import RuntimeMetrics
    from contraflow.runtime.flow import FlowInstance, Services

    services = Services("", None, data_dir, RuntimeMetrics(), lambda: None)
    for flow_id, graph in deployment.flows.items():
        FlowInstance(flow_id, graph, services).prepare()


async def _main(options: RunOptions, deployment: Deployment) -> None:
    from rich.console import Console

    console = Console(stderr=True)
    _setup_logging(console)
    options.data_dir.mkdir(parents=True, exist_ok=True)
    # Signals count from the first moment: Ctrl-C while Spark starts stops right after it started.
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        if options.spu:
            spu_addr = options.spu
        else:
            embedded = await _embedded_spu(stack, options.data_dir, options.kafka_addr)
            spu_addr = embedded.addr
            if embedded.kafka_addr:
                console.print(f"[dim]Kafka protocol on {embedded.kafka_addr}[/dim]")
        console.print(f"[dim]SPU at {spu_addr}; starting Spark ({options.master or 'local[*]'})...[/dim]")
        spark = await _spark(stack, options)
        from contraflow.runtime.runtime import Runtime
        from contraflow.runtime.watchdog import watch_loop

        runtime = Runtime(spu_addr, spark, options.data_dir, stop_requested=stop)
        if options.api:
            console.print(f"[dim]REST API on http://{await _api(stack, runtime, options.api)}[/dim]")
        if not stop.is_set():
            await runtime.deploy_graphs(deployment)
        console.print(f"[dim]running {', '.join(runtime.flows)}; Ctrl-C drains and stops[/dim]")
        status = asyncio.create_task(
            _status(runtime, console) if options.status else runtime.stop_requested.wait()
        )
        watchdog = asyncio.create_task(watch_loop())
        await runtime.stop_requested.wait()
        console.print("[dim]quiescing: sources stopped, draining pipelines and sinks...[/dim]")
        await runtime.quiesce_all()
        _ignore_late_signals(loop)
        for task in (status, watchdog):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        failed = [f.id for f in runtime.flows.values() if f.error]
        console.print(
            "[dim]stopped[/dim]" + (f" [red](errors in {', '.join(failed)})[/red]" if failed else "")
        )


def _ignore_late_signals(loop: asyncio.AbstractEventLoop) -> None:
    """Flows are stopped: a SIGTERM arriving while Spark shuts down (its JVM stops its Python
    workers) must not turn a clean exit into "killed by SIGTERM"."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_IGN)


def _setup_logging(console: Any) -> None:
    from rich.logging import RichHandler

    handler = RichHandler(console=console, show_path=False, rich_tracebacks=False, markup=False)
    logging.basicConfig(level=logging.WARNING, handlers=[handler], format="%(message)s", force=True)
    for name in ("contraflow.runtime", "contraflow.connector", "contraflow.run"):
        logging.getLogger(name).setLevel(logging.INFO)


async def _embedded_spu(stack: contextlib.AsyncExitStack, data_dir: Path, kafka_addr: str | None) -> Any:
    """An SPU in a thread of this process: a killed runtime leaves no orphan holding the log's lock."""
    from contraflow.spu.embedded import EmbeddedSpu

    spu = EmbeddedSpu(data_dir / "spu", mode="thread", public_addr="127.0.0.1:0", kafka_addr=kafka_addr)
    await asyncio.to_thread(spu.start)
    stack.push_async_callback(asyncio.to_thread, spu.stop)
    return spu


async def _spark(stack: contextlib.AsyncExitStack, options: RunOptions) -> Any:
    from contraflow.spark.session import session

    spark = await asyncio.to_thread(session, options.master, options.data_dir)
    stack.push_async_callback(asyncio.to_thread, spark.stop)
    return spark


async def _api(stack: contextlib.AsyncExitStack, runtime: Any, address: str) -> str:
    from contraflow.api.app import create_app
    from contraflow.api.server import ApiServer, parse_address

    host, port = parse_address(address)
    server = ApiServer(create_app(runtime), host, port)
    bound = await server.start()
    stack.push_async_callback(server.stop)
    return bound


async def _status(runtime: Any, console: Any) -> None:
    """One live line per flow, redrawn every second (plain lines when stderr is not a terminal)."""
    from rich.live import Live

    from contraflow.runtime.status import StatusBoard

    board = StatusBoard()
    flows = lambda: list(runtime.flows.values())  # noqa: E731 - flows come and go over the API
    if not console.is_terminal:
        while True:
            await asyncio.sleep(STATUS_INTERVAL_S * 5)
            console.print(board.render(flows()))
    with Live(board.render(flows()), console=console, refresh_per_second=4, transient=False) as live:
        while True:
            await asyncio.sleep(STATUS_INTERVAL_S)
            live.update(board.render(flows()))


if __name__ == "__main__":  # pragma: no cover
    run(sys.argv[1:])
