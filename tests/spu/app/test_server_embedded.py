"""The embedded SPU building block: thread and child-process modes, readiness, failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from contraflow.errors import UserError
from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu, probe
from contraflow.spu.storage.errors import DataDirLockedError


def test_thread_mode_serves_until_stopped(tmp_path: Path) -> None:
    spu = EmbeddedSpu(tmp_path / "d")
    addr = spu.start()
    assert probe(addr) and probe(spu.private_addr)
    with SpuClient(addr) as client:
        client.create_topic("t")
        assert client.list_topics() == ["t"]
    spu.stop()
    assert not probe(addr)


def test_process_mode_stops_cleanly_and_its_data_reopens(tmp_path: Path) -> None:
    with EmbeddedSpu(tmp_path / "d", mode="process") as spu:
        assert spu.pid is not None
        with SpuClient(spu.addr) as client:
            client.create_topic("t")
            client.produce("t", 0, [b"kept"])
        addr = spu.addr
    assert not probe(addr)
    assert (tmp_path / "d" / "topics" / "t" / "0" / ".clean-shutdown").exists()  # SIGTERM, not SIGKILL
    with EmbeddedSpu(tmp_path / "d") as again, SpuClient(again.addr) as client:
        assert [r.value for b in client.fetch("t", 0, 0).batches for r in b.records()] == [b"kept"]


def test_a_second_spu_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    with EmbeddedSpu(tmp_path / "d"):
        with pytest.raises(DataDirLockedError):
            EmbeddedSpu(tmp_path / "d").start()
        with pytest.raises(UserError, match="did not start"):
            EmbeddedSpu(tmp_path / "d", mode="process", ready_timeout_s=20).start()
