"""The one place that builds a Spark session for contraflow.

Why a single builder: every gotcha of running PySpark here is a setting that
must be right before the JVM starts (Python workers must run the same
interpreter, stateful pipelines need RocksDB, a 2-core box needs few shuffle
partitions), and user code that builds its own session still goes through
`register` to get the `contraflow` format.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
import tempfile
import threading
import zipfile
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contraflow.heap import heap_environment
from contraflow.spark import prestart
from contraflow.spark.checkpoint import checkpoint_root
from contraflow.spark.pools import write_allocation_file

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
DEFAULT_DATA_DIR = "contraflow-data"
# The pre-started Python (contraflow.spark.prestart) local Python workers fork from, when set.
PRESTART_VARIABLE = "CONTRAFLOW_PRESTART"
LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties").resolve().as_uri()


def default_data_dir() -> Path:
    """`$CONTRAFLOW_DATA_DIR` or ./contraflow-data, the same default as the log commands."""
    return Path(os.environ.get("CONTRAFLOW_DATA_DIR", DEFAULT_DATA_DIR))


def is_local_master(master: str) -> bool:
    """True for masters whose executors run on this machine with this interpreter's packages."""
    return master == "local" or master.startswith("local[") or master.startswith("local-cluster[")


CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def base_conf(master: str, data_dir: Path) -> dict[str, str]:
    """Settings contraflow relies on; callers may override any of them."""
    cores = os.cpu_count() or 2
    return (
        {
            "spark.master": master,
            "spark.app.name": "contraflow",
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
            # A commit writes the batch's changed keys, not a new snapshot of every file: on a
            # stateful pipeline that was the largest fixed cost of a micro-batch.
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
            "spark.sql.streaming.checkpointLocation": str(checkpoint_root(data_dir).resolve()),
            # Checkpoint files through Hadoop's FileSystem, not its FileContext: on the local file
            # system a FileContext rename starts a `readlink` process per path (Hadoop's shell
            # fallback), several per micro-batch, which made the offsets and commit logs' writes
            # about a quarter of a small batch's time. A local (or HDFS) rename is atomic either way.
            "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
            "spark.sql.warehouse.dir": str((data_dir / "spark-warehouse").resolve()),
            # Few cores: 200 shuffle partitions would make every micro-batch pay for 200 tiny tasks.
            "spark.sql.shuffle.partitions": str(max(2, cores)),
            "spark.default.parallelism": str(max(2, cores)),
            "spark.ui.showConsoleProgress": "false",
            "spark.ui.enabled": "false",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.streaming.noDataMicroBatches.enabled": "true",
            "spark.scheduler.mode": "FAIR",
            # One pool per flow priority (`contraflow.spark.pools`); queries name theirs when they start.
            "spark.scheduler.allocation.file": str(write_allocation_file(data_dir)),
            # Cancelled tasks' Python workers are killed this soon (bounded cancellation).
            "spark.python.task.killTimeout": "1s",
            "spark.python.worker.reuse": "true",
            # Executors' Python workers keep freed heap for the next batch (see contraflow.heap).
            **{f"spark.executorEnv.{name}": value for name, value in heap_environment().items()},
            "spark.driver.extraJavaOptions": driver_java_options(),
        }
        | _local_network_conf(master)
        | _local_worker_daemon_conf(master)
    )


# The driver JVM (which runs the tasks of a local master) compiles with C1 only. Events cross it
# in envelopes or as log ranges, so little of its time is spent in code C2 would make faster,
# while C2's compiler threads were its largest CPU cost: on benchmarks/hot_path.py (quiet box,
# A/B in one session) the JVM's CPU per event fell from 1.7-2.0 to 0.7-0.8 us on passthrough and
# from 2.6-3.0 to 1.2-1.3 us on w1 at 3M events, and from 1.0 to 0.6 / 1.8 to 1.1 at 10M.
# Work done in the JVM itself (Spark SQL over rows) wants C2: the same w1 as plain PySpark ran at
# 0.56x its C2 rate with C1 only, so a session used for such queries passes
# `driver_java_options(c1_only=False)` as `spark.driver.extraJavaOptions`.
JIT_OPTIONS = "-XX:TieredStopAtLevel=1"


def driver_java_options(c1_only: bool = True) -> str:
    """The driver JVM's options: contraflow's logging, the JIT choice above, class-data sharing."""
    log = f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}"
    return " ".join(option for option in (log, JIT_OPTIONS if c1_only else "", _class_cache()) if option)


