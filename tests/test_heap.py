"""The C heap setting contraflow gives its processes (contraflow.heap)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from contraflow.heap import TRIM_THRESHOLD_BYTES, TRIM_THRESHOLD_ENV, heap_environment, keep_freed_heap
from contraflow.spark.session import base_conf


def test_keep_freed_heap_sets_this_process_and_its_children(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(TRIM_THRESHOLD_ENV, raising=False)
    assert keep_freed_heap() is True  # glibc on this machine: mallopt accepted the threshold
    child = subprocess.run(
        [sys.executable, "-c", f"import os; print(os.environ[{TRIM_THRESHOLD_ENV!r}])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(child.stdout) == TRIM_THRESHOLD_BYTES


def test_a_value_the_user_set_is_left_alone(monkeypatch) -> None:
    monkeypatch.setenv(TRIM_THRESHOLD_ENV, "4096")
    assert keep_freed_heap() is False
    import os

    assert os.environ[TRIM_THRESHOLD_ENV] == "4096"


@pytest.mark.parametrize("master", ["local[2]", "spark://127.0.0.1:7077"])
def test_spark_executors_python_workers_get_the_setting(master: str, tmp_path) -> None:
    conf = base_conf(master, tmp_path)
    for name, value in heap_environment().items():
        assert conf[f"spark.executorEnv.{name}"] == value
