"""The session builder's local Python worker launcher (see `session.python_worker_launcher`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark

from contraflow.spark.session import package_zip, python_worker_launcher

BUNDLED = Path(pyspark.__file__).resolve().parent / "python" / "lib"


def test_the_launcher_drops_only_sparks_bundled_zips_from_pythonpath(tmp_path: Path) -> None:
    zips = sorted(str(p) for p in BUNDLED.glob("*.zip"))
    assert zips, "pyspark ships its zips under python/lib"
    launcher = python_worker_launcher(tmp_path)
    assert launcher is not None and os.access(launcher, os.X_OK)
    path = os.pathsep.join(["/first", zips[0], "/with space/second", *zips[1:], "/last"])
    printed = subprocess.run(
        [launcher, "-c", "import os, sys; print(os.environ['PYTHONPATH']); print(sys.executable)"],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert printed[0] == os.pathsep.join(["/first", "/with space/second", "/last"])
    assert Path(printed[1]).resolve() == Path(sys.executable).resolve()
    assert python_worker_launcher(tmp_path) == launcher  # rewritten only when it changes


def test_no_launcher_when_spark_home_is_another_spark(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert python_worker_launcher(tmp_path) is None


def where_pyspark_comes_from(batches):
    import pyarrow as pa
    import pyspark as imported

    for _ in batches:
        yield pa.RecordBatch.from_pylist([{"path": imported.__file__}])


def test_local_workers_import_the_installed_pyspark_not_the_zip(spark) -> None:
    paths = {r.path for r in spark.range(1).mapInArrow(where_pyspark_comes_from, "path string").collect()}
    assert paths == {pyspark.__file__}


def modules_already_there(batches):  # runs in a Python worker: what it found imported before its task
    import pyarrow as pa

    preloaded = ",".join(sorted(m for m in PRELOADED if m in sys.modules))
    for _ in batches:
        yield pa.RecordBatch.from_pydict({"modules": [preloaded]})


PRELOADED = (
    "contraflow.pipeline.spark.stateful",
    "contraflow.spark.datasource",
    "pyspark.sql.pandas.serializers",
)


def test_local_workers_fork_with_contraflows_task_code_imported(spark) -> None:
    found = {r.modules for r in spark.range(1).mapInArrow(modules_already_there, "modules string").collect()}
    assert found == {",".join(sorted(PRELOADED))}


def test_executors_import_every_module_of_the_shipped_zip(tmp_path: Path) -> None:
    """Cluster executors import contraflow from the zip `package_zip` ships, namespace
    directories (contraflow.lang.trickle, .troy) included: a stateful pipeline needs them."""
    shipped = package_zip(tmp_path)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import contraflow.lang.trickle.parser as t, contraflow.lang.troy.compiler as c;"
        "print(t.__file__); print(c.__file__)"
    )
    printed = subprocess.run(
        [sys.executable, "-c", code, str(shipped)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert all(line.startswith(str(shipped)) for line in printed) and len(printed) == 2
