"""POST /v1/flows deploys Troy source; compile errors come back located, with caret and hint."""

from __future__ import annotations

import httpx
import pytest

from contraflow.api import app
from contraflow.api.bodies import MAX_SOURCE_BYTES
from contraflow.lang.nesting import MAX_NESTING
from tests.api.conftest import InMemoryRuntime
from tests.api.test_routes import assert_error

ONE_FLOW = """
define flow echo
flow
  define connector io from stdio
  with codec = "json" end;
  define pipeline pass
  pipeline
    select event from in into out;
  end;
  create connector io;
  create pipeline pass;
  connect /connector/io to /pipeline/pass;
  connect /pipeline/pass to /connector/io;
end;
deploy flow third from echo;
"""

# `slect` on line 8: a syntax error with a known position.
BROKEN = ONE_FLOW.replace("    select event from in into out;", "    slect event from in into out;")


def test_deploy_text_plain(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    r = client.post("/v1/flows", content=ONE_FLOW, headers={"content-type": "text/plain"})
    assert r.status_code == 201, r.text
    assert r.json() == {"flows": ["third"]}
    flow = client.get("/v1/flows/third").json()
    assert flow["status"] == "running"
    assert flow["connectors"] == ["io"]
    assert flow["definition"] == "echo"
    assert runtime.changes == [("deploy", "third")]


def test_deploy_json(client: httpx.Client) -> None:
    r = client.post("/v1/flows", json={"troy": ONE_FLOW, "name": "echo.troy"})
    assert r.status_code == 201
    assert r.json() == {"flows": ["third"]}


def test_deploy_with_curl_data_binary(client: httpx.Client) -> None:
    """`curl --data-binary @flow.troy` sends application/x-www-form-urlencoded."""
    r = client.post(
        "/v1/flows", content=ONE_FLOW.encode(), headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert r.status_code == 201


def test_deploy_several_flows(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    runtime.flows.clear()
    from tests.api.conftest import TWO_FLOWS

    r = client.post("/v1/flows", content=TWO_FLOWS)
    assert r.status_code == 201
    assert r.json() == {"flows": ["main", "second"]}


def test_compile_error_is_400_with_position(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    r = client.post("/v1/flows", json={"troy": BROKEN, "name": "echo.troy"})
    assert r.status_code == 400
    body = r.json()
    assert body["code"] == 400
    line = BROKEN.splitlines().index("    slect event from in into out;") + 1
    assert body["error"].startswith(f"echo.troy:{line}:")
    assert "slect event from in into out;" in body["error"]
    assert "^" in body["error"]
    [detail] = body["errors"]
    assert detail["file"] == "echo.troy"
    assert detail["line"] == line
    assert detail["column"] >= 1
    assert detail["message"]
    assert "third" not in runtime.flows


def test_text_compile_error_is_named_api(client: httpx.Client) -> None:
    r = client.post("/v1/flows", content=BROKEN, headers={"content-type": "text/plain"})
    assert r.status_code == 400
    assert r.json()["error"].startswith("<api>:")


def test_deploying_an_existing_flow_id_is_409(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    assert client.post("/v1/flows", content=ONE_FLOW).status_code == 201
    assert_error(client.post("/v1/flows", content=ONE_FLOW), 409, "flow 'third' is already deployed")


@pytest.mark.parametrize(
    ("body", "media", "code", "fragment"),
    [
        (b"", "text/plain", 400, "no Troy source"),
        (b"  \n", "text/plain", 400, "no Troy source"),
        (b"\xff\xfe", "text/plain", 400, "not valid UTF-8"),
        (b'{"troy": 1}', "application/json", 400, "troy: Input should be a valid string"),
        (b'{"name": "x"}', "application/json", 400, "troy: Field required"),
        (b'{"troy": "x", "nme": "x"}', "application/json", 400, "nme: Extra inputs are not permitted"),
        (b'{"troy": ', "application/json", 400, "invalid JSON"),
        (b"[1]", "application/json", 400, "expected a JSON object"),
        (b'{"troy": ""}', "application/json", 400, "no Troy source"),
        (b"deploy", "application/pdf", 415, "unsupported media type 'application/pdf'"),
    ],
)
def test_bad_deploy_bodies(client: httpx.Client, body: bytes, media: str, code: int, fragment: str) -> None:
    r = client.post("/v1/flows", content=body, headers={"content-type": media})
    assert_error(r, code, fragment)


def test_oversized_source_is_413(client: httpx.Client) -> None:
    r = client.post(
        "/v1/flows", content=b"#" * (MAX_SOURCE_BYTES + 1), headers={"content-type": "text/plain"}
    )
    assert_error(r, 413)


def deeply_nested_flow(depth: int) -> str:
    record = '{"a": ' * depth + "1" + "}" * depth
    return ONE_FLOW.replace(
        "define pipeline",
        f"define pipeline deep\n  args\n    x = {record}\n  pipeline\n    select event from in into out;\n  end;\n  define pipeline",
        1,
    )


def test_a_record_nested_300_deep_is_a_400_with_a_position(client: httpx.Client) -> None:
    """Issue 17 #3: it was a RecursionError and a 500."""
    source = deeply_nested_flow(300)
    r = client.post("/v1/flows", json={"troy": source, "name": "deep.troy"})
    assert r.status_code == 400, r.text
    [detail] = r.json()["errors"]
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "x = {" in text)
    assert (detail["file"], detail["line"]) == ("deep.troy", line)
    assert detail["column"] > 1 and "nested too deeply" in detail["message"]


def test_nested_parentheses_are_refused_like_records(client: httpx.Client, runtime: InMemoryRuntime) -> None:
    """Issue 32: 20,000 nested parentheses in a pipeline parsed for seconds, then deployed (201)."""
    deep = "(" * 20_000 + "event" + ")" * 20_000
    source = ONE_FLOW.replace("select event from", f"select {deep} from")
    r = client.post("/v1/flows", json={"troy": source, "name": "parens.troy"})
    assert r.status_code == 400, r.text
    [detail] = r.json()["errors"]
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "select (" in text)
    column = source.splitlines()[line - 1].index("(") + MAX_NESTING + 1
    assert (detail["file"], detail["line"], detail["column"]) == ("parens.troy", line, column)
    assert f"more than {MAX_NESTING} levels" in detail["message"]
    assert "third" not in runtime.flows


def test_parsing_past_the_budget_is_a_400(client: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deploy's parse stops at its time budget (here none at all) with the place it reached."""
    monkeypatch.setattr(app, "DEPLOY_PARSE_BUDGET_S", 0.0)
    r = client.post("/v1/flows", json={"troy": ONE_FLOW, "name": "slow.troy"})
    assert r.status_code == 400, r.text
    [detail] = r.json()["errors"]
    assert detail["file"] == "slow.troy" and detail["line"] >= 1
    assert "longer than the 0 s budget" in detail["message"]
