"""Control values: published by one client, read by another, kept across SPU restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.protocol.errors import SpuError


def test_values_cross_clients_and_survive_restart(tmp_path: Path) -> None:
    with (
        EmbeddedSpu(tmp_path, mode="thread") as spu,
        SpuClient(spu.addr) as writer,
        SpuClient(spu.addr) as reader,
    ):
        assert reader.get_control("probe/q/in") is None
        writer.set_control("probe/q/in", 0)
        assert reader.get_control("probe/q/in") == 0
        writer.set_control("probe/flow/sink", {"open": True, "reason": "connection refused"})
        writer.set_control("probe/q/in", 25)
    with EmbeddedSpu(tmp_path, mode="thread") as spu, SpuClient(spu.addr) as reader:
        assert reader.get_control("probe/q/in") == 25
        assert reader.get_control("probe/flow/sink") == {"open": True, "reason": "connection refused"}
        reader.set_control("probe/q/in", None)
        assert reader.get_control("probe/q/in") is None


def test_oversized_value_is_an_error_response(tmp_path: Path) -> None:
    with EmbeddedSpu(tmp_path, mode="thread") as spu, SpuClient(spu.addr) as client:
        with pytest.raises(SpuError, match="at most"):
            client.set_control("big", "x" * 70_000)
        client.set_control("small", 1)  # the connection still serves
        assert client.get_control("small") == 1
