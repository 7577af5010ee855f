"""A flow on other hosts than its SPUs, cut off from the leader of one of its channels and,
on a Spark standalone cluster, from one of its workers (issue 32).

The partition tests' cluster (tests/faults/: the controller and three SPUs each in a
network namespace of its own; needs root and iproute2) with one more node, `runtime`,
where `contraflow run FLOW --spu A,B,C` runs. By default Spark is the runtime's local one;
with `--standalone` the flow runs with `--master spark://...` on a Spark standalone master
and two one-core workers, each on a node of its own (every process binds its node's address
only; the driver advertises the runtime's, found from the route to the master, and the
executors connect back to it there).
The flow is the cluster flow of tests/spu/flow_harness.py: topic `in` passed through to
`passed` and counted per group in windows of 10 into `counted` (a stateful pipeline whose
Python operators number each group's events in their state), every edge a `log` topic with
three replicas.

Mid-stream the link between the runtime and the SPU leading `passed` is cut both ways for
`--cut-seconds` while the rest of the input is fed (100 events/s): that SPU stays the
leader (it keeps its session with the controller and its followers), so the driver can
neither commit to it nor move elsewhere until the heal. With `--standalone`, once all of
that is out, more input is fed and one worker (drawn from `--seed`) is cut from every other
node for `--worker-cut-seconds`: the master declares it lost after its worker timeout (15 s
here, Spark's default 60 s) and the driver reruns its tasks on the other worker; at the heal
it registers again. Then the runtime drains on SIGTERM, and every event must be in `passed`
exactly once and every window in `counted` once, with the right counts and numbers (the
state carried on).

Checkpoints: the runtime's `--data-dir` holds the pipelines' checkpoints; the driver writes
their offsets and commits, the executors the state store's files. The namespaces share one
file system, so the path is the same everywhere here; on real hosts it must be a shared
mount (docs/spu-cluster.md, "Running flows on a cluster").

The suite runs a short version with local Spark (400 events, a 3 s cut: the last test of
tests/faults/test_partitions.py; the pieces both use are in tests/faults/flow.py): on the
standalone cluster a few thousand events through a stateful flow take minutes on a loaded
2-core box.

Prints one JSON object: the seed, the events, each cut (its target, what was written while
it lasted, how long everything took to come out after the heal), the sockets listening on
the Spark nodes beyond their own address and loopback (none expected), the checkpoints'
state files, the runtime's exit code and whether every check held (exit 1 if not).

Run (as root): PYTHONPATH=src python benchmarks/flow_partition.py [--standalone] [--seed N]
(`make flow-partition` runs it with --standalone).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.e2e.run_process import RunProcess  # noqa: E402
from tests.faults.cluster import Setting, partitioned_cluster  # noqa: E402
from tests.faults.flow import (  # noqa: E402
    MASTER,
    RUNTIME,
    WORKERS,
    Feed,
    cut_from_leader,
    listening_beyond,
    spark_cluster,
    start_runtime,
    warm_up_flow,
    windows,
)
from tests.spu.flow_harness import (  # noqa: E402
    HELD,
    WARM_UP,
    Feeder,
    assert_exactly_once,
    create_topics,
    everything_out,
    passed_numbers,
)

from contraflow.spark.checkpoint import checkpoint_root  # noqa: E402
from contraflow.spark.standalone import StandaloneCluster  # noqa: E402
from contraflow.spu.client import SpuClient  # noqa: E402

EVENTS = 1000  # through the cut from the leader
# the input after the warm-up: 400 events at 100/s, then the HELD rest while the link is cut
FEED = Feed(events=EVENTS, before_cut=EVENTS - WARM_UP - HELD, per_second=100)
WORKER_EVENTS = 1000  # more, through the cut from a worker
WORKER_TIMEOUT_S = 15


def cut_a_worker(
    setting: Setting, spark: StandaloneCluster, run: RunProcess, client: SpuClient, worker: str, cut_s: float
) -> dict[str, object]:
    """Feed WORKER_EVENTS more, cut `worker` from every other node once some are out, feed the
    rest meanwhile, heal, and wait for everything to come out; what happened, as figures."""
    network, bootstrap = setting.network, setting.cluster.bootstrap
    total = EVENTS + WORKER_EVENTS
    feeder = Feeder(bootstrap, EVENTS, total, per_second=100, held=HELD)
    feeder.start()
    run.wait_until(lambda: len(passed_numbers(client)) >= EVENTS + WARM_UP, 180, "events before the cut")
    busy_before = spark.busy_workers()
    before = (len(passed_numbers(client)), windows(client))
    network.isolate(worker)
    cut_at = time.monotonic()
    feeder.release.set()
    alive_during = []
    while time.monotonic() - cut_at < cut_s:
        alive_during.append(spark.alive_workers())
        time.sleep(min(2.0, max(0.0, cut_at + cut_s - time.monotonic())))
    during = (len(passed_numbers(client)), windows(client))
    network.heal()
    healed_at = time.monotonic()
    rejoined: list[float] = []  # when the master had both workers again

    def out_noting_rejoin() -> bool:
        if not rejoined and spark.alive_workers() == len(WORKERS):
            rejoined.append(time.monotonic())
        return everything_out(client, total)

    feeder.finish(180)
    run.wait_until(out_noting_rejoin, 300, "every event and window")
    out_after_heal_s = round(time.monotonic() - healed_at, 1)
    run.wait_until(lambda: out_noting_rejoin() and bool(rejoined), 120, "the worker to register again")
    return {
        "cut": [worker, "everything else"],
        "seconds": cut_s,
        "busy_workers_before": busy_before,
        "fewest_alive_workers_during": min(alive_during),  # the master's view
        # `pass` runs in the runtime (aliased); `count` runs on the executors: its windows
        # while cut came from the other worker
        "passed_while_cut": during[0] - before[0],
        "windows_while_cut": during[1] - before[1],
        "out_after_heal_s": out_after_heal_s,
        "rejoined_after_heal_s": round(rejoined[0] - healed_at, 1),
    }


def state_files(data_dir: Path) -> dict[str, int]:
    """Per pipeline checkpoint, the files of its state store (written by the executors)."""
    root = checkpoint_root(data_dir)
    return {
        str(path.relative_to(root)): sum(1 for f in (path / "state").rglob("*") if f.is_file())
        for path in sorted(root.glob("*/*"))
        if (path / "state").is_dir()
    }


def run_flow(args: argparse.Namespace, tmp: Path, result: dict[str, object]) -> None:
    extra = [RUNTIME, *([MASTER, *WORKERS] if args.standalone else [])]
    with (
        partitioned_cluster(tmp / "cluster", extra_nodes=extra) as setting,
        SpuClient(setting.cluster.bootstrap) as client,
        spark_cluster(setting.network, tmp / "spark", WORKER_TIMEOUT_S)
        if args.standalone
        else _nothing() as spark,
    ):
        network = setting.network
        create_topics(client)
        data = tmp / "data"
        if spark:
            result["master"] = spark.master_url
        run = start_runtime(setting, tmp, spark)
        total = EVENTS
        try:
            run.wait_until(run.running, 600, "the flow to start")
            # `count`'s first micro-batch (minutes on a loaded cluster) is done before the cut
            warm_up_flow(setting, run, client, 600)
            cuts = [cut_from_leader(setting, run, client, FEED, args.cut_seconds, 300)]
            if spark:  # the driver, the master, the workers, their executors and Python workers
                result["listening_beyond_node_address"] = listening_beyond(network, extra)
                worker = random.Random(args.seed).choice(WORKERS)
                cuts.append(cut_a_worker(setting, spark, run, client, worker, args.worker_cut_seconds))
                total += WORKER_EVENTS
            result["cuts"] = cuts
            result["exit_code"] = run.terminate()
        except AssertionError as err:  # the flow stopped short: what it wrote is still checked
            result["problem"] = str(err).splitlines()[0]
        finally:
            run.kill()
            lines = run.log.read_text(errors="replace").splitlines()
            notable = [line for line in lines if line.startswith(("WARNING", "ERROR"))]
            print("\n".join(notable[-40:]), file=sys.stderr)  # what the runtime went through
        result["events"] = total
        result["checkpoints"] = {"path": str(checkpoint_root(data)), "state_files": state_files(data)}
        try:
            assert_exactly_once(client, total)
            result["exactly_once"] = True
        except AssertionError as err:
            result["exactly_once"] = False
            result.setdefault("problem", str(err))


def keep_logs(tmp: Path, target: Path) -> None:
    """Copy the logs under `tmp` (the runtime's, Spark's, the executors' `stderr`, the cluster's)
    to `target`, in the same layout."""
    for path in tmp.rglob("*"):
        if path.is_relative_to(tmp / "cluster") and len(path.relative_to(tmp).parts) > 2:
            continue  # an SPU's data directory: its segments are `.log` files too
        if path.is_file() and (path.suffix in (".log", ".out") or path.name == "stderr"):
            copy = target / path.relative_to(tmp)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cut-seconds",
        type=float,
        default=40.0,
        help="how long the leader's link stays cut (longer than a batch)",
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="a Spark standalone master and two workers, each on its own node",
    )
    parser.add_argument(
        "--worker-cut-seconds",
        type=float,
        default=40.0,
        help="how long the worker stays cut (past its timeout)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="draws the worker to cut (printed; replays it)"
    )
    parser.add_argument(
        "--logs",
        type=Path,
        default=None,
        help="keep every process's log (and the executors') in this directory",
    )
    args = parser.parse_args()
    args.seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"seed {args.seed}", file=sys.stderr, flush=True)
    result: dict[str, object] = {"seed": args.seed, "standalone": args.standalone}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flow-partition-") as tmp_name:
        try:
            run_flow(args, Path(tmp_name), result)
        finally:
            if args.logs is not None:
                keep_logs(Path(tmp_name), args.logs)
    result["seconds"] = round(time.monotonic() - started, 1)
    result["load_average"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps(result, indent=1))
    ok = (
        result["exactly_once"]
        and "problem" not in result
        and result.get("exit_code") == 0
        and not result.get("listening_beyond_node_address")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
