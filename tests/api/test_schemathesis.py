"""Issue 17: schemathesis generates requests for every operation of `/openapi.json` (valid
and invalid bodies, parameters, headers) against a real server; none may answer 5xx.
Issue 32: and every answer passes all of schemathesis's checks (`--checks all`: documented
status codes, content types and bodies, valid data accepted, invalid data refused), with
the exceptions the repository's schemathesis.toml states and explains."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS, load_all_checks

from tests.api.conftest import InMemoryRuntime

EXAMPLES_PER_OPERATION = 25


@pytest.fixture
def openapi_schema(api_server: str, runtime: InMemoryRuntime) -> Iterator[schemathesis.BaseSchema]:
    yield schemathesis.openapi.from_url(f"{api_server}/openapi.json")


load_all_checks()
ALL_CHECKS = CHECKS.get_all()

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
        response = case.call_and_validate(checks=ALL_CHECKS, timeout=10)
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
