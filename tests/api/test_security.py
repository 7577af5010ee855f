"""Issue 17 #5: the API asks for the token, and flows deployed through it stay inside the
allowed directories (a real server on 127.0.0.1, the real Troy compiler)."""

from __future__ import annotations

import ssl
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from contraflow.api.paths import PathPolicy
from contraflow.errors import UserError
from contraflow.security import check_exposure
from tests.api.conftest import InMemoryRuntime, ServerThread
from tests.cli_process import run_cli, self_signed_certificate

TOKEN = "t0ken-for-tests"

COPY_FLOW = """
define flow copy
flow
  define connector src from file
  with codec = "string", config = {{"path": "{src}", "mode": "read"}}
  end;
  define connector dst from file
  with codec = "string", config = {{"path": "{dst}", "mode": "truncate"}}
  end;
  define pipeline pass
  pipeline
    select event from in into out;
  end;
  create connector src;
  create connector dst;
  create pipeline pass;
  connect /connector/src to /pipeline/pass;
  connect /pipeline/pass to /connector/dst;
end;
deploy flow copy;
"""


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[str, InMemoryRuntime, Path]]:
    runtime = InMemoryRuntime()
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    thread = ServerThread(runtime, token=TOKEN, allowed_paths=PathPolicy([allowed], base=allowed))
    address = thread.start()
    try:
        yield f"http://{address}", runtime, allowed
    finally:
        thread.stop()


def test_requests_without_the_token_get_401(secured: tuple[str, InMemoryRuntime, Path]) -> None:
    url, _, _ = secured
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        for path in ("/v1/flows", "/openapi.json", "/metrics", "/"):
            r = httpx.get(url + path, headers=headers, timeout=10)
            assert r.status_code == 401, (path, headers)
            assert r.headers["www-authenticate"] == "Bearer"
            assert r.json()["code"] == 401 and "token" in r.json()["error"]
    r = httpx.post(url + "/v1/flows", content=COPY_FLOW, timeout=10)
    assert r.status_code == 401
    ok = httpx.get(url + "/v1/flows", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert ok.status_code == 200


def test_deploy_outside_the_allowed_paths_is_403(secured: tuple[str, InMemoryRuntime, Path]) -> None:
    url, runtime, allowed = secured
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for src, dst in (("/etc/hostname", "out.txt"), ("in.txt", "../outside.txt"), ("in.txt", "/tmp/x.txt")):
        r = httpx.post(
            url + "/v1/flows", content=COPY_FLOW.format(src=src, dst=dst), headers=auth, timeout=10
        )
        assert r.status_code == 403, r.text
        refused = src if src.startswith("/") else dst
        assert refused in r.json()["error"] and "--allow-path" in r.json()["error"]
        assert "copy" not in runtime.flows
    (allowed / "link").symlink_to("/etc")
    r = httpx.post(
        url + "/v1/flows", content=COPY_FLOW.format(src="link/hostname", dst="o"), headers=auth, timeout=10
    )
    assert r.status_code == 403, "a symlink does not lead out"
    inside = COPY_FLOW.format(src="in.txt", dst=str(allowed / "sub" / "out.txt"))
    r = httpx.post(url + "/v1/flows", content=inside, headers=auth, timeout=10)
    assert r.status_code == 201, r.text
    assert "copy" in runtime.flows


# A flow's Python code planted in an allowed directory (a `file` sink of an earlier deploy could
# write it there): the deploy must be refused before it is imported.
PLANTED_CONNECTOR = (
    'from file\n  with codec = "string", config = {"path": "out.txt", "mode": "truncate"}',
    'from python\n  with codec = "string", config = {"class": "api_planted:Sink"}',
)
PLANTED_OPERATOR = (
    "    select event from in into out;",
    '    define operator score from python::map with module = "api_planted", function = "f" end;\n'
    "    create operator score;\n"
    "    select event from in into score;\n"
    "    select event from score into out;",
)


@pytest.mark.parametrize(
    ("change", "named"), [(PLANTED_CONNECTOR, "'dst'"), (PLANTED_OPERATOR, "score (python::map)")]
)
def test_python_code_deployed_over_the_api_is_refused_and_never_imported(
    secured: tuple[str, InMemoryRuntime, Path],
    monkeypatch: pytest.MonkeyPatch,
    change: tuple[str, str],
    named: str,
) -> None:
    """A `python` connector's class and a `python::map`'s module are both the user's code."""
    url, runtime, allowed = secured
    (allowed / "api_planted.py").write_text("raise SystemExit('imported')\n")
    monkeypatch.setenv("CONTRAFLOW_PATH", str(allowed))
    flow = COPY_FLOW.format(src="in.txt", dst="out.txt").replace(*change)
    assert "api_planted" in flow
    r = httpx.post(url + "/v1/flows", content=flow, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "may not run Python code (connectors or operators) while --allow-path" in error and named in error
    assert "api_planted" not in sys.modules and "copy" not in runtime.flows


def test_listening_beyond_loopback_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    flow = tmp_path / "f.troy"
    flow.write_text(COPY_FLOW.format(src="a", dst="b"))
    result = run_cli("run", flow, "--api", "0.0.0.0:9898", clean=True, cwd=tmp_path)
    assert result.returncode != 0
    [line] = result.stderr.strip().splitlines()
    assert "refusing to serve the REST API on 0.0.0.0:9898 without a token" in line and "--insecure" in line


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "::", "spu.example"])
def test_insecure_lets_a_tokenless_listener_past_loopback_with_a_warning(
    host: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The check itself, for addresses tests may not listen on (they bind loopback only)."""
    with pytest.raises(UserError, match="without a token"):
        check_exposure(host, f"{host}:1", "the SPU", None, insecure=False)
    check_exposure(host, f"{host}:1", "the SPU", TOKEN, insecure=False)
    assert not caplog.records
    with caplog.at_level("WARNING"):
        check_exposure(host, f"{host}:1", "the SPU", None, insecure=True)
    [warning] = caplog.records
    assert warning.levelname == "WARNING" and "without a token (--insecure)" in warning.getMessage()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]"])
def test_loopback_needs_no_token(host: str) -> None:
    check_exposure(host, f"{host}:1", "the SPU", None, insecure=False)


def test_the_api_over_tls_still_asks_for_the_token(tmp_path: Path) -> None:
    cert, key = self_signed_certificate(tmp_path)
    thread = ServerThread(InMemoryRuntime(), tls=(str(cert), str(key)), token=TOKEN)
    address = thread.start()
    try:
        url = f"https://{address}/v1/flows"
        trust = ssl.create_default_context(cafile=str(cert))
        assert httpx.get(url, verify=trust, timeout=10).status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(url, verify=trust, headers=auth, timeout=10).status_code == 200
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://{address}/v1/flows", headers=auth, timeout=10)
    finally:
        thread.stop()
