"""`contraflow run FILE.troy...`: SPU, Spark, REST API and every deployed flow in one process.

Runs until a flow's `exit` connector fires or SIGINT/SIGTERM arrives; both
quiesce (sources stop, pipelines and sinks drain, offsets commit) and exit 0.
The drain is bounded by each flow's shutdown ceiling (`cancel`, default 120 s);
a second Ctrl-C cuts it short.
A restart with the same `--data-dir` resumes every channel from its committed
offsets and every pipeline from its Spark checkpoint.

Start-up: the checks that need no parsing (files, ports, data directory,
Java) run first; then Spark's JVM starts in a thread while the flows compile
(a mistake in them ends the run at once), the SPU and the REST API start.
Only flows that run a Spark query wait for it
(`contraflow.runtime.spark_on_demand`): flows that run none (routing-only
pipelines run aliased, or no pipeline at all) start at once. The SPU's
address goes to `DATA_DIR/runtime.json` for the log commands
(contraflow.discovery). The terminal shows contraflow's own lines only:
Spark's, its JVM's and libraries' output goes to `DATA_DIR/logs/run.log`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import logging
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click
from rich.markup import escape
from rich.text import Text

from contraflow.api.facade import SparkUnavailable
from contraflow.errors import UserError
from contraflow.lang.graph import Deployment
from contraflow.runtime.spark_on_demand import SparkOnDemand
from contraflow.security import listener_options
from contraflow.spu.cli.listeners import check_listener, door_options

log = logging.getLogger("contraflow.run")

STATUS_INTERVAL_S = 1.0
PLAIN_STATUS_INTERVAL_S = 5.0
if TYPE_CHECKING:
    from contraflow.spu.embedded import Mode

DEFAULT_SPU_PORT = 9005
# Thread or child process for the embedded SPU: see docs/runtime.md ("Where the embedded SPU runs").
DEFAULT_EMBEDDED_SPU: Mode = "thread"
LOG_FILE = Path("logs") / "run.log"


@dataclass(frozen=True)
class RunOptions:
    files: tuple[Path, ...]
    data_dir: Path
    api: str | None
    master: str | None
    spu: str | None
    status: bool
    spu_port: int = DEFAULT_SPU_PORT
    kafka_addr: str | None = None
    embedded_spu: Mode = DEFAULT_EMBEDDED_SPU
    token: str | None = None
    allowed_paths: tuple[Path, ...] = ()
    tls: tuple[str, str] | None = None  # the API's certificate and key
    registry_addr: str | None = None  # the schema registry beside the SPU (docs/registry.md)


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
    "--spu",
    default=None,
    metavar="HOST:PORT[,HOST:PORT...]",
    help="Use this SPU, or these SPUs of a cluster, instead of starting an embedded one.",
)
@click.option(
    "--spu-port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_SPU_PORT,
    show_default=True,
    help="Port of the embedded SPU on 127.0.0.1 (0 picks a free one).",
)
@click.option(
    "--embedded-spu",
    type=click.Choice(["process", "thread"]),
    default=DEFAULT_EMBEDDED_SPU,
    show_default=True,
    help="Run the embedded SPU as a child process (its own interpreter lock) or a thread of the runtime.",
)
@click.option("--no-status", is_flag=True, help="No live status lines (logs only).")
@door_options("The embedded SPU")
@listener_options("the REST API (Bearer) and the embedded SPU", "the REST API")
@click.option(
    "--allow-path",
    "allow_paths",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Flows deployed through the API may use files under DIR (repeatable; "
    "default: the working directory and the data directory).",
)
def run(
    files: tuple[Path, ...],
    data_dir: Path | None,
    api: str,
    no_api: bool,
    master: str | None,
    spu: str | None,
    spu_port: int,
    embedded_spu: Mode,
    no_status: bool,
    kafka_addr: str | None,
    registry_addr: str | None,
    token: str | None,
    insecure: bool,
    allow_paths: tuple[Path, ...],
    tls_cert: Path | None,
    tls_key: Path | None,
) -> None:
    """Deploy every `deploy flow` of FILES and run until Ctrl-C (which drains the flows and exits 0)."""
    from contraflow.foreground import own_foreground_group
    from contraflow.spark.session import default_data_dir

    for path in files:
        if not path.is_file():
            raise UserError(f"no such file: {path}")
    if kafka_addr and spu:
        raise UserError("--kafka-addr is for the embedded SPU; with --spu, start that SPU with --kafka-addr")
    from contraflow.security import resolve_token, server_tls

    data = data_dir or default_data_dir()
    options = RunOptions(
        files,
        data,
        None if no_api else api,
        master,
        spu,
        not no_status,
        spu_port,
        kafka_addr,
        embedded_spu,
        resolve_token(token),
        allow_paths or (Path.cwd(), data),
        (str(tls_cert), str(tls_key)) if server_tls(tls_cert, tls_key) else None,
        registry_addr,
    )
    if options.api:
        from contraflow.api.server import parse_address
        from contraflow.security import check_exposure

        check_exposure(parse_address(options.api)[0], options.api, "the REST API", options.token, insecure)

    if kafka_addr:  # the Kafka listener does not check the token: beyond loopback it is always open
        check_listener(kafka_addr, "the Kafka listener (no authentication)", None, insecure)
    if registry_addr:
        check_listener(registry_addr, "the schema registry", options.token, insecure)
    fresh_data_dir = not options.data_dir.exists()
    preflight(options)
    from contraflow.heap import keep_freed_heap
    from contraflow.process_output import quiet_process_output

    keep_freed_heap()  # the runtime and its embedded SPU free and reuse batches' worth of memory
    from contraflow.spark.session import master_url, start_session

    log_file = options.data_dir / LOG_FILE
    log_file.parent.mkdir(parents=True, exist_ok=True)
    # The JVM inherits the process group (Ctrl-C) and fds 1 and 2 (the log file) as it starts.
    with (
        own_foreground_group(),
        quiet_process_output(log_file) as (out, err_out),
        _python_streams(out, err_out),
    ):
        master = master_url(options.master)
        spark = SparkOnDemand(functools.partial(start_session, master, options.data_dir), master)
        spark.start()  # seconds: under way while the flows compile, the SPU and the API start
        deployment, queries = compile_and_check(files, options.data_dir, fresh_data_dir)
        asyncio.run(_serve(options, deployment, queries, log_file, spark))


def compile_and_check(
    files: tuple[Path, ...], data_dir: Path, fresh_data_dir: bool
) -> tuple[Deployment, set[str]]:
    """Every flow, compiled and checked (`compile_all`, `check_all`), and the ids of those that run
    a Spark query; a mistake leaves no data directory behind when this run made it (Spark's start
    writes its few files there first, in milliseconds, long before compiling ends)."""
    try:
        deployment = compile_all(files)
        queries = check_all(deployment, data_dir)
    except UserError:
        if fresh_data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
        raise
    return deployment, queries


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


def check_all(deployment: Deployment, data_dir: Path) -> set[str]:
    """Connector kinds and configs, channel settings: every mistake before anything slow starts.
    Returns the ids of the flows that run a Spark query (the others need no Spark)."""
    from contraflow.runtime.flow import FlowInstance, Services
    from contraflow.runtime.metrics import RuntimeMetrics

    services = Services("", SparkOnDemand(), data_dir, RuntimeMetrics(), lambda: None)
    queries = set()
    for flow_id, graph in deployment.flows.items():
        instance = FlowInstance(flow_id, graph, services)
        instance.prepare()
        if instance.runs_queries():
            queries.add(flow_id)
    return queries


def preflight(options: RunOptions) -> None:
    """Ports, data directory and Java: each mistake is one line before anything slow starts."""
    from contraflow.preflight import check_data_dir, check_java, check_port_free

    if options.api:
        check_port_free(options.api, "the REST API", "--api HOST:PORT or --no-api")
    if options.spu is None:
        check_port_free(f"127.0.0.1:{options.spu_port}", "the embedded SPU", "--spu-port")
    check_data_dir(options.data_dir)
    check_java()


@contextlib.contextmanager
def _python_streams(out: IO[bytes], err: IO[bytes]) -> Iterator[None]:
    """Python's own sys.stdout/sys.stderr stay on the terminal (connectors write events there)."""
    saved = sys.stdout, sys.stderr
    sys.stdout = io.TextIOWrapper(out, line_buffering=True)
    sys.stderr = io.TextIOWrapper(err, line_buffering=True)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
            stream.detach()
        sys.stdout, sys.stderr = saved


