"""`contraflow query` (try a Trickle pipeline on local Spark) and `contraflow state` (export/import).

Both import PySpark only inside the command body, so `contraflow --help`
stays fast.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

import click
import orjson

from contraflow.errors import UserError
from contraflow.pipeline.spark.plan import IngestMode

F = TypeVar("F", bound=Callable[..., Any])

INGEST_MODES: dict[str, IngestMode] = {"now": "timestamp", "index": "offset"}


@click.command("query")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--ingest-ns",
    type=click.Choice(sorted(INGEST_MODES)),
    default="now",
    show_default=True,
    help="Ingest time of each event: the time it was read (now) or its input position 0, 1, 2... (index).",
)
def query(file: Path, ingest_ns: str) -> None:
    """Run the Trickle pipeline FILE on local Spark over JSON lines on standard input.

    Prints every event of the `out` port as one JSON line; events on `err` go to
    standard error. Exits once the input is consumed and its results are emitted.
    """
    from contraflow.lang.commands import compile_path
    from contraflow.lang.graph import PipelineGraph
    from contraflow.pipeline.spark.local import quiet_process_output, run_on_spark, start_local_session
    from contraflow.process_output import exit_on_sigterm, ticking

    if file.suffix != ".trickle":
        raise UserError(f"{file}: contraflow query runs a .trickle file")
    # A JVM still starting when a mistake ends the command may leave files behind: not an error.
    with (
        exit_on_sigterm(),  # a SIGTERM still removes the temporary directory
        tempfile.TemporaryDirectory(prefix="contraflow-query-", ignore_cleanup_errors=True) as tmp,
    ):
        work = Path(tmp)
        with quiet_process_output(work / "spark.log") as (out, err):
            spark = start_local_session(work)  # seconds: under way while the file compiles and input is read
            graph = compile_path(file)
            assert isinstance(graph, PipelineGraph)
            lines = [line.rstrip(b"\r\n") for line in sys.stdin.buffer if line.strip()]
            with ticking(err, "running the query on local Spark") as erase_ticker:
                streams = {"out": out, "err": err}  # the other ports are not shown

                def emit(port: str, values: list[bytes]) -> None:
                    if port in streams and values:
                        erase_ticker()
                        _write_lines(streams[port], values)

                run_on_spark(
                    graph, lines, ingest=INGEST_MODES[ingest_ns], emit=emit, work_dir=work, spark=spark
                )


def _write_lines(stream: IO[bytes], values: list[bytes]) -> None:
    for value in values:
        stream.write(value + b"\n")
    stream.flush()


@click.group("state")
def state() -> None:
    """Export or import the state of a stateful pipeline (to move it to another runtime)."""


_data_dir_option = click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The runtime's data directory [default: $CONTRAFLOW_DATA_DIR or ./contraflow-data].",
)


def _checkpoint(data_dir: Path | None, flow: str, pipeline: str) -> Path:
    from contraflow.spark.checkpoint import checkpoint_path
    from contraflow.spark.session import default_data_dir

    return checkpoint_path(data_dir or default_data_dir(), flow, pipeline)


def _state_arguments(command: F) -> F:
    """FLOW PIPELINE FILE [--data-dir]: what `state export` and `state import` both take."""
    for decorate in reversed(
        [
            click.argument("flow"),
            click.argument("pipeline"),
            click.argument("file", type=click.Path(path_type=Path, dir_okay=False, allow_dash=True)),
            _data_dir_option,
        ]
    ):
        command = decorate(command)
    return command


@state.command("export")
@_state_arguments
def export_command(flow: str, pipeline: str, file: Path, data_dir: Path | None) -> None:
    """Write the state of PIPELINE (or kv connector) in FLOW to FILE as JSON ('-' for standard output).

    Works while the flow runs: a pipeline's last committed micro-batch, a kv store's last write.
    """
    checkpoint = _checkpoint(data_dir, flow, pipeline)
    if checkpoint.is_dir():
        _emit(file, _export_pipeline(checkpoint))
        return
    from contraflow.connectors.kv import export_store, store_in

    store = store_in(_connector_state_dir(data_dir, flow, pipeline))
    if store is None:
        raise UserError(
            f"{flow}/{pipeline} is neither a pipeline with a checkpoint at {checkpoint} nor a kv store"
        )
    _emit(file, export_store(store))


def _export_pipeline(checkpoint: Path) -> dict[str, Any]:
    from contraflow.pipeline.spark.local import quiet_process_output
    from contraflow.pipeline.spark.state import export_state
    from contraflow.spark import session

    with (
        tempfile.TemporaryDirectory(prefix="contraflow-state-") as tmp,
        quiet_process_output(Path(tmp) / "spark.log"),
    ):
        spark = session(master="local[1]", data_dir=Path(tmp) / "spark")
        try:
            return export_state(spark, checkpoint)
        finally:
            spark.stop()


def _emit(file: Path, snapshot: dict[str, Any]) -> None:
    data = orjson.dumps(snapshot, option=orjson.OPT_INDENT_2) + b"\n"
    if str(file) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        file.write_bytes(data)


def _connector_state_dir(data_dir: Path | None, flow: str, alias: str) -> Path:
    """Where the runtime keeps a connector's state (`ConnectorContext.state_dir`)."""
    from contraflow.spark.session import default_data_dir

    return (data_dir or default_data_dir()) / "connectors" / flow / alias


@state.command("import")
@_state_arguments
def import_command(flow: str, pipeline: str, file: Path, data_dir: Path | None) -> None:
    """Make FILE (from `state export`) the state PIPELINE (or kv connector) in FLOW starts with.

    The pipeline must not have run here yet (the kv store must have no keys); it picks the state
    up when it starts.
    """
    from contraflow.connectors.kv import STATE_FORMAT, stage_import
    from contraflow.pipeline.spark.state import import_state

    raw = sys.stdin.buffer.read() if str(file) == "-" else _read(file)
    try:
        snapshot = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise UserError(f"{file}: not JSON ({error})") from None
    if not isinstance(snapshot, dict):
        raise UserError(f"{file}: not a pipeline state snapshot")
    if snapshot.get("format") == STATE_FORMAT:
        target = stage_import(_connector_state_dir(data_dir, flow, pipeline), snapshot)
        click.echo(
            f"kv store of {flow}/{pipeline} ({len(snapshot['keys'])} key(s)) waits in {target}", err=True
        )
        return
    target = import_state(_checkpoint(data_dir, flow, pipeline), snapshot)
    click.echo(f"state of {flow}/{pipeline} ({len(snapshot['keys'])} key(s)) waits in {target}", err=True)


def _read(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as error:
        raise UserError(f"{file}: {error.strerror}") from None
