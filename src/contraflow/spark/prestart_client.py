"""The client side of `contraflow.spark.prestart`: what Spark starts as a local Python process.

Run as `python -S -I prestart_client.py SERVER -m MODULE ARGS...` (the
launcher of `contraflow.spark.session.python_worker_launcher` does), it asks
the pre-started Python behind the abstract Unix socket SERVER to fork a
process that runs `python -m MODULE ARGS...` with this process's standard
streams, environment and working directory, then stands in for that process:
Spark's signals are passed on, and its exit status becomes this one's. When
there is no such server, or it declines, the command runs as a fresh
interpreter instead (exec), exactly as without a server.

Only the standard library may be imported here: this file runs with `-S -I`
(no site packages) so that it starts in milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys

RELAYED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
HEADER = struct.Struct("!Q")  # length of the JSON request that follows
REPLY = struct.Struct("!i")  # the child's pid (or 0: declined), later its exit status


def main(argv: list[str]) -> None:
    server, command = argv[0], argv[1:]
    sigint_ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # as a cold interpreter would inherit
    connection = (
        _request(server, command, sigint_ignored) if len(command) >= 2 and command[0] == "-m" else None
    )
    pid = _read_int(connection) if connection is not None else None
    if not pid:
        _exec_fresh(command)
    assert connection is not None and pid is not None
    for relayed in RELAYED:
        if not (relayed == signal.SIGINT and sigint_ignored):
            signal.signal(relayed, lambda signum, _frame: _pass_on(pid, signum))
    status = _read_int(connection)
    if status is None:  # the server went away: the child must not outlive its stand-in
        _pass_on(pid, signal.SIGKILL)
        status = 1
    sys.exit(status if status >= 0 else 128 - status)


def _request(server: str, command: list[str], sigint_ignored: bool) -> socket.socket | None:
    """Connected and asked, or None (no server: run fresh)."""
    request = {"argv": command, "env": dict(os.environ), "cwd": os.getcwd(), "sigint_ignored": sigint_ignored}
    payload = json.dumps(request).encode()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect("\0" + server)
        socket.send_fds(connection, [HEADER.pack(len(payload))], [0, 1, 2])
        connection.sendall(payload)
    except OSError:
        connection.close()
        return None
    return connection


def _read_int(connection: socket.socket) -> int | None:
    """The next reply, or None when the server closed the connection first."""
    data = b""
    while len(data) < REPLY.size:
        try:
            chunk = connection.recv(REPLY.size - len(data))
        except InterruptedError:
            continue
        if not chunk:
            return None
        data += chunk
    return int(REPLY.unpack(data)[0])


def _pass_on(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _exec_fresh(command: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *command])


if __name__ == "__main__":
    main(sys.argv[1:])
