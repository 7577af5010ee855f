"""Old module paths keep importing the moved modules (contraflow.moved)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from contraflow.moved import MOVED
from tests.cli_process import child_env


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_old_path_is_the_moved_module(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_from_import_of_a_name_through_an_old_path_in_a_fresh_interpreter() -> None:
    code = (
        "from contraflow.codecs.compression import StreamDecompressor\n"
        "from contraflow.codecs.processors.compress import StreamDecompressor as now\n"
        "assert StreamDecompressor is now\n"
    )
    subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code], check=True, env=child_env())


def test_unknown_paths_still_fail() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("contraflow.pipeline.no_such_module")
