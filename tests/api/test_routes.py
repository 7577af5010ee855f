"""Tremor's /v1 routes: shapes, status codes and PATCH semantics over real HTTP."""

from __future__ import annotations

import httpx
import pytest

import contraflow
from tests.api.conftest import InMemoryRuntime


def assert_error(response: httpx.Response, code: int, *fragments: str) -> None:
    assert response.status_code == code, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["code"] == code
    assert set(body) == {"code", "error"}
    for fragment in fragments:
        assert fragment in body["error"]


def test_version(client: httpx.Client) -> None:
    r = client.get("/v1/version")
    assert r.status_code == 200
    assert r.json() == {"version": contraflow.__version__, "debug": False}


def test_status_all_running(client: httpx.Client) -> None:
    r = client.get("/v1/status")
    assert r.status_code == 200
    assert r.json() == {
        "all_running": True,
        "num_flows": 2,
        "flows": {"running": 2},
        "flow_status": {"main": "running", "second": "running"},
        "spark": "running",
    }


def test_status_paused_is_healthy_but_not_all_running(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    runtime.set_state("second", "paused")
    r = client.get("/v1/status")
    assert r.status_code == 200
    body = r.json()
    assert body["all_running"] is False
    assert body["flows"] == {"running": 1, "paused": 1}


@pytest.mark.parametrize("state", ["failed", "stopped", "draining"])
def test_status_503_when_a_flow_is_not_running_or_paused(
    client: httpx.Client, runtime: InMemoryRuntime, state: str
) -> None:
    runtime.set_state("main", state)  # type: ignore[arg-type]
    r = client.get("/v1/status")
    assert r.status_code == 503
    assert r.json()["flow_status"] == {"main": state, "second": "running"}


def test_status_without_flows_while_spark_starts(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    """`contraflow run`'s API answers while Spark starts; the flows that wait for it are not deployed yet."""
    runtime.flows.clear()
    runtime.spark = "starting"
    r = client.get("/v1/status")
    assert r.status_code == 200
    assert r.json() == {
        "all_running": True,
        "num_flows": 0,
        "flows": {},
        "flow_status": {},
        "spark": "starting",
    }


def test_list_flows(client: httpx.Client) -> None:
    r = client.get("/v1/flows")
    assert r.status_code == 200
    assert r.json() == [
        {
            "alias": "main",
            "status": "running",
            "connectors": ["src", "dst"],
            "definition": "ingest",
            "pipelines": ["wrap"],
            "priority": "normal",
            "breakers": {
                "src": {"state": "closed", "reason": None},
                "dst": {"state": "closed", "reason": None},
            },
            "channels": [],
        },
        {
            "alias": "second",
            "status": "running",
            "connectors": ["src", "dst"],
            "definition": "ingest",
            "pipelines": ["wrap"],
            "priority": "normal",
            "breakers": {
                "src": {"state": "closed", "reason": None},
                "dst": {"state": "closed", "reason": None},
            },
            "channels": [],
        },
    ]


def test_get_flow(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    runtime.set_state("second", "paused")
    r = client.get("/v1/flows/second")
    assert r.status_code == 200
    assert r.json()["alias"] == "second"
    assert r.json()["status"] == "paused"


def test_unknown_flow_is_404(client: httpx.Client) -> None:
    assert_error(client.get("/v1/flows/nope"), 404, "flow 'nope' not found")
    assert_error(client.get("/v1/flows/nope/connectors"), 404, "'nope'")
    assert_error(client.get("/v1/flows/nope/connectors/src"), 404, "'nope'")
    assert_error(client.patch("/v1/flows/nope", json={"status": "paused"}), 404)
    assert_error(client.patch("/v1/flows/nope/connectors/src", json={"status": "paused"}), 404)
    assert_error(client.delete("/v1/flows/nope"), 404)


def test_list_connectors(client: httpx.Client) -> None:
    r = client.get("/v1/flows/main/connectors")
    assert r.status_code == 200
    assert r.json() == [
        {
            "alias": "src",
            "kind": "file",
            "status": "running",
            "connectivity": "connected",
            "pipelines": {"out": [{"alias": "wrap", "port": "in"}]},
            "breaker": "closed",
            "breaker_reason": None,
            "held_by": [],
        },
        {
            "alias": "dst",
            "kind": "file",
            "status": "running",
            "connectivity": "connected",
            "pipelines": {"in": [{"alias": "wrap", "port": "out"}]},
            "breaker": "closed",
            "breaker_reason": None,
            "held_by": [],
        },
    ]


def test_get_connector_and_unknown_connector(client: httpx.Client) -> None:
    r = client.get("/v1/flows/main/connectors/dst")
    assert r.status_code == 200
    assert r.json()["alias"] == "dst"
    assert_error(
        client.get("/v1/flows/main/connectors/nope"), 404, "connector 'nope' not found in flow 'main'"
    )
    assert_error(client.patch("/v1/flows/main/connectors/nope", json={"status": "paused"}), 404)


def test_pause_and_resume_flow(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    r = client.patch("/v1/flows/main", json={"status": "paused"})
    assert r.status_code == 200
    assert r.json()["status"] == "paused"
    assert client.get("/v1/flows/main").json()["status"] == "paused"
    assert client.get("/v1/flows/second").json()["status"] == "running"
    r = client.patch("/v1/flows/main", json={"status": "running"})
    assert r.status_code == 200
    assert r.json()["status"] == "running"
    assert runtime.changes == [("flow", "main", "paused"), ("flow", "main", "running")]


@pytest.mark.parametrize("state", ["running", "paused"])
def test_patch_to_current_state_is_a_noop(client: httpx.Client, runtime: InMemoryRuntime, state: str) -> None:
    runtime.set_state("main", state)  # type: ignore[arg-type]
    r = client.patch("/v1/flows/main", json={"status": state})
    assert r.status_code == 200
    assert r.json()["status"] == state
    assert runtime.changes == []


@pytest.mark.parametrize(
    ("current", "desired"),
    [
        ("failed", "running"),
        ("stopped", "paused"),
        ("initializing", "paused"),
    ],
)
def test_patch_other_transitions_are_400(
    client: httpx.Client, runtime: InMemoryRuntime, current: str, desired: str
) -> None:
    runtime.set_state("main", current)  # type: ignore[arg-type]
    r = client.patch("/v1/flows/main", json={"status": desired})
    assert_error(r, 400, f"from {current} to {desired}", "flow 'main'")
    assert runtime.changes == []
    assert client.get("/v1/flows/main").json()["status"] == current


@pytest.mark.parametrize("desired", ["stopped", "draining", "failed", "initializing"])
def test_patch_asks_only_for_running_or_paused(
    client: httpx.Client, runtime: InMemoryRuntime, desired: str
) -> None:
    """Issue 32: the schema lists the two states a user may ask for, and so does the server."""
    r = client.patch("/v1/flows/main", json={"status": desired})
    assert_error(r, 400, "status: Input should be 'running' or 'paused'")
    assert runtime.changes == []


def test_pause_and_resume_one_connector(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    r = client.patch("/v1/flows/main/connectors/src", json={"status": "paused"})
    assert r.status_code == 200
    assert r.json()["status"] == "paused"
    assert r.json()["alias"] == "src"
    statuses = {c["alias"]: c["status"] for c in client.get("/v1/flows/main/connectors").json()}
    assert statuses == {"src": "paused", "dst": "running"}
    assert client.patch("/v1/flows/main/connectors/src", json={"status": "paused"}).status_code == 200
    assert (
        client.patch("/v1/flows/main/connectors/src", json={"status": "running"}).json()["status"]
        == "running"
    )
    assert runtime.changes == [
        ("connector", "main", "src", "paused"),
        ("connector", "main", "src", "running"),
    ]


def test_connector_invalid_transition(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    runtime.set_connector_state("main", "dst", "failed")
    r = client.patch("/v1/flows/main/connectors/dst", json={"status": "running"})
    assert_error(r, 400, "connector 'dst' of flow 'main' from failed to running")
    assert runtime.changes == []


def test_patch_with_curl_default_content_type(client: httpx.Client) -> None:
    """`curl -XPATCH URL -d '{"status":"paused"}'` sends application/x-www-form-urlencoded."""
    r = client.patch(
        "/v1/flows/main",
        content=b'{"status":"paused"}',
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200
    assert r.json()["status"] == "paused"


def test_patch_without_content_type(client: httpx.Client) -> None:
    r = client.patch("/v1/flows/main", content=b'{"status":"paused"}')
    assert r.status_code == 200


def test_undeploy(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    r = client.delete("/v1/flows/main")
    assert r.status_code == 200
    assert r.json()["alias"] == "main"
    assert r.json()["status"] == "stopped"
    assert_error(client.get("/v1/flows/main"), 404)
    assert [f["alias"] for f in client.get("/v1/flows").json()] == ["second"]
    assert runtime.changes == [("undeploy", "main")]


def test_trailing_slash_redirects(client: httpx.Client) -> None:
    r = client.get("/v1/flows/", follow_redirects=False)
    assert r.status_code == 307
    assert r.headers["location"].endswith("/v1/flows")
    assert client.get("/v1/flows/", follow_redirects=True).status_code == 200
