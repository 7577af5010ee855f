"""Issue 17: schemathesis generates requests for every operation of `/openapi.json` (valid
and invalid bodies, parameters, headers) against a real server; none may answer 5xx."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.api.conftest import InMemoryRuntime

EXAMPLES_PER_OPERATION = 40


@pytest.fixture
def openapi_schema(api_server: str, runtime: InMemoryRuntime) -> Iterator[schemathesis.BaseSchema]:
    yield schemathesis.openapi.from_url(f"{api_server}/openapi.json")


# the event stream never ends by itself (its arguments have their own tests)
schema = schemathesis.pytest.from_fixture("openapi_schema").exclude(path="/v1/events")


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
def test_no_operation_answers_5xx(case: schemathesis.Case) -> None:
    response = case.call(timeout=10)
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:300]}"
    )
