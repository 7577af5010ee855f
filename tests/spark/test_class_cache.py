"""The class-data archive's life: the first run creates it under its own name, others start without
while it is being written, then every run maps the settled archive (real files, real clocks)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from contraflow.spark.class_cache import SETTLED_S, archive_key, existing_archive, java_options


def test_first_run_creates_later_runs_wait_then_share(tmp_path: Path) -> None:
    key = archive_key("17.0.15")
    first = java_options("17.0.15", tmp_path)
    assert first == f"-XX:ArchiveClassesAtExit={tmp_path / f'spark-{key}.{os.getpid()}.jsa'}"
    assert java_options("17.0.15", tmp_path) == ""  # another run while the first one's JVM runs

    written = tmp_path / f"spark-{key}.{os.getpid()}.jsa"
    written.write_bytes(b"archive")  # what the first JVM writes as it exits
    assert java_options("17.0.15", tmp_path) == ""  # still being written, maybe
    settled = time.time() - SETTLED_S - 1
    os.utime(written, (settled, settled))
    shared = tmp_path / f"spark-{key}.jsa"
    assert java_options("17.0.15", tmp_path) == f"-XX:SharedArchiveFile={shared}"
    assert shared.read_bytes() == b"archive" and not written.exists()
    assert java_options("17.0.15", tmp_path) == f"-XX:SharedArchiveFile={shared}"
    extra = tmp_path / f"spark-{key}.99999.jsa"  # a second run's archive, written at the same time
    extra.write_bytes(b"another")
    os.utime(extra, (settled, settled))
    assert java_options("17.0.15", tmp_path) == f"-XX:SharedArchiveFile={shared}"
    assert not extra.exists() and shared.read_bytes() == b"archive"


def test_another_java_gets_its_own_archive(tmp_path: Path) -> None:
    assert archive_key("17.0.15") != archive_key("21.0.2")
    (tmp_path / f"spark-{archive_key('17.0.15')}.jsa").write_bytes(b"for 17")
    assert java_options("21.0.2", tmp_path).startswith("-XX:ArchiveClassesAtExit=")


def test_a_dead_creators_claim_expires(tmp_path: Path) -> None:
    java_options("17.0.15", tmp_path)
    marker = tmp_path / f"spark-{archive_key('17.0.15')}.creating"
    old = time.time() - 3600
    os.utime(marker, (old, old))  # its JVM was killed before it could write anything
    assert java_options("17.0.15", tmp_path).startswith("-XX:ArchiveClassesAtExit=")


def test_it_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTRAFLOW_JVM_CDS", "0")
    assert java_options("17.0.15", tmp_path) == ""
    assert not list(tmp_path.iterdir())


def test_other_jvms_only_ever_map_the_drivers_archive(tmp_path: Path) -> None:
    """A standalone cluster's JVMs use the archive once a driver made it, and never claim its
    creation (they would write a master's classes under the driver's name)."""
    assert existing_archive("17.0.15", tmp_path) is None
    assert not list(tmp_path.iterdir())
    assert java_options("17.0.15", tmp_path).startswith("-XX:ArchiveClassesAtExit=")  # a driver may
    shared = tmp_path / f"spark-{archive_key('17.0.15')}.jsa"
    shared.write_bytes(b"archive")
    assert existing_archive("17.0.15", tmp_path) == shared