async def _serve(
    options: RunOptions, deployment: Deployment, queries: set[str], log_file: Path, spark: SparkOnDemand
) -> None:
    from rich.console import Console

    from contraflow.discovery import RuntimeInfo, remove_runtime_info, write_runtime_info

    console = Console(stderr=True, highlight=False)
    _setup_logging(console, log_file)
    _say(console, f"log (Spark's too): {log_file}")
    # Signals count from the first moment: Ctrl-C while Spark starts ends its start at once.
    loop = asyncio.get_running_loop()
    stop, cut_short = asyncio.Event(), asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _on_stop_signal, console, stop, cut_short)
    board_ticks = console.is_terminal and options.status  # the live lines show Spark's start
    # A failed start is said here, once, unless the command line's flows need Spark: then the run
    # stops with it as its error; otherwise it goes on with the flows that need no Spark.
    report_failure = None if queries else log_file
    progress = asyncio.create_task(_spark_progress(console, spark, report_failure, not board_ticks))
    abandon = asyncio.create_task(_end_spark_start_on_stop(stop, spark))
    async with contextlib.AsyncExitStack() as stack:
        try:
            spu_addr = options.spu or await _embedded_spu(stack, console, options)
        finally:  # stopped before the SPU (last in, first out)
            stack.push_async_callback(spark.stop)
        write_runtime_info(options.data_dir, RuntimeInfo(os.getpid(), spu_addr, options.api, str(log_file)))
        stack.callback(remove_runtime_info, options.data_dir)
        where = "" if options.spu else f", log in {options.data_dir / 'spu'}"
        _say(console, f"SPU on {spu_addr}{where}")
        if options.registry_addr:
            from contraflow.spu.registry import RegistryServer

            registry = RegistryServer(spu_addr, options.registry_addr, token=options.token, tls=options.tls)
            _say(console, f"schema registry on {await registry.start()}")
            stack.push_async_callback(registry.stop)
        from contraflow.runtime.runtime import Runtime
        from contraflow.runtime.watchdog import watch_loop

        runtime = Runtime(spu_addr, spark, options.data_dir, stop_requested=stop)
        await runtime.events.open()  # before the API and the loop watchdog can emit or subscribe
        if options.api:  # up while Spark starts: deployments that need it wait for it
            scheme = "https" if options.tls else "http"
            _say(console, f"REST API on {scheme}://{await _api(stack, runtime, options)}")
        # The live lines start with the deployment: a flow's sources run while its queries start.
        status = asyncio.create_task(
            _status(runtime, console) if options.status else runtime.stop_requested.wait()
        )
        failure = await _deploy_all(runtime, console, deployment, queries, log_file)
        if failure is None and not stop.is_set():
            _say(console, f"running {', '.join(runtime.flows)}; Ctrl-C drains and stops")
        watchdog = asyncio.create_task(watch_loop(runtime.events, runtime.metrics))
        await runtime.stop_requested.wait()
        _say(console, "quiescing: sources stopped, draining pipelines and sinks (Ctrl-C again: stop now)...")
        await runtime.quiesce_all(cut_short)
        _ignore_late_signals(loop)
        for task in (status, watchdog, progress, abandon):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        failed = [f.id for f in runtime.flows.values() if f.error]
        console.print(
            "[dim]stopped[/dim]" + (f" [red](errors in {', '.join(failed)})[/red]" if failed else "")
        )
    if failure is not None:
        raise failure


