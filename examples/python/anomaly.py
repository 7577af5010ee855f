"""The Python operators of examples/python/flow.troy: a unit conversion over whole batches
(python::batch, pyarrow) and an anomaly score per sensor over a sliding mean (python::map, with
the last readings of each sensor in the operator's state)."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


def to_celsius(table: pa.Table, ctx: Any) -> pa.Table:
    """Readings in Fahrenheit (`unit` "F") converted to Celsius, for the whole batch at once."""
    fahrenheit = pc.equal(table["unit"], "F")
    celsius = pc.if_else(fahrenheit, pc.divide(pc.subtract(table["value"], 32.0), 1.8), table["value"])
    table = table.set_column(table.column_names.index("value"), "value", pc.round(celsius, 2))
    return table.set_column(table.column_names.index("unit"), "unit", pa.repeat(pa.scalar("C"), len(table)))


def score(reading: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """How many standard deviations a reading is from its sensor's last `args.window` readings.

    The state is `{sensor: [recent values]}`: JSON, so it survives restarts and moves with
    `contraflow state export/import`. `$anomaly` (metadata) is set for what a sink may route on."""
    window = ctx.args["window"]
    history = ctx.state if ctx.state is not None else {}
    recent = history.setdefault(reading["sensor"], [])
    value = reading["value"]
    z = 0.0
    if len(recent) >= 3:
        mean = sum(recent) / len(recent)
        spread = math.sqrt(sum((v - mean) ** 2 for v in recent) / len(recent))
        z = abs(value - mean) / max(spread, ctx.args["min_spread"])
    recent.append(value)
    del recent[:-window]
    ctx.state = history
    anomaly = z >= ctx.args["threshold"]
    ctx.meta["anomaly"] = anomaly
    return {**reading, "score": round(z, 2), "anomaly": anomaly}
