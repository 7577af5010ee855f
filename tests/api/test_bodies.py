"""Bad requests: every one is a 4xx with `{"code", "error"}`, never a 500."""

from __future__ import annotations

import httpx
import pytest

from contraflow.api.bodies import MAX_PATCH_BYTES
from contraflow.api.facade import SparkUnavailable
from tests.api.conftest import TWO_FLOWS, InMemoryRuntime
from tests.api.test_routes import assert_error

PATCH_URLS = ["/v1/flows/main", "/v1/flows/main/connectors/src"]


@pytest.mark.parametrize("url", PATCH_URLS)
@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b'{"status": "paused"', "invalid JSON"),
        (b"status=paused", "invalid JSON"),
        (b"", "request body is empty"),
        (b"   ", "request body is empty"),
        (b"[]", "expected a JSON object, got list"),
        (b'"paused"', "expected a JSON object, got str"),
        (b"null", "expected a JSON object, got NoneType"),
        (b"{}", "status: Field required"),
        (b'{"status": 1}', "status: Input should be"),
        (b'{"status": null}', "status: Input should be"),
        (b'{"status": ["paused"]}', "status: Input should be"),
        (b'{"status": "PAUSED"}', "status: Input should be"),
        (b'{"status": "bogus"}', "'running'"),
        (b'{"status": "paused", "extra": 1}', "extra: Extra inputs are not permitted"),
        (b"\xff\xfe{", "invalid JSON"),
    ],
)
def test_bad_patch_bodies_are_400(
    client: httpx.Client, runtime: InMemoryRuntime, url: str, body: bytes, fragment: str
) -> None:
    r = client.patch(url, content=body, headers={"content-type": "application/json"})
    assert_error(r, 400, fragment)
    assert runtime.changes == []


@pytest.mark.parametrize("media", ["application/xml", "multipart/form-data; boundary=x", "image/png"])
def test_patch_with_unsupported_media_type_is_415(client: httpx.Client, media: str) -> None:
    r = client.patch("/v1/flows/main", content=b'{"status":"paused"}', headers={"content-type": media})
    assert_error(r, 415, "unsupported media type")


def test_patch_json_with_charset_parameter(client: httpx.Client) -> None:
    r = client.patch(
        "/v1/flows/main",
        content=b'{"status":"paused"}',
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert r.status_code == 200


def test_oversized_patch_body_is_413(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    body = b'{"status": "paused", "pad": "' + b"x" * MAX_PATCH_BYTES + b'"}'
    assert_error(client.patch("/v1/flows/main", content=body), 413, f"larger than {MAX_PATCH_BYTES} bytes")


def test_oversized_chunked_patch_body_is_413(client: httpx.Client) -> None:
    """No Content-Length: the limit is enforced while streaming."""

    def chunks() -> object:
        for _ in range(MAX_PATCH_BYTES // 1024 + 2):
            yield b" " * 1024

    r = client.patch("/v1/flows/main", content=chunks())  # type: ignore[arg-type]
    assert_error(r, 413)


def test_unknown_route_is_json_404(client: httpx.Client) -> None:
    assert_error(client.get("/v1/nope"), 404, "Not Found")
    assert_error(client.get("/v2/flows"), 404)  # `/` is the live page (test_page_files)


def test_wrong_method_is_json_405_with_allow(client: httpx.Client) -> None:
    r = client.put("/v1/flows/main", json={"status": "paused"})
    assert_error(r, 405, "Method Not Allowed")
    assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "PATCH", "DELETE"}
    assert_error(client.post("/v1/version"), 405)
    assert_error(client.delete("/v1/flows"), 405)


def test_a_deployment_spark_cannot_run_is_a_json_503(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    """Not the request's fault: the same source deploys once Spark runs."""
    runtime.fail_with = SparkUnavailable("Spark did not start: no Java")
    r = client.post("/v1/flows", content=TWO_FLOWS, headers={"content-type": "text/plain"})
    assert_error(r, 503, "Spark did not start: no Java")


def test_runtime_bug_is_a_json_500(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    """Not user input: a crash inside the runtime still answers in the error shape."""
    runtime.fail_with = RuntimeError("boom")
    r = client.get("/v1/flows")
    assert_error(r, 500, "internal error: RuntimeError")
