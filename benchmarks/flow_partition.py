"""A flow on another host than its SPUs, cut off from the leader of one of its channels (issue 32).

The partition tests' cluster (tests/faults/: the controller and three SPUs each in a
network namespace of its own; needs root and iproute2) with one more node, `runtime`,
where `contraflow run FLOW --spu A,B,C` runs with its local Spark. The flow is the cluster
flow of tests/spu/flow_harness.py: topic `in` passed through to `passed` and counted per
group in windows of 10 into `counted` (a stateful pipeline), every edge a `log` topic with
three replicas. Mid-stream the link between the runtime and the SPU leading `passed` is
cut both ways for `--cut-seconds` (longer than one of the flow's micro-batches here) while
the rest of the input is fed (100 events/s): that SPU stays the leader (it keeps its
session with the controller and its followers), so the sink can neither commit nor move
elsewhere until the heal. Then the runtime drains on SIGTERM, and every event must be in
`passed` exactly once and every window in `counted` once (the counts carried on).

Not in the suite: a Spark start and 1000 events through a stateful flow take minutes on
a loaded 2-core box. The standalone-master variant (master and two workers on nodes of
their own) is not built: `contraflow.spark.standalone` binds 127.0.0.1 throughout.

Prints one JSON object: the events, the cut, how long the flow took to output everything
after the heal, the runtime's exit code and whether every check held (exit 1 if not).

Run (as root): PYTHONPATH=src python benchmarks/flow_partition.py [--cut-seconds 40]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.e2e.run_process import RunProcess  # noqa: E402
from tests.faults.cluster import Setting, partitioned_cluster  # noqa: E402
from tests.spu.cluster_harness import partition_state  # noqa: E402
from tests.spu.flow_harness import (  # noqa: E402
    assert_exactly_once,
    create_topics,
    everything_out,
    feed_mid_stream,
    passed_numbers,
    read_topic,
    warm_up,
    write_flow,
)

from contraflow.spu.client import SpuClient  # noqa: E402

EVENTS = 1000


def cut_mid_stream(setting: Setting, run: RunProcess, client: SpuClient, cut_s: float) -> dict[str, object]:
    """Start the flow, warm it up, cut the runtime from the leader of `passed` while the rest
    of the input is fed, heal, and wait for everything to come out; what happened, as figures."""
    network, cluster = setting.network, setting.cluster
    run.wait_until(run.running, 300, "the flow to start")
    warm_up(cluster.bootstrap, run, client)
    feeder = feed_mid_stream(cluster.bootstrap, run, client, EVENTS)
    leaders = {t: f"spu-{partition_state(cluster, t)[0]}" for t in ("in", "passed", "counted")}
    before = (len(read_topic(client, "in")), len(passed_numbers(client)))
    network.split(["runtime"], [leaders["passed"]])
    feeder.release.set()  # the rest of the input arrives while the link is cut
    time.sleep(cut_s)
    during = (len(read_topic(client, "in")), len(passed_numbers(client)))
    network.heal()
    healed_at = time.monotonic()
    feeder.finish(180)
    run.wait_until(lambda: everything_out(client, EVENTS), 300, "every event and window")
    return {
        "leaders": leaders,
        # written to `in` and to `passed` while cut: the input went on, the sink stood still
        "fed_while_cut": during[0] - before[0],
        "passed_while_cut": during[1] - before[1],
        "out_after_heal_s": round(time.monotonic() - healed_at, 1),
        "exit_code": run.terminate(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cut-seconds", type=float, default=40.0, help="how long the link stays cut (longer than a batch)"
    )
    args = parser.parse_args()
    result: dict[str, object] = {"events": EVENTS, "cut_s": args.cut_seconds}
    with tempfile.TemporaryDirectory(prefix="flow-partition-") as tmp_name:
        tmp = Path(tmp_name)
        with (
            partitioned_cluster(tmp / "cluster", extra_nodes=["runtime"]) as setting,
            SpuClient(setting.cluster.bootstrap) as client,
        ):
            network, cluster = setting.network, setting.cluster
            create_topics(client)
            with network.inside("runtime"):  # the runtime, its JVM and Python workers live there
                run = RunProcess(
                    write_flow(tmp),
                    tmp / "data",
                    tmp,
                    tmp / "run.log",
                    "--spu",
                    cluster.bootstrap,
                    env={"SPARK_LOCAL_IP": "127.0.0.1"},  # Spark's own traffic stays on the node
                )
            try:
                result.update(cut_mid_stream(setting, run, client, args.cut_seconds))
            except AssertionError as err:  # the flow stopped short: what it wrote is still checked
                result["problem"] = str(err).splitlines()[0]
            finally:
                run.kill()
                lines = run.log.read_text(errors="replace").splitlines()
                notable = [line for line in lines if line.startswith(("WARNING", "ERROR"))]
                print("\n".join(notable[-40:]), file=sys.stderr)  # what the runtime went through
            try:
                assert_exactly_once(client, EVENTS)
                result["exactly_once"] = True
            except AssertionError as err:
                result["exactly_once"] = False
                result.setdefault("problem", str(err))
    print(json.dumps(result, indent=1))
    return 0 if result["exactly_once"] and "problem" not in result and result.get("exit_code") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
