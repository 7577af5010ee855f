"""A pre-started Python that local Spark's Python processes fork from, instead of starting cold.

Before a local query's first output, Spark starts some ten Python processes
one after another: the data-source lookup, the `contraflow` source's planner
and its streaming runner, `transformWithState`'s driver-side worker, the
sink's writer factory and its commit runner, the worker daemons. Each is a
fresh interpreter importing PySpark (and pandas, pyarrow, contraflow) from
scratch: on a quiet 2-core box about half a second each, one after the other
on the path to the first output, which no bare PySpark job pays.

This server is started by `contraflow.spark.session` for local masters, at the
same time as the JVM (whose start it overlaps). It imports all of that once,
then forks a child per request from `contraflow.spark.prestart_client`, the
small stand-in Spark actually starts: the child takes the stand-in's standard
streams, environment, working directory and arguments and runs the module as
`python -m` would. A fork inherits no threads but the one that forks; the
libraries imported here that start threads (numpy, pyarrow) restart them in
the child (see `contraflow.spark.worker_daemon`).

Requests whose interpreter settings (the `PYTHON*` variables other than
PYTHONPATH) differ from the server's are declined: the stand-in then runs the
command cold, as it would without a server. Only processes of the server's
own user are served (the peer's credentials are checked). The server exits
when the process that started it does (its standard input closes).
`CONTRAFLOW_PYTHON_PRESTART=0` turns it off.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import runpy
import secrets
import selectors
import signal
import socket
import struct
import subprocess
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contraflow.spark.prestart_client import HEADER, REPLY

CLIENT = Path(__file__).with_name("prestart_client.py").resolve()
# What Spark's local Python processes import before their first task: imported once, here.
PRELOADED = (
    "pandas",
    "pyarrow",
    "pyspark.daemon",
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.write_into_data_source",
    "pyspark.sql.worker.commit_data_source_write",
    "pyspark.sql.worker.python_streaming_sink_runner",
    "pyspark.sql.streaming.python_streaming_source_runner",
    "pyspark.sql.streaming.transform_with_state_driver_worker",
    "contraflow.spark.worker_daemon",
    "contraflow.pipeline.spark.stateful",
    "contraflow.pipeline.spark.stateless",
    "contraflow.spark.datasource",
)
# The variables that set up an interpreter as it starts (PYTHONHASHSEED, ...): a fork keeps the server's.
INTERPRETER_SETTING = re.compile(r"^PYTHON[A-Z]+$")

RECEIVE_TIMEOUT_S = 10.0
SERVE = "import sys; from contraflow.spark.prestart import serve; serve(int(sys.argv[1]))"
_server: tuple[subprocess.Popen[bytes], str] | None = None


def enabled() -> bool:
    return os.environ.get("CONTRAFLOW_PYTHON_PRESTART", "1") != "0"


def ensure_server() -> str:
    """This process's pre-started Python (started now if needed, not waited for): its socket name.

    The socket is bound and listening here, before the server starts: a request that comes while
    the server still imports waits for it instead of finding nobody there."""
    global _server
    if _server is None or _server[0].poll() is not None:
        name = f"contraflow-prestart-{os.getpid()}-{secrets.token_hex(8)}"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind("\0" + name)
            listener.listen(64)
            process = subprocess.Popen(
                [sys.executable, "-c", SERVE, str(listener.fileno())],
                stdin=subprocess.PIPE,  # never written: closes when this process ends, and the server with it
                pass_fds=[listener.fileno()],
                env=os.environ | spark_worker_settings(),
            )
        _server = (process, name)
    return _server[1]


def running_server() -> subprocess.Popen[bytes] | None:
    """This process's server, while it runs."""
    return _server[0] if _server is not None and _server[0].poll() is None else None


