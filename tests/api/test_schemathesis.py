"""Issue 17: schemathesis generates requests for every operation of `/openapi.json` (valid
and invalid bodies, parameters, headers) against a real server; none may answer 5xx."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.api.conftest import InMemoryRuntime

EXAMPLES_PER_OPERATION = 40


@pytest.fixture
def openapi_schema(api_server: str, runtime: InMemoryRuntime) -> Iterator[schemathesis.BaseSchema]:
    yield schemathesis.openapi.from_url(f"{api_server}/openapi.json")


EVENTS = "/v1/events"  # a stream that never ends by itself: only its status is read
schema = schemathesis.pytest.from_fixture("openapi_schema")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
def test_no_operation_answers_5xx(case: schemathesis.Case, api_server: str) -> None:
    if case.path == EVENTS:
        status, text = streamed_status(case, api_server)
    else:
        response = case.call(timeout=10)
        status, text = response.status_code, response.text
    assert status < 500, f"{case.method} {case.formatted_path}: {status} {text[:300]}"


def streamed_status(case: schemathesis.Case, base_url: str) -> tuple[int, str]:
    """Send the generated request, read the status and at most the first chunk, hang up."""
    request = case.as_transport_kwargs(base_url=base_url)
    with (
        httpx.Client(timeout=10) as client,
        client.stream(
            request["method"],
            request["url"],
            params=request.get("params"),
            headers=request.get("headers"),
            cookies=request.get("cookies"),
        ) as response,
    ):
        first = next(response.iter_text(), "") if response.status_code >= 400 else ""
        return response.status_code, first
