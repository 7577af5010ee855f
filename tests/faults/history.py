"""Clients that keep a history of their operations on one partition, and the checker over it.

A `Producer` writes numbered records with acks=all and records every produce with its
answer (first offset) or error and when each happened; a `CommittedReader` records every
(offset, record) a committed fetch returned. Both run on a node of a `Network` and stop
when told. `check` holds the history against the replicas' final logs.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field

from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import Acks, SpuError
from tests.faults.netns import Network

BATCH = 5
# Short, so a client cut off from its leader gives up and tries again within a second or two
# (the defaults wait 30 s for an election); the cluster's session timeout is 1 s.
REQUEST_TIMEOUT_S = 1.5
FAILOVER_TIMEOUT_S = 2.0

Entry = tuple[int, int, bytes]  # offset, leader epoch, record (tests/spu/cluster_harness.py)


@dataclass
class Produce:
    client: str
    values: list[bytes]
    sent: float
    done: float
    first_offset: int | None  # None: failed (the records may or may not be in the log, once)
    error: str = ""


def partition_client(bootstrap: str) -> SpuClient:
    client = SpuClient(bootstrap, request_timeout_s=REQUEST_TIMEOUT_S, connect_timeout_s=0.5)
    client.aio.failover_timeout_s = FAILOVER_TIMEOUT_S
    return client


class Producer(threading.Thread):
    """Produces batches of BATCH records named after its node, one at a time, until stopped."""

    def __init__(self, network: Network, node: str, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True, name=f"producer-{node}")
        self.network, self.node, self.bootstrap, self.topic = network, node, bootstrap, topic
        self.ops: list[Produce] = []
        self.in_flight_since: float | None = None  # when the unanswered produce was sent
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.network.inside(self.node):
                client = partition_client(self.bootstrap)
            with client:
                for n in range(0, 1 << 30, BATCH):
                    if self.stop.is_set():
                        return
                    self._produce(client, [b"%s-%07d" % (self.node.encode(), i) for i in range(n, n + BATCH)])
        except BaseException as err:
            self.error = err

    def _produce(self, client: SpuClient, values: list[bytes]) -> None:
        sent = self.in_flight_since = time.monotonic()
        try:
            first, _ = client.produce(self.topic, 0, values, acks=Acks.COMMITTED)
            self.ops.append(Produce(self.node, values, sent, time.monotonic(), first))
        except SpuError as err:
            self.ops.append(Produce(self.node, values, sent, time.monotonic(), None, str(err)))
            time.sleep(0.05)  # a failed produce returns at once while nothing is reachable
        finally:
            self.in_flight_since = None

    def acks_since(self, moment: float) -> list[Produce]:
        return [op for op in self.ops if op.first_offset is not None and op.done > moment]

    def waiting(self) -> float:
        """How long the produce in flight has been waiting for its answer (0: none is)."""
        since = self.in_flight_since
        return 0.0 if since is None else time.monotonic() - since

    def acks_between(self, start: float, end: float) -> list[Produce]:
        return [op for op in self.acks_since(start) if op.done < end]

    def idle_between(self, start: float, end: float) -> float:
        """The longest stretch of [start, end] with no produce of ours outstanding (called at
        `end` or later): near 0 means every moment of it had a produce waiting for an answer."""
        spans = [(op.sent, op.done) for op in self.ops]
        if self.in_flight_since is not None:
            spans.append((self.in_flight_since, end))
        idle, covered = 0.0, start
        for sent, done in sorted(spans):
            if sent > covered:
                idle = max(idle, min(sent, end) - covered)
            covered = max(covered, done)
            if covered >= end:
                break
        return max(idle, end - covered)


def stops_acknowledging(producer: Producer, cut_at: float, healed_at: float, session_s: float) -> list[str]:
    """An old leader cut off from the majority with `producer` beside it acknowledges nothing
    from one session timeout after the cut until the heal."""
    start = cut_at + session_s
    if healed_at - start < session_s:
        return ["the cut was healed too soon to tell"]
    return acknowledged_nothing(producer, start, healed_at)


def acknowledged_nothing(producer: Producer, start: float, end: float) -> list[str]:
    """No produce of `producer` was acknowledged between `start` and `end` although it kept
    asking (which gives the check its teeth: a leader that went on acknowledging would have
    answered it)."""
    verdict = Verdict()
    acked = producer.acks_between(start, end)
    verdict.expect(not acked, f"{producer.node}: acknowledged meanwhile: {[op.first_offset for op in acked]}")
    idle = producer.idle_between(start, end)
    verdict.expect(idle < 0.5, f"{producer.node} stopped asking for {idle:.2f}s")
    return verdict.problems


class CommittedReader(threading.Thread):
    """Reads committed records from offset 0 on, as a consumer does: a failed fetch is retried
    from the same position with a new client (each failure kept in `failures` for a report).
    With a `network` it runs on `node` of it; without, on this host."""

    def __init__(self, bootstrap: str, topic: str, network: Network | None = None, node: str = "") -> None:
        super().__init__(daemon=True, name=f"reader-{node or 'local'}")
        self.network, self.node, self.bootstrap, self.topic = network, node, bootstrap, topic
        self.seen: list[tuple[int, bytes]] = []
        self.position = 0  # kept across clients: a failed fetch must not rewind the reader
        self.stop = threading.Event()
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            with self.network.inside(self.node) if self.network else contextlib.nullcontext():
                client = partition_client(self.bootstrap)
            try:
                with client:
                    self._read(client)
            except Exception as err:  # noqa: BLE001 - any failed fetch: a consumer carries on, the checks judge
                self.failures.append(f"at {self.position}: {type(err).__name__}: {err}")
                time.sleep(0.05)

    def _read(self, client: SpuClient) -> None:
        while not self.stop.is_set():
            result = client.fetch(self.topic, 0, self.position, 1 << 20, isolation="committed")
            for batch in result.batches:
                for offset, value in zip(batch.offsets(), batch.values(), strict=True):
                    if offset >= self.position:
                        self.seen.append((offset, bytes(value)))
                        self.position = offset + 1
            self.position = max(self.position, result.next_offset)
            if not result.batches:
                time.sleep(0.01)


@dataclass
class Verdict:
    """What `check` found: empty lists mean every guarantee held."""

    problems: list[str] = field(default_factory=list)

    def expect(self, ok: bool, problem: str) -> None:
        if not ok:
            self.problems.append(problem)


def check(
    producers: list[Producer], readers: list[CommittedReader], replicas: list[list[Entry]]
) -> list[str]:
    """The guarantees of issue 32 over one partition's history, once healed and quiet:
    the replicas hold one identical log; no record is in it twice; every acknowledged record
    is in it at the offset its acknowledgement gave, in the order its producer sent it; every
    committed read saw the record that the log holds at that offset, and no reader went back."""
    verdict = Verdict()
    log = replicas[0]
    for n, other in enumerate(replicas[1:], 1):
        verdict.expect(
            other == log, f"replica {n} differs from replica 0 ({len(other)} vs {len(log)} records)"
        )
    at = {offset: value for offset, _, value in log}
    values = [value for _, _, value in log]
    verdict.expect(len(values) == len(set(values)), "a record is in the log twice")
    verdict.expect(sorted(at) == list(range(log[0][0], log[0][0] + len(log))) if log else True, "offset gaps")
    for producer in producers:
        acked = [op for op in producer.ops if op.first_offset is not None]
        for op in acked:
            assert op.first_offset is not None
            stored = [at.get(op.first_offset + i) for i in range(len(op.values))]
            verdict.expect(
                stored == op.values, f"{op.client}: acknowledged at {op.first_offset}, log has {stored}"
            )
        offsets = [op.first_offset for op in acked]
        verdict.expect(offsets == sorted(offsets), f"{producer.node}: acknowledged records out of order")
    for reader in readers:
        offsets = [offset for offset, _ in reader.seen]
        verdict.expect(offsets == list(range(len(offsets))), f"reader on {reader.node} skipped or went back")
        wrong = [(o, v) for o, v in reader.seen if at.get(o) != v]
        verdict.expect(not wrong, f"reader on {reader.node} read records the log does not hold: {wrong[:3]}")
    return verdict.problems
