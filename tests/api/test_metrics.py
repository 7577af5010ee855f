"""RuntimeMetrics families and their exposition at GET /metrics."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from contraflow.pipeline.spark.listener import (
    LATE_METRIC,
    SHUFFLE_EVENTS,
    SHUFFLE_METRIC,
    batch_phases,
    batch_progress,
)
from contraflow.runtime.metrics import BATCH_DURATION_BUCKETS, RuntimeMetrics
from tests.api.conftest import InMemoryRuntime


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition as {(name, labels): value}."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def labels(**kv: str) -> frozenset[tuple[str, str]]:
    return frozenset(kv.items())


def scrape(client: httpx.Client) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=")
    return samples(r.text)


def test_connector_counters(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    m = runtime.metrics
    m.connector_events("main", "src", "out", events=3, nbytes=120)
    m.connector_events("main", "src", "out", events=2, nbytes=80)
    m.connector_errors("main", "src", "err")
    got = scrape(client)
    key = labels(flow="main", connector="src", port="out")
    assert got[("contraflow_connector_events_total", key)] == 5
    assert got[("contraflow_connector_bytes_total", key)] == 200
    assert got[("contraflow_connector_errors_total", labels(flow="main", connector="src", port="err"))] == 1


def test_channel_gauges_and_transitions(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    m = runtime.metrics
    m.set_channel_depth("main", "main.src.out", 42)
    m.set_breaker("main", "main.src.out", True)
    m.set_breaker("main", "main.wrap.out", False)
    m.backpressure_transition("main", "main.src.out", "pause")
    m.backpressure_transition("main", "main.src.out", "resume")
    m.backpressure_transition("main", "main.src.out", "pause")
    got = scrape(client)
    chan = labels(flow="main", channel="main.src.out")
    assert got[("contraflow_channel_depth", chan)] == 42
    assert got[("contraflow_channel_breaker_open", chan)] == 1
    assert got[("contraflow_channel_breaker_open", labels(flow="main", channel="main.wrap.out"))] == 0
    transitions = "contraflow_channel_backpressure_transitions_total"
    assert got[(transitions, labels(flow="main", channel="main.src.out", transition="pause"))] == 2
    assert got[(transitions, labels(flow="main", channel="main.src.out", transition="resume"))] == 1


def test_pipeline_batches(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    m = runtime.metrics
    m.pipeline_batch("main", "wrap", duration_s=0.5, events_in=100, events_out=90)
    m.pipeline_batch("main", "wrap", duration_s=0.02, events_in=10, events_out=10)
    got = scrape(client)
    pipe = labels(flow="main", pipeline="wrap")
    hist = "contraflow_pipeline_batch_duration_seconds"
    assert got[(hist + "_count", pipe)] == 2
    assert got[(hist + "_sum", pipe)] == pytest.approx(0.52)
    assert got[(hist + "_bucket", labels(flow="main", pipeline="wrap", le="0.025"))] == 1
    assert got[(hist + "_bucket", labels(flow="main", pipeline="wrap", le="0.5"))] == 2
    assert (
        got[("contraflow_pipeline_events_total", labels(flow="main", pipeline="wrap", direction="in"))] == 110
    )
    assert (
        got[("contraflow_pipeline_events_total", labels(flow="main", pipeline="wrap", direction="out"))]
        == 100
    )
    # The rate is that of the last batch: 10 events in 0.02 s.
    assert got[("contraflow_pipeline_events_per_second", pipe)] == pytest.approx(500)


def test_explicit_rate_and_zero_duration() -> None:
    m = RuntimeMetrics()
    m.pipeline_batch("f", "p", duration_s=0.0, events_in=5, events_out=5)
    assert (
        m.registry.get_sample_value("contraflow_pipeline_events_per_second", {"flow": "f", "pipeline": "p"})
        == 0
    )
    m.pipeline_batch("f", "p", duration_s=1.0, events_in=5, events_out=5, events_per_second=1234.5)
    rate = m.registry.get_sample_value(
        "contraflow_pipeline_events_per_second", {"flow": "f", "pipeline": "p"}
    )
    assert rate == 1234.5


def test_undeploy_removes_only_that_flows_series(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    m = runtime.metrics
    for flow in ("main", "second"):
        m.connector_events(flow, "src", "out", events=1, nbytes=10)
        m.set_channel_depth(flow, f"{flow}.src.out", 7)
        m.pipeline_batch(flow, "wrap", duration_s=0.1, events_in=1, events_out=1)
    assert client.delete("/v1/flows/main").status_code == 200
    flows = {dict(lbls).get("flow") for (_, lbls) in scrape(client)}
    assert flows == {"second"}


def test_independent_registries() -> None:
    a, b = RuntimeMetrics(), RuntimeMetrics()
    a.connector_events("f", "c", "out", 1, 1)
    query = {"flow": "f", "connector": "c", "port": "out"}
    assert a.registry.get_sample_value("contraflow_connector_events_total", query) == 1
    assert b.registry.get_sample_value("contraflow_connector_events_total", query) is None


def test_bad_transition_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="'pause' or 'resume'"):
        RuntimeMetrics().backpressure_transition("f", "c", "open")  # type: ignore[arg-type]


def test_buckets_are_increasing() -> None:
    assert list(BATCH_DURATION_BUCKETS) == sorted(set(BATCH_DURATION_BUCKETS))


def test_openmetrics_on_request(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    runtime.metrics.connector_events("main", "src", "out", 1, 1)
    r = client.get("/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.rstrip().endswith("# EOF")
    assert 'contraflow_connector_events_total{connector="src",flow="main",port="out"} 1.0' in r.text


def test_a_flow_deployed_again_starts_from_zero() -> None:
    """forget_flow drops cached children too: a redeployed flow's counters restart."""
    m = RuntimeMetrics()
    query = {"flow": "f", "connector": "c", "port": "out"}
    m.connector_events("f", "c", "out", events=5, nbytes=50)
    m.forget_flow("f")
    assert m.registry.get_sample_value("contraflow_connector_events_total", query) is None
    m.connector_events("f", "c", "out", events=2, nbytes=20)
    assert m.registry.get_sample_value("contraflow_connector_events_total", query) == 2
    assert m.registry.get_sample_value("contraflow_connector_bytes_total", query) == 20


