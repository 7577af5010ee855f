"""A stateful pipeline's state: where it lives, reading it as JSON, and seeding a fresh query with it.

The state is Spark's: each node's value state in the query's checkpoint
(RocksDB), so it survives restarts and crashes with no extra machinery.
Export reads it with Spark's state data source, which works on a live query's
checkpoint (it reads the last committed batch). Import writes the snapshot
next to a checkpoint that has no progress yet; the query's first batch feeds
it to `transformWithState` as its initial state, after which the checkpoint
owns it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from contraflow.errors import UserError
from contraflow.spark.checkpoint import has_progress, last_committed_batch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT = "contraflow.pipeline-state/1"
TIMER_PREFIX = "$"


def import_path(checkpoint: str | os.PathLike[str]) -> Path:
    path = Path(checkpoint)
    return path.with_name(path.name + ".import.json")


def export_state(spark: SparkSession, checkpoint: str | os.PathLike[str]) -> dict[str, Any]:
    """The pipeline's state as JSON: `{"format", "batch", "keys": {key: {node: state}}}`.

    Reads the last committed batch, so the query may keep running.
    """
    location = str(Path(checkpoint).resolve())
    batch = last_committed_batch(location)
    if batch is None:
        raise UserError(f"no committed state at {location}")
    keys: dict[str, dict[str, Any]] = {}
    for node in _value_states(spark, location):
        frame = spark.read.format("statestore").option("stateVarName", node).load(location)
        for row in frame.select("key.key", "value.json").collect():
            if row["json"] is not None:
                keys.setdefault(row["key"], {})[node] = orjson.loads(row["json"])
    return {"format": FORMAT, "batch": batch, "keys": keys}


def _value_states(spark: SparkSession, checkpoint: str) -> list[str]:
    """The value states (= stateful nodes) the checkpoint's transformWithState declared."""
    names: list[str] = []
    for row in spark.read.format("state-metadata").load(checkpoint).collect():
        properties = orjson.loads(row["operatorProperties"] or "{}")
        for variable in properties.get("stateVariables", []):
            if variable.get("stateVariableType") == "ValueState" and not variable["stateName"].startswith(
                TIMER_PREFIX
            ):
                names.append(variable["stateName"])
    return sorted(set(names))


def import_state(checkpoint: str | os.PathLike[str], snapshot: Mapping[str, Any]) -> Path:
    """Make `snapshot` (from `export_state`) the starting state of the query at `checkpoint`.

    Only a checkpoint without progress can take it: the state of a pipeline
    that has run is its checkpoint's, and replacing it means deleting that
    checkpoint first. Returns the file the snapshot waits in.
    """
    if snapshot.get("format") != FORMAT or not isinstance(snapshot.get("keys"), dict):
        raise UserError(f"not a pipeline state snapshot (expected format {FORMAT!r})")
    if has_progress(checkpoint):
        raise UserError(
            f"the pipeline at {checkpoint} already has state; stop it and remove its checkpoint to import"
        )
    target = import_path(checkpoint)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_bytes(orjson.dumps(dict(snapshot)))
    os.replace(temporary, target)
    return target


def pending_import(checkpoint: str | os.PathLike[str]) -> dict[str, str] | None:
    """{key: JSON of its node states} waiting for the query at `checkpoint`, or None."""
    path = import_path(checkpoint)
    if not path.exists():
        return None
    snapshot = orjson.loads(path.read_bytes())
    return {key: orjson.dumps(states).decode() for key, states in snapshot["keys"].items()}