def _class_cache() -> str:
    """The driver JVM's class-data-sharing options (contraflow.spark.class_cache), if Java is known."""
    from contraflow.errors import UserError
    from contraflow.preflight import java_executable, java_version
    from contraflow.spark.class_cache import java_options

    try:
        return java_options(java_version(java_executable()))
    except UserError:  # no usable Java: Spark will say so itself
        return ""


def _local_network_conf(master: str) -> dict[str, str]:
    """Keep an embedded Spark on loopback so it never depends on the host name resolving."""
    if not is_local_master(master):
        return {}
    return {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


def driver_address(master: str) -> str | None:
    """The address of this host that a standalone master (`spark://HOST:PORT[,HOST:PORT]`) is
    reached from: the executors, on the master's side of the network, connect back to the driver
    there. Without it Spark advertises what the host name resolves to, which on many hosts is a
    loopback address or one the workers cannot reach. None for other masters, or no route."""
    if not master.startswith("spark://"):
        return None
    host, _, port = master.removeprefix("spark://").split(",")[0].rpartition(":")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host.strip("[]"), int(port)))  # a datagram socket only picks the route
            return str(probe.getsockname()[0])
    except (OSError, ValueError):
        return None


def advertise_driver_address(master: str) -> None:
    """`SPARK_LOCAL_IP` (the driver's advertised and bound address) from the route to a standalone
    master, unless set: an explicit `spark.driver.host` still wins over it, as in Spark."""
    if "SPARK_LOCAL_IP" in os.environ or "SPARK_LOCAL_HOSTNAME" in os.environ:
        return
    address = driver_address(master)
    if address is not None:
        os.environ["SPARK_LOCAL_IP"] = address


def _local_worker_daemon_conf(master: str) -> dict[str, str]:
    """Local Python workers fork from a daemon that imported contraflow's task code already
    (`contraflow.spark.worker_daemon`); a cluster's executors keep PySpark's own daemon."""
    if not is_local_master(master):
        return {}
    return {"spark.python.daemon.module": "contraflow.spark.worker_daemon"}


def _point_python_workers_at_this_interpreter(master: str, root: Path) -> None:
    """Local Python workers must run this interpreter and import this very contraflow.

    Spark starts them with $PYSPARK_PYTHON (without it they may never connect
    back) and the JVM's environment, so the directory this package was imported
    from goes first on their PYTHONPATH: a source checkout then behaves the same
    as an installed package. Locally they start through
    `python_worker_launcher` where it applies.
    """
    import contraflow

    launcher = python_worker_launcher(root) if is_local_master(master) else None
    os.environ["PYSPARK_PYTHON"] = launcher or sys.executable
    # Spark's driver-side Python processes (the data-source lookup at session start) use this one.
    os.environ["PYSPARK_DRIVER_PYTHON"] = launcher or sys.executable
    advertise_driver_address(master)
    if is_local_master(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        for name, value in heap_environment().items():  # the JVM and its workers start with it
            os.environ.setdefault(name, value)
        package_root = str(Path(contraflow.__file__).resolve().parent.parent)
        paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if package_root not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, paths)])
    # Last: the server's environment (the heap setting above, PYTHONPATH) is what its forks inherit.
    if launcher is not None and prestart.enabled():
        os.environ[PRESTART_VARIABLE] = prestart.ensure_server()  # starts now, beside the JVM
    else:
        os.environ.pop(PRESTART_VARIABLE, None)


def python_worker_launcher(root: Path) -> str | None:
    """A launcher for local Python workers that keeps Spark's bundled pyspark zips off their path.

    Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on every Python
    worker's PYTHONPATH. Modules imported from a zip are compiled from source
    each time (no bytecode cache), and each new Python process Spark starts
    (the streaming source's planner, `transformWithState`'s driver-side worker,
    the worker daemon) paid ~0.6 s of CPU for that. When SPARK_HOME is the
    pyspark package this interpreter has installed, the zip holds the very same
    code, so the launcher drops it and Python imports the installed copy, whose
    bytecode is cached. Returns None (use the interpreter itself) otherwise.
    """
    import pyspark

    installed = Path(pyspark.__file__).resolve().parent
    home = os.environ.get("SPARK_HOME")
    if home is not None and Path(home).resolve() != installed:
        return None
    zips = sorted(str(path) for path in (installed / "python" / "lib").glob("*.zip"))
    if not zips:
        return None
    patterns = "|".join(shlex.quote(path) for path in zips)
    text = (
        "#!/bin/sh\n"
        "# Written by contraflow (see contraflow.spark.session.python_worker_launcher).\n"
        "set -f\n"
        "kept=\n"
        "IFS=:\n"
        "for entry in $PYTHONPATH; do\n"
        f'  case "$entry" in {patterns}) ;; *) kept="${{kept:+$kept:}}$entry" ;; esac\n'
        "done\n"
        "unset IFS\n"
        "PYTHONPATH=$kept\n"
        "export PYTHONPATH\n"
        f'if [ -n "${{{PRESTART_VARIABLE}:-}}" ] && [ "$1" = -m ]; then\n'
        f'  exec {shlex.join(prestart.client_command())} "${PRESTART_VARIABLE}" "$@"\n'
        "fi\n"
        f'exec {shlex.quote(sys.executable)} "$@"\n'
    )
    launcher = root.resolve() / "python-worker"
    if not launcher.exists() or launcher.read_text() != text:
        temporary = launcher.with_name(f".{launcher.name}.{os.getpid()}")
        temporary.write_text(text)
        temporary.chmod(0o755)
        os.replace(temporary, launcher)
    return str(launcher)


