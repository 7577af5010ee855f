"""A cluster on loopback as child processes: a controller and N SPUs.

`contraflow cluster start|status|stop` and the cluster tests use it. Each
process is `python -m contraflow ...` in its own session, writing its ready line
to `NAME.out` and its log to `NAME.log` in the cluster directory; the process
list (pids, addresses) is kept in `cluster-processes.json` so another command
can find it. An SPU that is restarted keeps its addresses and data directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from contraflow.errors import UserError

PROCESSES_FILE = "cluster-processes.json"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
SC_READY = "sc ready"
SPU_READY = "spu ready"


@dataclass
class Member:
    """One process of the cluster: role "sc" or "spu", its id (SPUs), pid and addresses."""

    role: str
    id: int
    pid: int
    addr: str
    private_addr: str = ""
    kafka_addr: str = ""  # its Kafka listener (`cluster start --kafka`), "" without one

    @property
    def name(self) -> str:
        return "sc" if self.role == "sc" else f"spu-{self.id}"


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


class LocalCluster:
    def __init__(self, root: Path, *, session_timeout: str = "2s", kafka: bool = False) -> None:
        self.root = root.resolve()
        self.session_timeout = session_timeout
        self.kafka = kafka  # each SPU gets a Kafka listener (docs/kafka.md)
        self.members: dict[str, Member] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.load()

    # -- the process list ------------------------------------------------------------------------

    def load(self) -> None:
        path = self.root / PROCESSES_FILE
        if path.exists():
            members = [Member(**m) for m in orjson.loads(path.read_bytes())]
            self.members = {m.name: m for m in members}
            self.kafka = self.kafka or any(m.kafka_addr for m in members)

    def _save(self) -> None:
        data = [asdict(m) for m in self.members.values()]
        (self.root / PROCESSES_FILE).write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))

    @property
    def sc_addr(self) -> str:
        return self.members["sc"].addr

    def spus(self) -> list[Member]:
        return sorted((m for m in self.members.values() if m.role == "spu"), key=lambda m: m.id)

    @property
    def bootstrap(self) -> str:
        """The SPUs' public addresses, as `--spu` takes them."""
        return ",".join(m.addr for m in self.spus())

    @property
    def kafka_bootstrap(self) -> str:
        """The SPUs' Kafka listeners, as Kafka's bootstrap.servers takes them."""
        return ",".join(m.kafka_addr for m in self.spus() if m.kafka_addr)

    def running(self) -> bool:
        return any(alive(m.pid) for m in self.members.values())

    # -- starting --------------------------------------------------------------------------------

    def start(self, spus: int) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.start_controller()
        for n in range(spus):
            self.start_spu(n)
        self.wait_registered(spus)

    def start_controller(self) -> Member:
        old = self.members.get("sc")
        args = ["sc", "run", "--data-dir", str(self.root / "sc"), "--session-timeout", self.session_timeout]
        args += ["--addr", old.addr if old else f"{self.host_of('sc')}:0"]
        fields = self._launch("sc", args, SC_READY)
        member = Member("sc", -1, self._procs["sc"].pid, fields["addr"])
        self.members["sc"] = member
        self._save()
        return member

    def start_spu(self, n: int) -> Member:
        """Start SPU n (again: with the addresses and data it had)."""
        name = f"spu-{n}"
        old = self.members.get(name)
        args = ["spu", "run", "--id", str(n), "--sc", self.sc_addr, "--data-dir", str(self.root / name)]
        host = self.host_of(name)
        args += ["--public-addr", old.addr if old else f"{host}:0"]
        args += ["--private-addr", old.private_addr if old else f"{host}:0"]
        if self.kafka:
            args += ["--kafka-addr", old.kafka_addr if old and old.kafka_addr else f"{host}:0"]
        fields = self._launch(name, args, SPU_READY)
        pid = self._procs[name].pid
        member = Member("spu", n, pid, fields["public"], fields["private"], fields.get("kafka", ""))
        self.members[name] = member
        self._save()
        return member

    def host_of(self, name: str) -> str:
        """The address member `name` listens on: loopback here; the partition tests place each
        member in a network namespace of its own (tests/faults/)."""
        return "127.0.0.1"

    def command_of(self, name: str, args: list[str]) -> list[str]:
        """The command line that runs member `name` with contraflow arguments `args`."""
        return [sys.executable, "-m", "contraflow", *args]

    def _launch(self, name: str, args: list[str], ready: str) -> dict[str, str]:
        out_path = self.root / f"{name}.out"
        with open(out_path, "wb") as out, open(self.root / f"{name}.log", "ab") as log_file:
            proc = subprocess.Popen(
                self.command_of(name, args),
                stdout=out,
                stderr=log_file,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives `cluster start`; `cluster stop` ends it
            )
        self._procs[name] = proc
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            line = out_path.read_text().partition("\n")[0].strip()
            if line.startswith(ready):
                return dict(item.split("=", 1) for item in line[len(ready) :].split())
            if proc.poll() is not None or time.monotonic() > deadline:
                raise UserError(f"{name} did not start (see {self.root / (name + '.log')})")
            time.sleep(0.05)

    def metadata(self) -> dict[str, Any]:
        """The controller's metadata (raises SpuError when it is unreachable)."""
        import asyncio

        from contraflow.spu.client.aio import AsyncSpuClient
        from contraflow.spu.protocol import ApiKey
        from contraflow.spu.rpc.client import RetryPolicy

        async def ask() -> dict[str, Any]:
            retry = RetryPolicy(attempts=1)
            async with AsyncSpuClient(self.sc_addr, retry=retry, request_timeout_s=5.0) as client:
                metadata: dict[str, Any] = (await client.request(ApiKey.METADATA, {})).fields["metadata"]
                return metadata

        return asyncio.run(ask())

    def wait_registered(self, count: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(self.metadata()["spus"]) < count:
            if time.monotonic() > deadline:
                raise UserError(f"the SPUs did not all register within {START_TIMEOUT_S:.0f}s")
            time.sleep(0.1)

    # -- signals ---------------------------------------------------------------------------------

    def signal(self, name: str, sig: signal.Signals) -> None:
        member = self.members[name]
        if alive(member.pid):
            os.kill(member.pid, sig)
        if sig is signal.SIGKILL:
            self._wait_exit([member.pid], STOP_TIMEOUT_S)

    def stop(self) -> int:
        """SIGTERM everything (SPUs first), SIGKILL what is left after a grace period."""
        pids = [m.pid for m in sorted(self.members.values(), key=lambda m: m.role == "sc") if alive(m.pid)]
        for pid in pids:
            os.kill(pid, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            os.kill(pid, signal.SIGTERM)
        self._wait_exit(pids, STOP_TIMEOUT_S)
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        self._wait_exit(pids, STOP_TIMEOUT_S)
        (self.root / PROCESSES_FILE).unlink(missing_ok=True)
        return len(pids)

    def _wait_exit(self, pids: list[int], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for proc in self._procs.values():
                proc.poll()  # reap our own children so they do not linger as zombies
            if not any(alive(pid) for pid in pids):
                return
            time.sleep(0.02)
