"""Property: no request body, media type or id makes the API answer 500.

Hypothesis drives a real server over HTTP with arbitrary JSON documents,
near-miss status patches, random bytes, mutated Troy sources and odd ids;
every answer must be a documented status with the `{"code", "error"}` shape
for errors.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contraflow.api.facade import STATES
from tests.api.conftest import InMemoryRuntime
from tests.api.test_deploy import ONE_FLOW

FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

# Bodies that get close to a valid status patch: the right key with odd values, extra keys, wrong nesting.
status_patches = st.fixed_dictionaries(
    {"status": st.sampled_from(STATES) | json_values},
    optional={"extra": json_values},
)

json_bodies = (json_values | status_patches).map(lambda v: json.dumps(v).encode())  # big ints too
raw_bodies = st.binary(max_size=200)

media_types = (
    st.none()
    | st.sampled_from(
        [
            "application/json",
            "application/json; charset=utf-8",
            "application/merge-patch+json",
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/octet-stream",
            "application/xml",
            "multipart/form-data; boundary=x",
        ]
    )
    | st.from_regex(r"[a-z]{1,8}/[a-z0-9.+-]{1,12}", fullmatch=True)
)


@st.composite
def mutated_troy(draw: st.DrawFn) -> str:
    """ONE_FLOW with a random span cut out and random text put in its place."""
    start = draw(st.integers(0, len(ONE_FLOW)))
    end = draw(st.integers(start, min(len(ONE_FLOW), start + 40)))
    insert = draw(
        st.text(alphabet=st.characters(codec="utf-8"), max_size=10)
        | st.sampled_from(["{", "end;", '"', "#{", "/"])
    )
    return ONE_FLOW[:start] + insert + ONE_FLOW[end:]


ids = st.text(min_size=1, max_size=20).filter(lambda s: s not in (".", ".."))

# 307: an id that decodes to "/" leaves a trailing slash, which Starlette redirects away.
ALLOWED = {200, 201, 307, 400, 404, 405, 409, 413, 415}


def check(response: httpx.Response) -> None:
    assert response.status_code in ALLOWED, (response.status_code, response.text)
    event(f"HTTP {response.status_code}")
    if response.status_code == 307:
        assert response.headers["location"]
        return
    body: Any = response.json()
    if response.status_code >= 400:
        assert body["code"] == response.status_code
        assert isinstance(body["error"], str) and body["error"]


def send(client: httpx.Client, method: str, url: str, body: bytes, media: str | None) -> httpx.Response:
    headers = {"content-type": media} if media is not None else {}
    return client.request(method, url, content=body, headers=headers)


@FUZZ
@given(body=json_bodies | raw_bodies, media=media_types, connector=st.booleans())
def test_patch_bodies_never_500(
    client: httpx.Client, runtime: InMemoryRuntime, body: bytes, media: str | None, connector: bool
) -> None:
    url = "/v1/flows/main/connectors/src" if connector else "/v1/flows/main"
    check(send(client, "PATCH", url, body, media))


@FUZZ
@given(
    body=json_bodies | raw_bodies | mutated_troy().map(str.encode),
    media=media_types,
)
def test_deploy_bodies_never_500(
    client: httpx.Client, runtime: InMemoryRuntime, body: bytes, media: str | None
) -> None:
    check(send(client, "POST", "/v1/flows", body, media))


@FUZZ
@given(
    source=mutated_troy(),
    as_json=st.booleans(),
)
def test_mutated_troy_never_500(
    client: httpx.Client, runtime: InMemoryRuntime, source: str, as_json: bool
) -> None:
    """Near-miss Troy sources reach the compiler: it must answer with a located error, not crash."""
    runtime.flows.pop("third", None)
    if as_json:
        response = client.post("/v1/flows", json={"troy": source, "name": "fuzz.troy"})
    else:
        response = client.post("/v1/flows", content=source.encode(), headers={"content-type": "text/plain"})
    check(response)
    if response.status_code == 400 and "errors" in response.json():
        for detail in response.json()["errors"]:
            assert detail["line"] >= 1 and detail["column"] >= 1


@FUZZ
@given(flow=ids, connector=ids, method=st.sampled_from(["GET", "PATCH", "DELETE", "PUT", "POST"]))
def test_odd_ids_never_500(
    client: httpx.Client, runtime: InMemoryRuntime, flow: str, connector: str, method: str
) -> None:
    body = b'{"status": "paused"}'
    for url in (
        f"/v1/flows/{quote(flow, safe='')}",
        f"/v1/flows/{quote(flow, safe='')}/connectors/{quote(connector, safe='')}",
    ):
        check(send(client, method, url, body, "application/json"))