async def _deploy_all(
    runtime: Any, console: Any, deployment: Deployment, queries: set[str], log_file: Path
) -> UserError | None:
    """Deploy the command line's flows, those that run no Spark query first (they start at once,
    Spark or not), then those that do (once Spark runs), then the flows kept from deployments
    through the API. A mistake (Spark did not start) asks the runtime to stop and is returned,
    to end the run with it once the flows that did start are drained; a stop meanwhile is none."""
    flows = deployment.flows
    at_once = Deployment({fid: graph for fid, graph in flows.items() if fid not in queries})
    with_spark = Deployment({fid: graph for fid, graph in flows.items() if fid in queries})
    stop = runtime.stop_requested
    try:
        if at_once.flows:
            await runtime.deploy_graphs(at_once)
            if with_spark.flows and not stop.is_set():
                waiting = ", ".join(with_spark.flows)
                _say(console, f"running {', '.join(at_once.flows)}; waiting for Spark: {waiting}")
        if with_spark.flows and not stop.is_set():
            await runtime.deploy_graphs(with_spark)
        if not stop.is_set():
            redeployed = await runtime.redeploy_kept()
            if redeployed:
                _say(console, f"redeployed {', '.join(redeployed)} (deployed through the API before)")
    except UserError as err:
        if stop.is_set():
            return None  # Spark's start was ended by the stop
        runtime.request_stop()
        if isinstance(err, SparkUnavailable):
            return UserError(
                f"{', '.join(with_spark.flows)} not started: {err} (Spark's output is in {log_file})"
            )
        return err
    return None


