"""A Spark standalone cluster on this machine: one master and N workers.

Used to prove (in tests and by hand) that pipelines run unchanged on a real
cluster master URL, the path users take with `--master spark://host:7077`.
The processes are Spark's own (`spark-class` from the pyspark package). Each
runs on a `Host`: by default all on 127.0.0.1; given hosts of their own (a
network namespace each, as benchmarks/flow_partition.py builds), the master
and every worker bind only their host's address, and the executors a worker
starts inherit it.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# The cluster's own JVMs (master, workers and the executors workers start, which inherit the
# variable) compile with C1 only, use one compiler thread and the serial collector: all of them on
# one machine, their JIT and GC threads were most of the cluster's CPU as it started (a master
# and two workers: 25 s of CPU, 8 s with these options and the class archive below, load ~15).
LEAN_JVM = "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC"


def lean_jvm_options() -> str:
    """LEAN_JVM, and the driver's class-data archive (contraflow.spark.class_cache) once a driver
    made it: the cluster's JVMs load the same jars (a master's classes are not the driver's, so
    they never create it)."""
    from contraflow.errors import UserError
    from contraflow.preflight import java_executable, java_version
    from contraflow.spark.class_cache import existing_archive

    try:
        archive = existing_archive(java_version(java_executable()))
    except UserError:  # no usable Java: spark-class will say so itself
        archive = None
    return LEAN_JVM + (f" -XX:SharedArchiveFile={archive}" if archive else "")


@dataclass(frozen=True)
class Host:
    """Where one of the cluster's processes runs: the one address it binds (its RPC port, its web
    UI, and for a worker the executors it starts: `SPARK_LOCAL_IP`, so nothing listens on
    0.0.0.0) and the command prefix that starts a process there (`ip netns exec NS`, or none)."""

    address: str = "127.0.0.1"
    prefix: tuple[str, ...] = ()


LOOPBACK = Host()


class StandaloneCluster:
    """Start a master and workers (`workers` of them on the master's host, or one on each of
    `worker_hosts`); stop them all on exit. `worker_timeout_s`: how long the master waits for
    a silent worker's heartbeat before it declares the worker (and its executors) lost; Spark's
    default is 60 s."""

    def __init__(
        self,
        work_dir: Path,
        workers: int = 2,
        cores_per_worker: int = 1,
        memory: str = "1g",
        *,
        master_host: Host = LOOPBACK,
        worker_hosts: Sequence[Host] | None = None,
        worker_timeout_s: int | None = None,
    ) -> None:
        self.work_dir = work_dir
        self.master_host = master_host
        self.worker_hosts = list(worker_hosts) if worker_hosts is not None else [master_host] * workers
        self.workers = len(self.worker_hosts)
        self.cores_per_worker = cores_per_worker
        self.memory = memory
        self.worker_timeout_s = worker_timeout_s
        self.port = free_port()
        self.ui_port = free_port()
        self.master_url = f"spark://{master_host.address}:{self.port}"
        self._processes: list[subprocess.Popen[bytes]] = []
        self._workers: list[subprocess.Popen[bytes]] = []

    def _spawn(self, *args: str, name: str, host: Host) -> subprocess.Popen[bytes]:
        env = dict(os.environ, SPARK_LOCAL_IP=host.address, SPARK_LOG_DIR=str(self.work_dir / "logs"))
        env.setdefault("JAVA_TOOL_OPTIONS", lean_jvm_options())
        if self.worker_timeout_s is not None:  # read by spark-class for the master's JVM
            env["SPARK_MASTER_OPTS"] = f"-Dspark.worker.timeout={self.worker_timeout_s}"
        log = open(self.work_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process group
        process = subprocess.Popen(
            [*host.prefix, str(spark_class()), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # a worker's executors join its group (see `kill_worker`)
        )
        self._processes.append(process)
        return process

    def start(self, timeout_s: float = 90.0) -> str:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "org.apache.spark.deploy.master.Master",
            "--host",
            self.master_host.address,
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
            name="master",
            host=self.master_host,
        )
        self._wait_for_master(timeout_s)
        for i in range(self.workers):
            self._start_worker(i)
        self._wait_for_workers(timeout_s)
        return self.master_url

    def _wait_for_master(self, timeout_s: float) -> None:
        """The master's real ports, from its log: a port `free_port` picked may have been taken
        by another process meanwhile, and the master then binds the next one."""
        log = self.work_dir / "master.log"
        deadline = time.monotonic() + timeout_s
        while True:
            text = log.read_text(errors="replace") if log.exists() else ""
            master = re.search(r"Starting Spark master at spark://[\d.]+:(\d+)", text)
            ui = re.search(r"Bound MasterWebUI to .*:(\d+)\s*$", text, re.MULTILINE)
            if master and ui:
                self.port, self.ui_port = int(master[1]), int(ui[1])
                self.master_url = f"spark://{self.master_host.address}:{self.port}"
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Spark master did not start in {timeout_s:.0f}s (see {log})")
            time.sleep(0.2)

    def _start_worker(self, i: int) -> None:
        host = self.worker_hosts[i]
        self._workers.append(
            self._spawn(
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                "--host",
                host.address,
                "--cores",
                str(self.cores_per_worker),
                "--memory",
                self.memory,
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(self.work_dir / f"worker-{i}"),
                name=f"worker-{i}",
                host=host,
            )
        )

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker `i` with the executors it runs (its process group): a machine lost."""
        worker = self._workers[i]
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()

    def state(self) -> dict[str, Any]:
        """The master's view of the cluster (its web UI's `/json/`): workers, applications."""
        response = httpx.get(f"http://{self.master_host.address}:{self.ui_port}/json/", timeout=5)
        return dict(response.json())

    def alive_workers(self) -> int:
        try:
            state = self.state()
        except (httpx.HTTPError, ValueError):
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def busy_workers(self) -> int:
        """Alive workers whose cores an application (a driver's executors) is using."""
        workers = self.state()["workers"]
        return sum(1 for w in workers if w["state"] == "ALIVE" and w["coresused"] > 0)

    def _wait_for_workers(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.alive_workers() < self.workers:
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"the standalone cluster did not get {self.workers} workers in {timeout_s:.0f}s"
                )
            time.sleep(0.5)

    def stop(self) -> None:
        for process in self._processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self._processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._processes.clear()

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
