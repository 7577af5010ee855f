"""Codec hot-path benchmark: what contraflow's framing and JSON codec cost over bare orjson.

Prints one JSON object. Figures (medians over REPEATS runs):
- `separate`: frames/s splitting 1 MiB chunks of ~200-byte lines with the `separate`
  preprocessor, against a bare `bytes.split(b"\\n")` loop that carries partial lines.
- `json_decode` / `json_encode`: events/s through `codec("json")` against bare
  `orjson.loads` / `orjson.dumps` loops.
- `ingest`: separate + json decode together (what a file or TCP source does per
  chunk) against the bare split + `orjson.loads` loop.
- `avro_decode`: events/s through `codec("avro").decode_batch` (Confluent's wire
  format, schema from the SPU's registry, started here; what the runtime calls with
  a pull's frames) against `codec("json").decode` per line for the same records
  (the issue's target: >= 1.0).
- `avro_decode_in_pulls`: the same in calls of PULL frames each, the size of a
  busy source's pull (each call pays the bulk read's set-up once).
- `avro_decode_per_record`: `codec("avro").decode` one frame at a time against the
  same json loop (the path of a batch below the codec's BULK_MIN, and of records a
  bulk read leaves to it).
- `avro_encode`: events/s through `codec("avro").encode` against `codec("json").encode`.
Rates are of CPU time (`time.process_time`), not wall time: on a shared, loaded box
the wall clock counts the time other processes held the CPU, and swings the ratios.
Each `ratio` is contraflow / baseline: 1.0 means the abstraction is free.

Run: PYTHONPATH=src .venv/bin/python benchmarks/codecs.py [--events N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import orjson

from contraflow.codecs import codec, preprocessors
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.registry import ThreadedRegistry

CHUNK = 1 << 20
REPEATS = 7
PULL = 500


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


EVENT_SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "ts", "type": "long"},
        {"name": "host", "type": "string"},
        {"name": "level", "type": "string"},
        {"name": "path", "type": "string"},
        {"name": "status", "type": "int"},
        {"name": "latency_ms", "type": "double"},
        {"name": "msg", "type": "string"},
    ],
}


def avro_figures(events: list[Any], lines: list[bytes]) -> dict[str, Any]:
    """The avro codec against the json codec on the same records, with a real registry."""
    json_codec = codec("json")
    with tempfile.TemporaryDirectory() as data_dir, EmbeddedSpu(data_dir) as spu:
        registry = ThreadedRegistry(spu.addr)
        try:
            config = {"registry": registry.url, "subject": "events-value", "schema": EVENT_SCHEMA}
            avro = codec({"name": "avro", "config": config})
            frames = [avro.encode(event) for event in events]
            assert [avro.decode(frame) for frame in frames] == avro.decode_batch(frames) == events
        finally:
            registry.stop()
    return {
        "avro_decode": compare(
            lambda: len(avro.decode_batch(frames)),
            lambda: len([json_codec.decode(line) for line in lines]),
            "events_per_s",
        ),
        "avro_decode_in_pulls": compare(
            lambda: sum(len(avro.decode_batch(frames[i : i + PULL])) for i in range(0, len(frames), PULL)),
            lambda: len([json_codec.decode(line) for line in lines]),
            "events_per_s",
        ),
        "avro_decode_per_record": compare(
            lambda: len([avro.decode(frame) for frame in frames]),
            lambda: len([json_codec.decode(line) for line in lines]),
            "events_per_s",
        ),
        "avro_encode": compare(
            lambda: len([avro.encode(event) for event in events]),
            lambda: len([json_codec.encode(event) for event in events]),
            "events_per_s",
        ),
        "avg_avro_bytes": round(sum(map(len, frames)) / len(frames), 1),
    }


def chunked(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def rate(run: Callable[[], int]) -> float:
    """Items per CPU second of one call of `run` (which returns how many items it handled)."""
    start = time.process_time()
    items = run()
    return items / (time.process_time() - start)


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
        "load_average_1m": round(os.getloadavg()[0], 2),
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
        **avro_figures(events, lines),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