def _say(console: Any, message: str) -> None:
    """A start-up or shut-down line: dim on the terminal, and in the log file with its time."""
    console.print(f"[dim]{escape(message)}[/dim]")
    log.info("%s", message)


def _on_stop_signal(console: Any, stop: asyncio.Event, cut_short: asyncio.Event) -> None:
    """The first Ctrl-C/SIGTERM drains and stops (within each flow's shutdown ceiling); another
    one while draining stops now: the drain is cut short, what it did not deliver stays in the
    channel topics for the next start."""
    if stop.is_set() and not cut_short.is_set():
        cut_short.set()
        _say(console, "stopping now: the drain is cut short (undelivered events stay in the log)")
    stop.set()


def _ignore_late_signals(loop: asyncio.AbstractEventLoop) -> None:
    """Flows are stopped: a SIGTERM arriving while Spark shuts down (its JVM stops its Python
    workers) must not turn a clean exit into "killed by SIGTERM"."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_IGN)


def _setup_logging(console: Any, log_file: Path) -> None:
    """Everything at INFO into the log file; on the terminal, only contraflow's own warnings and errors."""
    from rich.logging import RichHandler

    to_file = logging.FileHandler(log_file)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    to_terminal = RichHandler(
        console=console, show_path=False, show_time=False, rich_tracebacks=False, markup=False
    )
    to_terminal.setFormatter(logging.Formatter("%(message)s"))
    to_terminal.setLevel(logging.WARNING)
    to_terminal.addFilter(lambda record: record.name.startswith("contraflow"))
    logging.basicConfig(level=logging.WARNING, handlers=[to_file, to_terminal], force=True)
    logging.captureWarnings(True)  # library deprecation warnings: the file, not the terminal
    logging.getLogger("contraflow").setLevel(logging.INFO)


async def _embedded_spu(stack: contextlib.AsyncExitStack, console: Any, options: RunOptions) -> str:
    """The SPU under `{data_dir}/spu`, as a child process (dies with the runtime) or a thread."""
    from contraflow.spu.embedded import EmbeddedSpu

    port, kafka_addr = options.spu_port, options.kafka_addr
    spu = EmbeddedSpu(
        options.data_dir / "spu",
        mode=options.embedded_spu,
        public_addr=f"127.0.0.1:{port}",
        kafka_addr=kafka_addr,
    )
    try:
        # Started from the loop's own thread: a child SPU is killed when the thread that forked it
        # ends (PR_SET_PDEATHSIG), so it must not be a worker thread that may exit before the runtime.
        addr = spu.start()
    except OSError as err:
        where = f"127.0.0.1:{port}" + (f" (Kafka {kafka_addr})" if kafka_addr else "")
        raise UserError(f"the embedded SPU cannot start on {where}: {err}") from None
    if spu.kafka_addr:
        _say(console, f"Kafka protocol on {spu.kafka_addr}")
    stack.push_async_callback(asyncio.to_thread, spu.stop)
    return addr


