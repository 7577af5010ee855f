"""Chaos (bounded, about half a minute on a quiet box): 50k records with acks=all through
at least 9 leader SIGKILLs and restarts (one every few seconds while the writing lasts) and
one SIGSTOP past the session timeout, each leader killed only once it has committed records
of its own epoch, then the checks of issue 19:
every acknowledged record is read exactly once and in order, the three replicas
hold identical records with identical offsets and epochs, and a committed reader
never saw anything that was later taken back.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from tests.faults.history import CommittedReader
from tests.spu.cluster_harness import local_cluster, partition_state, replica_log, wait_for

from contraflow.spu.cli.local_cluster import LocalCluster
from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import Acks, SpuError
from contraflow.spu.protocol.topics import TopicConfig

RECORDS = 50_000
BATCH = 100
RATE = 2_000  # records/s at most: the writing takes at least 25 s
SLICE = 5_000  # records written per leader change at most: 9 leader changes at least, whatever the load
TOPIC = "chaos"
SESSION_S = 1.0


class Producer(threading.Thread):
    """Writes RECORDS numbered records with acks=all at about RATE records/s; remembers
    which were acknowledged. It writes a slice of SLICE records per leader change
    (`leader_changed`) and waits for the next one, so the chaos covers the whole
    writing however fast either side goes."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.client = SpuClient(bootstrap)
        self.acked: list[bytes] = []
        self.failed = 0
        self.error: BaseException | None = None
        self.leader_changed = threading.Semaphore(0)

    def run(self) -> None:
        began = time.monotonic()
        try:
            for start in range(0, RECORDS, BATCH):
                if start and start % SLICE == 0:
                    self.leader_changed.acquire()
                time.sleep(max(0.0, began + start / RATE - time.monotonic()))
                batch = [b"%06d" % n for n in range(start, start + BATCH)]
                try:
                    self.client.produce(TOPIC, 0, batch, acks=Acks.COMMITTED)
                    self.acked += batch
                except SpuError:
                    self.failed += 1  # not acknowledged: may or may not be in the log (once)
        except BaseException as err:
            self.error = err
        finally:
            self.client.close()


def committed_in_its_epoch(cluster: LocalCluster, client: SpuClient) -> tuple[int, int] | None:
    """(leader, epoch) when the last committed record was written by that leader at its epoch,
    both read in one look at the partition (a leader read again later may be a newer one)."""
    leader, epoch, _, _ = partition_state(cluster, TOPIC)
    try:
        end = client.list_offsets(TOPIC, 0, "latest")
        last = client.fetch(TOPIC, 0, end - 1, 1 << 16).batches if end else []
    except SpuError:  # the leader moving on: ask again
        return None
    return (leader, epoch) if any(batch.header.leader_epoch == epoch for batch in last) else None


def kill_and_restart_leaders(cluster: LocalCluster, producer: Producer, client: SpuClient) -> list[int]:
    """Until the producer is done: SIGKILL the leader and restart it, once all three replicas
    are in sync again and the leader has committed records at its epoch; the second time
    SIGSTOP it past the session timeout instead, then SIGCONT it. Each round lets the producer
    write its next slice."""
    epochs: list[int] = []  # of each killed or stopped leader, which had committed records in it
    while producer.is_alive():
        wait_for("all replicas in sync", lambda: len(partition_state(cluster, TOPIC)[3]) == 3)
        found: tuple[int, int] | None = None

        def committed() -> bool:
            nonlocal found
            found = committed_in_its_epoch(cluster, client)
            return found is not None or not producer.is_alive()

        wait_for("a record committed at the leader's epoch", committed)
        if found is None or found[0] < 0 or not producer.is_alive():
            continue
        leader, epoch = found
        name = f"spu-{leader}"
        epochs.append(epoch)
        if len(epochs) == 2:
            cluster.signal(name, signal.SIGSTOP)
            time.sleep(SESSION_S * 3)
            cluster.signal(name, signal.SIGCONT)
        else:
            cluster.signal(name, signal.SIGKILL)
            cluster.start_spu(leader)  # at once: often back before its old session ran out
        # Stopped past its session or restarted (a new process, also within its session: the
        # controller sees its new heartbeat session), the leader never leads on at its epoch.
        # The next round looks only then: the controller's view until it has heard the new
        # process is the old one, whose last committed records are still at that epoch.
        wait_for("a new epoch", lambda ended=epoch: partition_state(cluster, TOPIC)[1] > ended)
        producer.leader_changed.release()
    return epochs


def test_acked_records_survive_leader_kills_and_a_stopped_leader(tmp_path: Path) -> None:
    config = TopicConfig(replication_factor=3, min_in_sync_replicas=2, replica_lag_time_max_ms=1000)
    with local_cluster(tmp_path) as cluster:
        with SpuClient(cluster.bootstrap) as admin:
            admin.create_topic(TOPIC, config)
        producer, reader = Producer(cluster.bootstrap), CommittedReader(cluster.bootstrap, TOPIC)
        producer.start()
        reader.start()
        with SpuClient(cluster.bootstrap) as client:
            chaos_epochs = kill_and_restart_leaders(cluster, producer, client)
        producer.join()
        assert producer.error is None, producer.error
        assert len(chaos_epochs) >= RECORDS // SLICE - 1, "the chaos ran: kills and a stop"

        with SpuClient(cluster.bootstrap) as client:
            wait_for("all replicas in sync", lambda: len(partition_state(cluster, TOPIC)[3]) == 3, 60)
            end = client.list_offsets(TOPIC, 0, "latest", isolation="uncommitted")
            try:
                wait_for("the reader to catch up", lambda: len(reader.seen) >= (end or 0), 90)
            except AssertionError as err:
                raise AssertionError(f"{err}; its last failed fetches: {reader.failures[-5:]}") from None
            reader.stop.set()
            reader.join()

            log: list[bytes] = []
            position = 0
            while position < (end or 0):
                result = client.fetch(TOPIC, 0, position, 1 << 22)
                log += [bytes(v) for b in result.batches for v in b.values()]
                position = result.next_offset

        assert len(log) == len(set(log)), "no record is in the log twice"
        acked = set(producer.acked)
        assert [v for v in log if v in acked] == producer.acked, "every acknowledged record, once, in order"
        assert len(producer.acked) >= RECORDS - producer.failed * BATCH
        assert [o for o, _ in reader.seen] == list(range(len(reader.seen)))
        assert [v for _, v in reader.seen] == log[: len(reader.seen)], "committed reads were never taken back"

        def replicas_equal() -> bool:
            logs = [replica_log(tmp_path / f"spu-{n}", TOPIC) for n in range(3)]
            return logs[0] == logs[1] == logs[2] and len(logs[0]) == len(log)

        wait_for("identical replicas", replicas_equal, 60)
        # Each killed or stopped leader had records committed at its epoch, and they are all still
        # there. Counting the log's epochs against the rounds is no check: a loaded box's extra
        # elections make epochs nothing was written in.
        assert chaos_epochs == sorted(set(chaos_epochs)), "each round ended its leader's epoch"
        in_log = [e for _, e, _ in replica_log(tmp_path / "spu-0", TOPIC)]
        assert in_log == sorted(in_log), "epochs only grow along the log"
        assert set(chaos_epochs) <= set(in_log), f"{sorted(set(chaos_epochs) - set(in_log))} lost"
