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


MAPPED_BLOCKS = """
import ctypes, sys
from contraflow.heap import keep_freed_heap

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "keep":
    assert keep_freed_heap()
before = libc.mallinfo2().hblks  # blocks mapped for themselves rather than taken from the heap
buffer = bytearray(4 << 20)  # a file pull's worth of memory
print(libc.mallinfo2().hblks - before)
"""


@pytest.mark.parametrize("keep, mapped", [("keep", 0), ("default", 1)])
def test_a_pulls_buffer_comes_from_the_heap_not_a_mapping_of_its_own(monkeypatch, keep, mapped) -> None:
    """Raising the trim threshold by hand freezes glibc's mmap threshold at 128 KiB; keep_freed_heap
    raises that too, so MiB-sized buffers are reused from the heap instead of mapped anew each time."""
    monkeypatch.delenv(TRIM_THRESHOLD_ENV, raising=False)
    child = subprocess.run(
        [sys.executable, "-c", MAPPED_BLOCKS, keep], capture_output=True, text=True, check=True
    )
    assert int(child.stdout) == mapped
