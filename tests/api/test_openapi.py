"""The OpenAPI document describes every route with real schemas."""

from __future__ import annotations

from typing import Any

import httpx


def resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    name = ref.rsplit("/", 1)[-1]
    resolved: dict[str, Any] = doc["components"]["schemas"][name]
    return resolved


def test_openapi_lists_every_route(client: httpx.Client) -> None:
    doc = client.get("/openapi.json").json()
    routes = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert routes == {
        ("/v1/version", "get"),
        ("/v1/status", "get"),
        ("/v1/flows", "get"),
        ("/v1/flows", "post"),
        ("/v1/flows/{flow_id}", "get"),
        ("/v1/flows/{flow_id}", "patch"),
        ("/v1/flows/{flow_id}", "delete"),
        ("/v1/flows/{flow_id}/connectors", "get"),
        ("/v1/flows/{flow_id}/connectors/{alias}", "get"),
        ("/v1/flows/{flow_id}/connectors/{alias}", "patch"),
        ("/metrics", "get"),
        ("/v1/events", "get"),
    }


def test_openapi_schemas(client: httpx.Client) -> None:
    doc = client.get("/openapi.json").json()
    flow = doc["paths"]["/v1/flows/{flow_id}"]
    ok = resolve(doc, flow["get"]["responses"]["200"]["content"]["application/json"]["schema"])
    assert set(ok["required"]) >= {"alias", "status", "connectors"}
    assert ok["properties"]["status"]["enum"] == [
        "initializing",
        "running",
        "paused",
        "draining",
        "stopped",
        "failed",
    ]
    not_found = resolve(doc, flow["get"]["responses"]["404"]["content"]["application/json"]["schema"])
    assert set(not_found["required"]) == {"code", "error"}
    patch_body = flow["patch"]["requestBody"]["content"]["application/json"]["schema"]
    assert patch_body["required"] == ["status"]
    assert patch_body["additionalProperties"] is False
    assert resolve(doc, patch_body["properties"]["status"])["enum"] == ["running", "paused"]
    connector = doc["paths"]["/v1/flows/{flow_id}/connectors/{alias}"]["get"]["responses"]["200"]
    schema = resolve(doc, connector["content"]["application/json"]["schema"])
    assert schema["properties"]["connectivity"]["enum"] == ["connected", "disconnected"]
    deploy = doc["paths"]["/v1/flows"]["post"]
    assert set(deploy["requestBody"]["content"]) == {"application/json", "text/plain"}
    assert deploy["requestBody"]["content"]["text/plain"]["schema"]["minLength"] == 1  # "" is a 400
    assert "201" in deploy["responses"]
    assert {"400", "409", "413", "415"} <= set(deploy["responses"])
    status = doc["paths"]["/v1/status"]["get"]["responses"]
    assert {"200", "503"} <= set(status)


def test_openapi_has_no_422(client: httpx.Client) -> None:
    """Validation errors are answered with 400, so no 422 (nor its schema) is documented."""
    doc = client.get("/openapi.json").json()
    codes = {code for ops in doc["paths"].values() for op in ops.values() for code in op["responses"]}
    assert "422" not in codes
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    assert "ErrorBody" in doc["components"]["schemas"]