def package_zip(target_dir: Path) -> Path:
    """Zip the installed contraflow package so cluster executors can import it (`--py-files`).

    Python cannot import a namespace package (a directory of modules without
    `__init__.py`, like `contraflow.lang.trickle`) from a zip, so each gets an
    empty `__init__.py` in the archive."""
    import contraflow

    package_dir = Path(contraflow.__file__).parent
    target = target_dir / "contraflow-pyfiles.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package_dir.rglob("*")):
            if "__pycache__" in path.parts:
                continue
            name = Path("contraflow") / path.relative_to(package_dir)
            if path.is_file():
                archive.write(path, name)
            elif any(path.glob("*.py")) and not (path / "__init__.py").exists():
                archive.writestr(str(name / "__init__.py"), "")
    return target


def master_url(master: str | None) -> str:
    """The master a session starts on: the one given, else `CONTRAFLOW_SPARK_MASTER`, else `local[*]`."""
    return master or os.environ.get("CONTRAFLOW_SPARK_MASTER", "local[*]")


def session(
    master: str | None = None, data_dir: str | os.PathLike[str] | None = None, **conf: Any
) -> SparkSession:
    """A SparkSession configured for contraflow, with the `contraflow` format registered.

    `master` defaults to `local[*]` (embedded); any master URL Spark accepts works,
    in which case the contraflow package is shipped to the executors. Extra `conf`
    keys (dots as in Spark, e.g. `**{"spark.sql.shuffle.partitions": "4"}`) win over
    the defaults.
    """
    from pyspark.sql import SparkSession

    master = master_url(master)
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    root.mkdir(parents=True, exist_ok=True)
    _point_python_workers_at_this_interpreter(master, root)
    builder = SparkSession.builder
    for key, value in (base_conf(master, root) | {k: str(v) for k, v in conf.items()}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("CONTRAFLOW_SPARK_LOG_LEVEL", "ERROR"))
    if not is_local_master(master):
        spark.sparkContext.addPyFile(str(package_zip(Path(tempfile.mkdtemp(prefix="contraflow-")))))
    register(spark)
    return spark


def register(spark: SparkSession) -> SparkSession:
    """Register the `contraflow` streaming format on a session the user built."""
    from contraflow.spark.datasource import ContraflowDataSource

    spark.dataSource.register(ContraflowDataSource)
    return spark


def activate(spark: SparkSession) -> None:
    """Make `spark` the JVM's active session on this thread: Spark looks Python data sources up
    through the thread's active session, and sessions are built, and queries started, from
    threads other than the one that uses them (`start_session`, the runtime's worker threads)."""
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[union-attr]


def start_session(
    master: str | None = None, data_dir: str | os.PathLike[str] | None = None
) -> Future[SparkSession]:
    """`session(master, data_dir)` building in a background thread, so the JVM's cold start (seconds)
    overlaps whatever the caller does meanwhile (compiling flows, starting the SPU).

    The thread is a daemon: a caller that fails meanwhile exits without waiting for Spark, and the
    half-started JVM ends with it (Spark's gateway exits when its standard input closes).
    """
    # PySpark is imported here, before the thread starts: pyspark's package imports are circular
    # (`pyspark.sql.streaming` -> `pyspark` -> `pyspark.sql` -> `pyspark.sql.streaming`), and a
    # caller importing `pyspark.sql.streaming` while the thread is half way through `pyspark`
    # found it partially initialized (ImportError `DataStreamWriter`, seen on a loaded box).
    import pyspark.sql  # noqa: F401

    started: Future[SparkSession] = Future()

    def build() -> None:
        if not started.set_running_or_notify_cancel():
            return
        try:
            started.set_result(session(master, data_dir))
        except BaseException as err:  # noqa: BLE001 - handed to whoever waits for the session
            started.set_exception(err)

    threading.Thread(target=build, name="spark-start", daemon=True).start()
    return started
