"""Tremor's text and binary formats against json: decode and encode events/s for the same records.

For each codec (influx, binflux, statsd, dogstatsd, syslog, tremor) the same
N records are encoded once into that format and once into JSON; the figures
are medians over REPEATS alternating runs of `codec.decode` over every frame
(and `codec.encode` over every record), with the json codec on the JSON
frames as the baseline measured in the same run. `ratio` is format / json:
json is orjson in C, so it says what a format costs per event next to the
fastest codec contraflow has.

Run: PYTHONPATH=src .venv/bin/python benchmarks/formats.py [--events N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from contraflow.codecs import codec

REPEATS = 5


def influx_record(i: int) -> dict[str, Any]:
    return {
        "measurement": "http_requests",
        "tags": {"host": f"web-{i % 17:02d}", "path": f"/api/v1/items/{i % 1000}", "region": "eu-west"},
        "fields": {"latency_ms": (i % 997) / 7.0, "status": 200 + i % 5, "ok": i % 7 != 0, "msg": "served"},
        "timestamp": 1_700_000_000_000_000_000 + i,
    }


def statsd_record(i: int) -> dict[str, Any]:
    return {"metric": f"web.requests.{i % 50}", "type": "ms", "value": (i % 997) / 7.0, "sample_rate": 0.5}


def dogstatsd_record(i: int) -> dict[str, Any]:
    metric = {"metric": f"web.requests.{i % 50}", "values": [float(i % 997)], "type": "h"}
    return {"metric": {**metric, "sample_rate": 0.5, "tags": [f"host:web-{i % 17}", "env:prod"]}}


def syslog_record(i: int) -> dict[str, Any]:
    return {
        "hostname": f"web-{i % 17:02d}.example.com",
        "severity": "info",
        "facility": "local4",
        "timestamp": 1_700_000_000_123_000_000 + i * 1_000_000,
        "protocol": "RFC5424",
        "protocol_version": 1,
        "appname": "nginx",
        "procid": str(1000 + i % 50),
        "msgid": "ACCESS",
        "structured_data": {"req@32473": [{"path": f"/api/v1/items/{i % 1000}"}, {"status": "200"}]},
        "msg": f"GET /api/v1/items/{i % 1000} served in {(i % 997) / 7.0:.2f} ms",
    }


RECORDS: dict[str, Callable[[int], dict[str, Any]]] = {
    "influx": influx_record,
    "binflux": influx_record,
    "statsd": statsd_record,
    "dogstatsd": dogstatsd_record,
    "syslog": syslog_record,
    "tremor": syslog_record,
}


def rate(run: Callable[[], int]) -> float:
    start = time.perf_counter()
    items = run()
    return items / (time.perf_counter() - start)


def compare(ours: Callable[[], int], baseline: Callable[[], int]) -> dict[str, Any]:
    """Median rates over REPEATS, alternating the two so drift on a shared box hits both alike."""
    mine, theirs = [], []
    for _ in range(REPEATS):
        mine.append(rate(ours))
        theirs.append(rate(baseline))
    ours_rate, json_rate = statistics.median(mine), statistics.median(theirs)
    return {
        "events_per_s": round(ours_rate),
        "json_events_per_s": round(json_rate),
        "ratio": round(ours_rate / json_rate, 3),
    }


def measure(name: str, count: int) -> dict[str, Any]:
    fmt, json_codec = codec(name), codec("json")
    records = [RECORDS[name](i) for i in range(count)]
    frames = [fmt.encode(record) for record in records]
    json_frames = [json_codec.encode(record) for record in records]
    assert fmt.decode(frames[0]) == json_codec.decode(json_frames[0]) == records[0]
    return {
        "avg_frame_bytes": round(sum(map(len, frames)) / count, 1),
        "decode": compare(
            lambda: len([fmt.decode(frame) for frame in frames]),
            lambda: len([json_codec.decode(frame) for frame in json_frames]),
        ),
        "encode": compare(
            lambda: len([fmt.encode(record) for record in records]),
            lambda: len([json_codec.encode(record) for record in records]),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    result = {
        "benchmark": "formats",
        "events": args.events,
        "repeats": REPEATS,
        "load_average": round(os.getloadavg()[0], 2),
        **{name: measure(name, args.events) for name in RECORDS},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
