"""A randomized run of network partitions and process faults on an SPU cluster (issue 32).

The cluster of the partition tests (tests/faults/: the controller, three SPUs and two
client nodes, each in a network namespace of its own; needs root and iproute2) takes
acks=all writes from a producer on each client node, read back committed by a reader on
each, for `--seconds`. Meanwhile, round after round, one or two faults drawn from a seeded
random generator hold for 0.3-3 s and are undone: a node isolated (the controller or an
SPU), the leader cut off with the "near" client beside it, a node's sending or receiving
cut one way, a node's link flapping, an SPU SIGSTOPped (then continued) or SIGKILLed (then
restarted). A round that cut the leader off with its client for more than two sessions
checks that it acknowledged nothing past one session. Then everything heals and the
suite's checker holds the whole history against the replicas' logs.

The seed is printed first (stderr) and in the result: `--seed N` replays the same draws
(the timing of a real cluster still varies from run to run). Prints one JSON object: the
seed, the rounds (time, faults, hold), produces acknowledged and failed, records read, and
the problems found (none: exit 0; any: exit 1).

Run (as root): PYTHONPATH=src python benchmarks/partitions.py [--seconds 120] [--seed N]
or `make partitions [SEED=N] [SECONDS_RUN=N]` (300 s by default).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.faults.cluster import NODES, SESSION_S, Scenario, Setting, partitioned_cluster  # noqa: E402
from tests.faults.history import stops_acknowledging  # noqa: E402
from tests.spu.cluster_harness import wait_for  # noqa: E402

from contraflow.spu.protocol import SpuError  # noqa: E402

SPUS = ["spu-0", "spu-1", "spu-2"]
Undo = Callable[[], list[str]]  # undoes a fault; returns the problems its own check found


class Faults:
    """The faults a round draws from, each applied at once and returning its undo."""

    def __init__(self, setting: Setting, run: Scenario, rng: random.Random) -> None:
        self.network, self.cluster, self.run, self.rng = setting.network, setting.cluster, run, rng
        self.killed: set[str] = set()
        self.stopped: set[str] = set()
        self.leader_checks = 0  # cut-offs held long enough for `stops_acknowledging`
        self.leader_id = -1

    def heal(self) -> list[str]:
        self.network.heal()
        return []

    def isolate(self) -> tuple[str, Undo]:
        node = self.rng.choice(["sc", *SPUS])
        self.network.isolate(node)
        return f"isolate {node}", self.heal

    def find_leader(self) -> None:
        """Asked before a round's faults: one of them may cut the controller off."""
        try:
            self.leader_id = self.run.state()[0]
        except SpuError:
            self.leader_id = -1

    def leader_with_client(self) -> tuple[str, Undo]:
        leader_id = self.leader_id
        if leader_id < 0 or f"spu-{leader_id}" in self.killed | self.stopped:
            return self.isolate()
        leader = f"spu-{leader_id}"
        minority = [leader, "near"]
        self.network.split(minority, [n for n in NODES if n not in minority])
        cut_at = time.monotonic()

        def undo() -> list[str]:
            self.network.heal()
            healed_at = time.monotonic()
            if healed_at - cut_at < 2.5 * SESSION_S:
                return []
            self.leader_checks += 1
            return stops_acknowledging(self.run.producers["near"], cut_at, healed_at, SESSION_S)

        return f"cut off {leader} with near", undo

    def one_way(self) -> tuple[str, Undo]:
        node = self.rng.choice(["sc", *SPUS])
        outward = self.rng.random() < 0.5
        for other in NODES:
            if other != node:
                self.network.cut(*((node, other) if outward else (other, node)), both_ways=False)
        return f"one-way {'from' if outward else 'to'} {node}", self.heal

    def stop(self) -> tuple[str, Undo]:
        spu = self.rng.choice([s for s in SPUS if s not in self.killed])
        self.cluster.signal(spu, signal.SIGSTOP)
        self.stopped.add(spu)

        def undo() -> list[str]:
            self.cluster.signal(spu, signal.SIGCONT)
            self.stopped.discard(spu)
            return []

        return f"SIGSTOP {spu}", undo

    def kill(self) -> tuple[str, Undo]:
        spu = self.rng.choice([s for s in SPUS if s not in self.stopped])
        self.cluster.signal(spu, signal.SIGKILL)
        self.killed.add(spu)

        def undo() -> list[str]:
            self.cluster.start_spu(int(spu.removeprefix("spu-")))
            self.killed.discard(spu)
            return []

        return f"SIGKILL {spu}", undo

    def flap(self, hold_s: float) -> str:
        """A node's link down and up every 0.1-0.6 s for `hold_s`."""
        node = self.rng.choice(["sc", *SPUS])
        end = time.monotonic() + hold_s
        while time.monotonic() < end:
            self.network.isolate(node)
            time.sleep(self.rng.uniform(0.1, 0.6))
            self.network.heal()
            time.sleep(self.rng.uniform(0.1, 0.6))
        return f"flap {node}"


def one_round(faults: Faults, rng: random.Random) -> tuple[list[str], float, list[str]]:
    """Apply one or two faults, hold, undo: (what was done, the hold, problems found)."""
    hold_s = rng.uniform(0.3, 3.0)
    if rng.random() < 0.15:
        return [faults.flap(hold_s)], hold_s, []
    kinds = [faults.isolate, faults.leader_with_client, faults.one_way, faults.stop, faults.kill]
    chosen = rng.sample(kinds, rng.choice([1, 1, 2]))
    faults.find_leader()
    applied = [fault() for fault in chosen]
    time.sleep(hold_s)
    # The leader's cut is healed first: its check counts up to the heal, and another network
    # fault's undo heals every cut.
    applied.sort(key=lambda fault: fault[0].startswith("cut off"), reverse=True)
    problems = [p for _, undo in applied for p in undo()]
    return [name for name, _ in applied], hold_s, problems


def randomized_run(setting: Setting, seconds: float, rng: random.Random) -> dict[str, Any]:
    run = Scenario(setting, "randomized", producers=["client", "near"], readers=["client", "near"])
    faults = Faults(setting, run, rng)
    began = time.monotonic()
    rounds: list[dict[str, Any]] = []
    problems: list[str] = []
    while time.monotonic() - began < seconds:
        done, hold_s, found = one_round(faults, rng)
        rounds.append(
            {"at_s": round(time.monotonic() - began, 1), "faults": done, "hold_s": round(hold_s, 2)}
        )
        print(json.dumps(rounds[-1]), file=sys.stderr)
        problems += found
        time.sleep(rng.uniform(0.0, 1.0))
    wait_for("three replicas in sync", lambda: len(run.state()[3]) == 3, 120.0)
    problems += run.finish()
    ops = [op for producer in run.producers.values() for op in producer.ops]
    return {
        "rounds": rounds,
        "acknowledged": sum(op.first_offset is not None for op in ops),
        "failed": sum(op.first_offset is None for op in ops),
        "read": sum(len(reader.seen) for reader in run.readers),
        "leader_checks": faults.leader_checks,
        "problems": problems,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=120.0, help="how long faults are drawn")
    parser.add_argument("--seed", type=int, default=None, help="replay the draws of an earlier run")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    print(f"seed {seed} (replay: --seed {seed})", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="partitions-") as tmp, partitioned_cluster(Path(tmp)) as setting:
        result = {
            "seed": seed,
            "seconds": args.seconds,
            **randomized_run(setting, args.seconds, random.Random(seed)),
        }
    print(json.dumps(result, indent=1))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
