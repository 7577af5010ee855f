"""Codec hot-path benchmark: what contraflow's framing and JSON codec cost over bare orjson.

Prints one JSON object. Figures (medians over REPEATS runs):
- `separate`: frames/s splitting 1 MiB chunks of ~200-byte lines with the `separate`
  preprocessor, against a bare `bytes.split(b"\\n")` loop that carries partial lines.
- `json_decode` / `json_encode`: events/s through `codec("json")` against bare
  `orjson.loads` / `orjson.dumps` loops.
- `ingest`: separate + json decode together (what a file or TCP source does per
  chunk) against the bare split + `orjson.loads` loop.
Each `ratio` is contraflow / baseline: 1.0 means the abstraction is free.

Run: PYTHONPATH=src .venv/bin/python benchmarks/codecs.py [--events N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from contraflow.codecs import codec, preprocessors

CHUNK = 1 << 20
REPEATS = 7


def make_lines(count: int) -> list[bytes]:
    """Log-like JSON events of about 200 bytes, varied so nothing is trivially cached."""
    lines = []
    for i in range(count):
        event = {
            "ts": 1_700_000_000_000 + i,
            "host": f"web-{i % 17:02d}",
            "level": ("info", "warn", "error")[i % 3],
            "path": f"/api/v1/items/{i % 1000}",
            "status": 200 + (i % 5),
            "latency_ms": (i % 997) / 7.0,
            "msg": "request served " + "x" * (40 + i % 20),
        }
        lines.append(orjson.dumps(event))
    return lines


def chunked(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def rate(run: Callable[[], int]) -> float:
    """Items/s of one call of `run` (which returns how many items it handled)."""
    start = time.perf_counter()
    items = run()
    return items / (time.perf_counter() - start)


def compare(ours: Callable[[], int], baseline: Callable[[], int], unit: str) -> dict[str, Any]:
    """Median rates over REPEATS, alternating the two so drift on a shared box hits both alike."""
    ours_rates, baseline_rates = [], []
    for _ in range(REPEATS):
        ours_rates.append(rate(ours))
        baseline_rates.append(rate(baseline))
    mine, theirs = statistics.median(ours_rates), statistics.median(baseline_rates)
    return {unit: round(mine), f"baseline_{unit}": round(theirs), "ratio": round(mine / theirs, 3)}


def baseline_split(chunks: list[bytes]) -> list[bytes]:
    """The least a line splitter can do: split each chunk, carry the partial last line."""
    frames: list[bytes] = []
    carry = b""
    for chunk in chunks:
        parts = (carry + chunk).split(b"\n")
        carry = parts.pop()
        frames.extend(parts)
    if carry:
        frames.append(carry)
    return frames


def contraflow_split(chunks: list[bytes]) -> list[bytes]:
    pre = preprocessors(["separate"])
    frames: list[bytes] = []
    for chunk in chunks:
        frames.extend(pre.process(chunk))
    frames.extend(pre.finish())
    return frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    args = parser.parse_args()

    lines = make_lines(args.events)
    data = b"\n".join(lines) + b"\n"
    chunks = chunked(data)
    assert contraflow_split(chunks) == baseline_split(chunks) == lines
    events = [orjson.loads(line) for line in lines]
    json_codec = codec("json")
    decode, encode, loads, dumps = json_codec.decode, json_codec.encode, orjson.loads, orjson.dumps

    def ingest_ours() -> int:
        pre = preprocessors(["separate"])
        count = 0
        for chunk in chunks:
            for frame in pre.process(chunk):
                decode(frame)
                count += 1
        return count

    def ingest_baseline() -> int:
        count = 0
        for frame in baseline_split(chunks):
            loads(frame)
            count += 1
        return count

    result = {
        "benchmark": "codecs",
        "events": len(lines),
        "avg_line_bytes": round(len(data) / len(lines), 1),
        "chunk_bytes": CHUNK,
        "repeats": REPEATS,
        "separate": compare(
            lambda: len(contraflow_split(chunks)), lambda: len(baseline_split(chunks)), "frames_per_s"
        ),
        "json_decode": compare(
            lambda: len([decode(line) for line in lines]),
            lambda: len([loads(line) for line in lines]),
            "events_per_s",
        ),
        "json_encode": compare(
            lambda: len([encode(event) for event in events]),
            lambda: len([dumps(event) for event in events]),
            "events_per_s",
        ),
        "ingest": compare(ingest_ours, ingest_baseline, "events_per_s"),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
