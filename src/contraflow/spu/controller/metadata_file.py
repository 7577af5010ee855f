"""Where the controller keeps the cluster's metadata: one JSON file, replaced whole per change."""

from __future__ import annotations

from pathlib import Path

import orjson

from contraflow.atomic_files import write_atomic
from contraflow.spu.protocol.cluster_metadata import ClusterMetadata


class MetadataFile:
    """The controller's durable copy: one JSON file replaced atomically (fsynced) per change."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / "cluster.json"

    def load(self) -> ClusterMetadata:
        if not self.path.exists():
            return ClusterMetadata()
        return ClusterMetadata.from_dict(orjson.loads(self.path.read_bytes()))

    def save(self, metadata: ClusterMetadata) -> None:
        write_atomic(self.path, orjson.dumps(metadata.to_dict(), option=orjson.OPT_INDENT_2))