def spark_worker_settings() -> dict[str, str]:
    """The interpreter settings Spark gives its Python processes (PySpark's SparkContext sets the
    hash seed); a server started without them would decline every request."""
    return {"PYTHONUNBUFFERED": "YES", "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}


def client_command() -> list[str]:
    """The stand-in's command line; then come the server's name and `-m MODULE ARGS...`."""
    return [sys.executable, "-S", "-I", str(CLIENT)]


# -- the server --------------------------------------------------------------------------------------


@dataclass
class _Child:
    """One forked command: the stand-in's connection and the child's pid (as a pidfd)."""

    connection: socket.socket
    pid: int
    pidfd: int


def serve(listener_fd: int) -> None:
    """Import what Spark's Python processes need, then fork one child per request."""
    listener = socket.socket(fileno=listener_fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is for the command; this ends with it
    for module in PRELOADED:
        with contextlib.suppress(ImportError):  # a child imports whatever is missing itself
            importlib.import_module(module)
    _Server(listener).run()


class _Server:
    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, self._accept)
        self.selector.register(sys.stdin.fileno(), selectors.EVENT_READ, self._parent_gone)
        self.running = True
        self.children: dict[int, _Child] = {}  # by pidfd

    def run(self) -> None:
        while self.running:
            for key, _ in self.selector.select():
                try:
                    key.data(key.fileobj)
                except Exception:  # noqa: BLE001 - one request's trouble must not end the server
                    # Spark's Python workers forked from it (its daemons) would be orphaned, and
                    # every later command would start cold.
                    traceback.print_exc()

    def _parent_gone(self, fd: int) -> None:
        if not os.read(fd, 4096):
            self.running = False

    def _accept(self, _listener: object) -> None:
        connection, _ = self.listener.accept()
        with contextlib.suppress(OSError):
            if self._same_user(connection):
                connection.settimeout(RECEIVE_TIMEOUT_S)  # a stuck stand-in must not hold up the others
                request, fds = _receive(connection)
                connection.settimeout(None)
                if request is not None and self._fits(request["env"]):
                    self._fork(connection, request, fds)
                    return
                for fd in fds:
                    os.close(fd)
                connection.sendall(REPLY.pack(0))  # declined: the stand-in runs the command cold
        connection.close()

    @staticmethod
    def _same_user(connection: socket.socket) -> bool:
        credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", credentials)
        return uid == os.getuid()

    @staticmethod
    def _fits(env: dict[str, str]) -> bool:
        """The interpreter settings a fork inherits must be the ones the command asks for."""

        def settings(environ: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in environ.items() if INTERPRETER_SETTING.match(k) and k != "PYTHONPATH"}

        fits = settings(env) == settings(dict(os.environ))
        if not fits:  # a cold start is correct, only slower: the log says why
            print(
                f"contraflow prestart: runs cold, its settings {settings(env)} are not the server's",
                file=sys.stderr,
            )
        return fits

    def _fork(self, connection: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._become(request, fds)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        connection.sendall(REPLY.pack(pid))
        self.children[pidfd] = _Child(connection, pid, pidfd)
        self.selector.register(pidfd, selectors.EVENT_READ, self._exited)
        self.selector.register(connection, selectors.EVENT_READ, self._stand_in_gone)

    def _become(self, request: dict[str, Any], fds: list[int]) -> None:
        """In the child: drop the server's state, take the stand-in's place and run the module."""
        code = 1
        try:
            self.selector.close()
            self.listener.close()
            for child in self.children.values():
                child.connection.close()
                os.close(child.pidfd)
            _run_module(request, fds)
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except BaseException:  # noqa: BLE001 - reported as a cold interpreter would, then exit
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)

    def _exited(self, pidfd: int) -> None:
        child = self.children.pop(pidfd)
        self.selector.unregister(pidfd)
        with contextlib.suppress(KeyError):  # not registered any more if the stand-in went first
            self.selector.unregister(child.connection)
        _, status = os.waitpid(child.pid, 0)
        code = os.waitstatus_to_exitcode(status)  # -N: killed by signal N
        with contextlib.suppress(OSError):
            child.connection.sendall(REPLY.pack(code))
        child.connection.close()
        os.close(pidfd)

    def _stand_in_gone(self, connection: socket.socket) -> None:
        """The stand-in died (SIGKILL): its child must not live on without it."""
        try:
            if connection.recv(1):
                return
        except OSError:  # reset by a peer that died with data unread: gone all the same
            pass
        for child in self.children.values():
            if child.connection is connection:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)
                self.selector.unregister(connection)  # the pidfd still reaps it


def _receive(connection: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    header, fds, _flags, _addr = socket.recv_fds(connection, HEADER.size, 3)
    if len(header) != HEADER.size or len(fds) != 3:
        return None, fds
    (length,) = HEADER.unpack(header)
    data = b""
    while len(data) < length:
        chunk = connection.recv(length - len(data))
        if not chunk:
            return None, fds
        data += chunk
    return json.loads(data), fds


def _run_module(request: dict[str, Any], fds: list[int]) -> None:
    """What `python -m MODULE ARGS...` does in a fresh interpreter, from this one's imports."""
    argv, env, cwd = request["argv"], request["env"], request["cwd"]
    assert isinstance(argv, list) and isinstance(env, dict) and isinstance(cwd, str)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(
        signal.SIGINT, signal.SIG_IGN if request.get("sigint_ignored") else signal.default_int_handler
    )
    warnings.filterwarnings("ignore", message=".*found in sys.modules", category=RuntimeWarning)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[:] = [cwd, *extra, *sys.path[1:]]
    module = argv[1]
    sys.argv = [module, *argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