async def _end_spark_start_on_stop(stop: asyncio.Event, spark: SparkOnDemand) -> None:
    """A stop while Spark still starts ends its start at once (nothing runs on it yet: deployments
    that need it wait for it), rather than after the seconds it would take to finish."""
    await stop.wait()
    if spark.state in ("not started", "starting"):
        await spark.stop()


async def _spark_progress(
    console: Any, spark: SparkOnDemand, report_failure: Path | None, tick: bool
) -> None:
    """Once Spark begins to start (a flow needs it): a progress line while it starts (`tick`;
    ticking on a terminal, one every few seconds elsewhere), then how long it took, or (with
    `report_failure`, the log file its output went to) why it did not start."""
    await spark.began.wait()
    label = f"starting Spark ({spark.master})"
    if not tick:
        await spark.settled()
    elif console.is_terminal:
        with console.status(f"{label} ...") as status:
            while not await spark.settled(timeout_s=1.0):
                status.update(f"{label} ... {spark.starting_for():.0f} s")
    else:
        console.print(f"{label} ...")
        while not await spark.settled(timeout_s=PLAIN_STATUS_INTERVAL_S):
            console.print(f"{label} ... {spark.starting_for():.0f} s")
    failure = spark.failure()
    if spark.state == "stopped":
        return  # its start was ended by a stop
    if failure is None:
        _say(console, f"Spark started in {spark.started_in():.1f} s")
    elif report_failure is not None:
        log.error("Spark did not start: %s (its output is in %s)", failure, report_failure)


async def _api(stack: contextlib.AsyncExitStack, runtime: Any, options: RunOptions) -> str:
    from contraflow.api.app import create_app
    from contraflow.api.paths import PathPolicy
    from contraflow.api.server import ApiServer, parse_address

    assert options.api is not None
    host, port = parse_address(options.api)
    app = create_app(runtime, token=options.token, allowed_paths=PathPolicy(options.allowed_paths))
    cert, key = options.tls or (None, None)
    server = ApiServer(app, host, port, tls_cert=cert, tls_key=key)
    bound = await server.start()
    stack.push_async_callback(server.stop)
    return bound


async def _status(runtime: Any, console: Any) -> None:
    """One live line per flow, redrawn every second, under a line for Spark while it starts (plain
    lines when stderr is not a terminal, where `_spark_progress` says how Spark's start goes)."""
    from rich.live import Live

    from contraflow.runtime.status import StatusBoard

    board = StatusBoard()
    flows = lambda: list(runtime.flows.values())  # noqa: E731 - flows come and go over the API
    if not console.is_terminal:
        while True:
            await asyncio.sleep(PLAIN_STATUS_INTERVAL_S)
            if runtime.flows:
                console.print(board.render(flows()), soft_wrap=True)  # one line per flow, however long
    view = lambda: _with_spark_line(runtime.spark, board.render(flows()))  # noqa: E731
    with Live(view(), console=console, refresh_per_second=4, transient=False) as live:
        while True:
            await asyncio.sleep(STATUS_INTERVAL_S)
            live.update(view())


def _with_spark_line(spark: SparkOnDemand, lines: Text) -> Text:
    """The flows' live lines, after a line saying how long Spark has been starting, while it does."""
    if spark.state != "starting":
        return lines
    starting = Text(f"starting Spark ({spark.master}) ... {spark.starting_for():.0f} s", style="dim")
    return Text("\n").join([starting, lines]) if lines else starting


if __name__ == "__main__":  # pragma: no cover
    run(sys.argv[1:])
