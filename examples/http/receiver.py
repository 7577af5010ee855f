"""A small HTTP receiver for examples/http/flow.troy: appends each request's body to a file.

    python3 examples/http/receiver.py [--port 8139] [--out examples/http/out/received.jsonl]

Every POST's body (one JSON event) becomes one line of the output file, and
the answer is 200. Once a second it prints how many events arrived, the
highest `seq` and how many arrived more than once (HTTP delivery is at least
once: a request whose answer was lost is sent again). Ctrl-C stops it; the
flow's breaker then opens until the receiver runs again. Python's standard
library only, so any python3 runs it.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Tally:
    """What arrived so far (the file holds it across restarts)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.seen: set[int] = set()
        self.count = self.duplicates = 0
        if out.exists():
            for line in out.read_text().splitlines():
                self.add(json.loads(line).get("seq"))

    def add(self, seq: int | None) -> None:
        self.count += 1
        if seq in self.seen:
            self.duplicates += 1
        elif seq is not None:
            self.seen.add(seq)

    def record(self, body: bytes) -> None:
        with self.lock:
            with self.out.open("ab") as out:
                out.write(body.rstrip(b"\n") + b"\n")
            self.add(json.loads(body).get("seq"))

    def summary(self) -> str:
        with self.lock:
            top = max(self.seen, default=-1)
            return f"received {self.count} events, seq up to {top}, {self.duplicates} more than once"


def handler_for(tally: Tally) -> type[BaseHTTPRequestHandler]:
    class Receive(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                tally.record(body)
            except ValueError:
                self.send_response(400)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
            """One summary line a second instead of a line per request."""

    return Receive


def main() -> None:
    parser = argparse.ArgumentParser(description="Receive the http example's events.")
    parser.add_argument("--port", type=int, default=8139)
    parser.add_argument("--out", type=Path, default=Path("examples/http/out/received.jsonl"))
    options = parser.parse_args()
    options.out.parent.mkdir(parents=True, exist_ok=True)
    tally = Tally(options.out)
    server = ThreadingHTTPServer(("127.0.0.1", options.port), handler_for(tally))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"receiving on http://127.0.0.1:{options.port}/events into {options.out}; Ctrl-C stops", flush=True)
    try:
        while True:
            time.sleep(1)
            print(tally.summary(), flush=True)
    except KeyboardInterrupt:
        server.shutdown()
        server.server_close()
        print(f"stopped; {tally.summary()}", flush=True)


if __name__ == "__main__":
    main()
