"""User functions for the Python operator tests: a user's module, found through CONTRAFLOW_PATH
or next to a flow file (this directory is no package; a unique module name, since a Spark worker
imports a module name once)."""

from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc


def count_per_key(event: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """Counts events per `key` in the operator's state; drops `skip` events; fails on `fail` ones."""
    if event.get("fail"):
        raise ValueError(f"cannot score event {event['n']}")
    if event.get("skip"):
        return None
    counts = ctx.state if ctx.state is not None else {}
    key = event["key"]
    counts[key] = counts.get(key, 0) + 1
    ctx.state = counts
    ctx.meta["seen"] = counts[key]
    return {"key": key, "n": event["n"], "count": counts[key], "score": event["n"] * ctx.args["weight"]}


def add_double(table: pa.Table, ctx: Any) -> pa.Table:
    """A column `double` = n * args.factor, with pyarrow."""
    return table.append_column("double", pc.multiply(table["n"], ctx.args["factor"]))


def squares_of_even(table: pa.Table, ctx: Any) -> pl.DataFrame:
    """Only events with an even `n`, with `square`, as a polars DataFrame."""
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame.filter(pl.col("n") % 2 == 0).with_columns((pl.col("n") * pl.col("n")).alias("square"))


def fail_on_negative(table: pa.Table, ctx: Any) -> pa.Table:
    if pc.any(pc.less(table["n"], 0)).as_py():
        raise RuntimeError("negative n in batch")
    return table


def counter(event: Any, ctx: Any) -> dict[str, Any]:
    """The pipeline-state RFC's counter, in Python: every event numbered from 1 in the state."""
    ctx.state = (ctx.state or 0) + 1
    return {**event, "py_count": ctx.state}


def not_json(event: Any, ctx: Any) -> dict[str, Any]:
    """A result JSON cannot hold (a set)."""
    return {"n": event["n"], "tags": {"a", "b"}}


def running_total(table: pa.Table, ctx: Any) -> pa.Table:
    """A python::batch with state: `total` is the sum of field `n` (or `args.field`) over every
    batch so far."""
    before = ctx.state or 0
    totals = pc.add(pc.cumulative_sum(table[ctx.args.get("field", "n")]), before)
    ctx.state = totals[len(totals) - 1].as_py() if len(totals) else before
    return table.append_column("total", totals)


def scaled_by_args(table: pa.Table, ctx: Any) -> pa.Table:
    """Reads only `ctx.args`: no state."""
    return table.append_column("scaled", pc.multiply(table["n"], ctx.args.get("by", 1)))


def hands_ctx_on(table: pa.Table, ctx: Any) -> pa.Table:
    """Hands its context to another function, which could reach the state."""
    return scaled_by_args(table, ctx)
