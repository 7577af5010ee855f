"""Issue 17 #5: an SPU started with a token serves nothing before the handshake."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli_process import run_cli
from tests.spu.spu_harness import RawConnection, running_spu

from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import ApiKey, ErrorCode, SpuError, encode_frame

TOKEN = "s3cret-spu-token"


def test_a_connection_without_the_token_is_refused(tmp_path: Path) -> None:
    with running_spu(tmp_path, token=TOKEN) as spu:
        with SpuClient(spu.addr, token=TOKEN) as owner:
            owner.create_topic("precious")
        raw = RawConnection(spu.addr)
        assert raw.request(ApiKey.API_VERSIONS, {})["error"] == 0, "probes still work"
        answer = raw.request(ApiKey.DELETE_TOPIC, {"name": "precious"})
        assert answer["error"] == ErrorCode.AUTHENTICATION_FAILED and "token" in answer["message"]
        assert raw.closed_by_peer()
        wrong = RawConnection(spu.addr)
        assert (
            wrong.request(ApiKey.AUTHENTICATE, {"token": "guess"})["error"] == ErrorCode.AUTHENTICATION_FAILED
        )
        assert wrong.closed_by_peer()
        with SpuClient(spu.addr, token="guess") as intruder, pytest.raises(SpuError) as caught:
            intruder.delete_topic("precious")
        assert caught.value.code == ErrorCode.AUTHENTICATION_FAILED
        with SpuClient(spu.addr, token=TOKEN) as owner:
            assert owner.list_topics() == ["precious"], "nothing was deleted"


def test_pipelined_requests_after_the_handshake_are_served(tmp_path: Path) -> None:
    with running_spu(tmp_path, token=TOKEN) as spu:
        raw = RawConnection(spu.addr)
        raw.send(encode_frame(ApiKey.AUTHENTICATE, 0, 1, {"token": TOKEN}))
        raw.send(encode_frame(ApiKey.CREATE_TOPIC, 0, 2, {"name": "t", "config": {}}))
        answers = {}
        for _ in range(2):
            fields, _, cid = raw.receive()
            answers[cid] = fields["error"]
        assert answers == {1: 0, 2: 0}, "sent back to back, both served"


def test_the_cli_authenticates_with_contraflow_token(tmp_path: Path) -> None:
    with running_spu(tmp_path, token=TOKEN) as spu:
        refused = run_cli("topic", "create", "t", "--spu", spu.addr, clean=True)
        assert refused.returncode != 0 and "token" in refused.stderr
        assert "Traceback" not in refused.stderr
        created = run_cli("topic", "create", "t", "--spu", spu.addr, env={"CONTRAFLOW_TOKEN": TOKEN})
        assert created.returncode == 0, created.stderr


def test_spu_run_beyond_loopback_needs_a_token(tmp_path: Path) -> None:
    result = run_cli("spu", "run", "--data-dir", tmp_path, "--public-addr", "0.0.0.0:0", clean=True)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "refusing to serve the SPU on 0.0.0.0:0 without a token" in line and "--insecure" in line
