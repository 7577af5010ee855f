"""The read task's parse of one batch for a columnar plan: before and after, and the candidates.

Prints one JSON object. Usage: python benchmarks/columnar_parse.py [EVENTS] [RUNS]
(default 65536 events, 7 runs). CPU µs per event (process time), medians of
RUNS, alternating, everything in one process on the same batch of hot_path
events and the schema w1's read task parses (`event`, `value`, `country`,
`ts`), with no row known to fall back:

- `before`: `parse_values` as it was at `BEFORE` (pyarrow's JSON reader on
  the batch joined into one newline-delimited buffer, after a polars
  prefilter), loaded from git history; null when git cannot show it;
- `after`: `parse_values` now (msgspec per row, one scan of the bytes), and
  its parts: `decode` (msgspec, one Struct per row), `scan` (the rows msgspec
  would read unlike orjson), `columns` (Arrow columns from the Structs);
- both again on `odd`: the same batch with 1% of rows that fall back (a field
  of another type, broken JSON, a repeated key of another type, `1e999`);
- the candidates' parsers alone on the same bytes: pyarrow's reader, polars'
  `read_ndjson` (lenient: it converts mismatched types), msgspec over the
  rows joined as one JSON array (typed Structs; row boundaries unchecked).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pyarrow as pa
import pyarrow.json as pj

sys.path.insert(0, str(Path(__file__).parent))
from columnar import hot_path_lines  # noqa: E402
from contraflow.pipeline.columnar import parse  # noqa: E402

# The commit before the msgspec parse: its `parse.py` is the `before` figure.
BEFORE = "bb6690b"
PARSE_PATH = "src/contraflow/pipeline/columnar/parse.py"
SCHEMA = pa.schema(
    [("event", pa.string()), ("value", pa.float64()), ("country", pa.string()), ("ts", pa.int64())]
)
ODD_ROWS = [
    b'{"event":"click","value":"12","country":"DE","ts":1}',
    b'{"event":"click","value":12,"country":"DE"',
    b'{"event":"click","value":12,"country":"DE","country":7,"ts":1}',
    b'{"event":"click","value":12,"country":"DE","ts":1,"x":1e999}',
]


def main() -> None:
    lines, runs = hot_path_lines()
    count = len(lines)
    values = pa.array(lines, pa.binary())
    odd_lines = [ODD_ROWS[i // 100 % len(ODD_ROWS)] if i % 100 == 7 else line for i, line in enumerate(lines)]
    odd = pa.array(odd_lines, pa.binary())
    no_fallback = pa.array([False] * count)
    before = _module_at(BEFORE)
    reader = parse._reader(SCHEMA)
    assert reader is not None
    records, _ = parse._decode(lines, reader.decode, reader.empty)
    joined = b"\n".join(lines)
    array = b"[" + joined.replace(b"\n", b",") + b"]"
    structs = msgspec.json.Decoder(list[type(reader.empty)])

    work: dict[str, Callable[[], Any]] = {
        "after": lambda: parse.parse_values(values, SCHEMA, no_fallback),
        "after_decode": lambda: parse._decode(values.to_pylist(), reader.decode, reader.empty),
        "after_scan": lambda: parse._unlike_orjson(values),
        "after_columns": lambda: parse._table(records, SCHEMA),
        "after_odd": lambda: parse.parse_values(odd, SCHEMA, no_fallback),
        "parser_pyarrow": lambda: pj.read_json(
            io.BytesIO(joined),
            read_options=pj.ReadOptions(use_threads=False, block_size=len(joined)),
            parse_options=pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore"),
        ),
        "parser_polars": lambda: pl.read_ndjson(
            io.BytesIO(joined), schema=pl.Schema(pl.from_arrow(SCHEMA.empty_table()).schema)
        ),
        "parser_msgspec_array": lambda: structs.decode(array),
    }
    if before is not None:
        work["before"] = lambda: before.parse_values(values, SCHEMA, no_fallback)
        work["before_odd"] = lambda: before.parse_values(odd, SCHEMA, no_fallback)
        _same_results(before, odd, no_fallback)
    figures = _alternating(work, count, runs)
    result: dict[str, Any] = {
        "events": count,
        "runs": runs,
        "before_commit": BEFORE if before is not None else None,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpu_us_per_event": {
            name: figures.get(name) for name in ("before", "after", "before_odd", "after_odd")
        },
        "after_parts": {name: figures[name] for name in ("after_decode", "after_scan", "after_columns")},
        "parsers_alone": {name: figures[name] for name in figures if name.startswith("parser_")},
    }
    if before is not None:
        result["after_over_before"] = round(figures["after"] / figures["before"], 3)
    print(json.dumps(result))


def _module_at(commit: str) -> types.ModuleType | None:
    """`parse.py` as it was at `commit`, imported under another name (None without git history)."""
    try:
        source = subprocess.run(
            ["git", "show", f"{commit}:{PARSE_PATH}"],
            cwd=Path(__file__).parent.parent,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    spec = importlib.util.spec_from_loader("columnar_parse_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, f"{commit}:{PARSE_PATH}", "exec"), module.__dict__)  # noqa: S102
    return module


def _same_results(before: types.ModuleType, values: pa.Array, fallback: pa.Array) -> None:
    """Both parses agree on every row neither sends to the executor (the figures compare like with
    like); the new one may answer rows the old one gave up (a repeated key of the same type)."""
    old, new = before.parse_values(values, SCHEMA, fallback), parse.parse_values(values, SCHEMA, fallback)
    both = [not (a or b) for a, b in zip(old.fallback.to_pylist(), new.fallback.to_pylist(), strict=True)]
    assert old.table.filter(pa.array(both)).equals(new.table.filter(pa.array(both)))
    assert new.fallback.to_pylist().count(True) >= len(values) // 100


def _alternating(work: dict[str, Callable[[], Any]], events: int, runs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(runs):
        for name, step in work.items():
            start = time.process_time()
            step()
            times[name].append(time.process_time() - start)
    return {name: round(statistics.median(t) / events * 1e6, 3) for name, t in times.items()}


if __name__ == "__main__":
    main()
