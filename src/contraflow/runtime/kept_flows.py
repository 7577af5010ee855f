"""Flows deployed through the REST API, kept in the data directory so a restart redeploys them.

A flow in a file given to `contraflow run` comes back with the command line; one
deployed with `POST /v1/flows` has only this record. Each flow id gets one JSON file,
`{data_dir}/deployed/<flow id>.json`: the Troy source it came from (its `deploy flow`
statement carries the flow's args), the name errors quote, and the directory relative
paths and modules resolved against. Written atomically once the flow has started,
removed when it is undeployed; a stop or a crash leaves it, and the next start
deploys that one flow from its source again, under the same id, so it resumes from
its committed offsets and state.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from contraflow.atomic_files import fsync_dir, write_atomic

log = logging.getLogger("contraflow.runtime")

KEPT_DIR = "deployed"


@dataclass(frozen=True)
class KeptFlow:
    """One flow deployed through the API: enough to compile and deploy it again."""

    flow_id: str
    source: str
    name: str
    directory: str


class KeptFlows:
    """The `deployed/` directory of a runtime's data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.directory = Path(data_dir) / KEPT_DIR

    def keep(self, flow_ids: list[str], source: str, name: str, directory: Path) -> None:
        """Record each of `flow_ids` as deployed from `source` (compiled in `directory`)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        deployed_ns = time.time_ns()
        for i, flow_id in enumerate(flow_ids):
            kept = {
                "flow": flow_id,
                "source": source,
                "name": name,
                "directory": str(directory),
                "order": [deployed_ns, i],  # deployment order, for the next start
            }
            write_atomic(self._path(flow_id), orjson.dumps(kept))

    def forget(self, flow_id: str) -> None:
        """The flow was undeployed: a restart must not bring it back."""
        path = self._path(flow_id)
        if path.exists():
            path.unlink()
            fsync_dir(self.directory)

    def all(self) -> list[KeptFlow]:
        """Every kept flow, oldest first (the order they were deployed in); unreadable records
        are logged and skipped, never fatal to the start."""
        if not self.directory.is_dir():
            return []
        kept: list[tuple[list[int], KeptFlow]] = []
        for path in self.directory.glob("*.json"):
            try:
                raw = orjson.loads(path.read_bytes())
                flow = KeptFlow(raw["flow"], raw["source"], raw["name"], raw["directory"])
                kept.append((list(raw["order"]), flow))
            except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as err:
                log.error("cannot read the deployed flow %s, not redeployed: %s", path, err)
        return [flow for _, flow in sorted(kept, key=lambda item: item[0])]

    def _path(self, flow_id: str) -> Path:
        return self.directory / f"{flow_id}.json"