def test_batch_phases_from_spark_progress() -> None:
    """Spark's `durationMs` and state operators' commit times become per-phase seconds."""
    durations = {
        "latestOffset": 5,
        "getBatch": 1,
        "walCommit": 40,
        "queryPlanning": 250,
        "addBatch": 1200,
        "commitOffsets": 60,
        "triggerExecution": 1600,
    }
    operators = [{"commitTimeMs": 300}, {"commitTimeMs": 100}]
    phases = dict(batch_phases(durations, operators))
    assert phases == {
        "offsets": 0.046,
        "planning": 0.25,
        "execution": 1.2,
        "commit": 0.06,
        "state_commit": 0.4,
    }
    assert "state_commit" not in dict(batch_phases(durations, []))  # a stateless query has none

    m = RuntimeMetrics()
    m.pipeline_batch("f", "p", duration_s=1.6, events_in=5, events_out=5, phases=tuple(phases.items()))
    m.pipeline_batch("f", "p", duration_s=1.6, events_in=5, events_out=5, phases=tuple(phases.items()))
    sample = m.registry.get_sample_value
    family = "contraflow_pipeline_batch_phase_seconds_total"
    assert sample(family, {"flow": "f", "pipeline": "p", "phase": "planning"}) == pytest.approx(0.5)
    assert sample(family, {"flow": "f", "pipeline": "p", "phase": "state_commit"}) == pytest.approx(0.8)


def progress_observing(observed: dict[str, Any]) -> dict[str, Any]:
    """A finished batch's progress (as Spark's JSON) with these observed metrics."""
    return {
        "id": "q",
        "runId": "r",
        "batchId": 3,
        "sources": [],
        "sink": {"numOutputRows": 7},
        "observedMetrics": observed,
        "durationMs": {"triggerExecution": 100},
    }


def test_events_shuffled_from_the_observed_metric() -> None:
    """A stateful query's observed shuffle count becomes the `shuffled` direction; a stateless
    query's progress has none and adds nothing."""
    stateful = batch_progress(progress_observing({SHUFFLE_METRIC: {SHUFFLE_EVENTS: 40}}))
    stateless = batch_progress(progress_observing({}))
    assert (stateful.rows_shuffled, stateless.rows_shuffled) == (40, 0)
    m = RuntimeMetrics()
    for batch in (stateful, stateless):
        m.pipeline_batch("f", "p", 0.1, 100, 7, events_shuffled=batch.rows_shuffled)
    sample = m.registry.get_sample_value
    family = "contraflow_pipeline_events_total"
    assert sample(family, {"flow": "f", "pipeline": "p", "direction": "shuffled"}) == 40
    assert sample(family, {"flow": "f", "pipeline": "p", "direction": "in"}) == 200


def test_late_events_per_node_from_the_observed_metric() -> None:
    """The late counts a stateful query observes per node become the late-events counter; a node
    with no late event in the batch (Spark sums to null or 0) adds no series."""
    batch = batch_progress(
        progress_observing({LATE_METRIC: {"select_3": 2, "select_1": None, "select_2": 0}})
    )
    assert batch.late == (("select_3", 2),)
    m = RuntimeMetrics()
    for _ in range(2):
        m.pipeline_batch("f", "p", 0.1, 100, 7, late=batch.late)
    sample = m.registry.get_sample_value
    family = "contraflow_pipeline_late_events_total"
    assert sample(family, {"flow": "f", "pipeline": "p", "node": "select_3"}) == 4
    assert sample(family, {"flow": "f", "pipeline": "p", "node": "select_1"}) is None
