"""Where the controller keeps the cluster's metadata: one JSON file, replaced whole per change.

Beside the metadata it keeps each SPU's incarnation (the `session` of the SPU process it
last heard), which only the controller needs: a controller that restarts must still tell
an SPU that restarted meanwhile from one that merely kept beating (`Controller.heartbeat`).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from contraflow.atomic_files import write_atomic
from contraflow.spu.protocol.cluster_metadata import ClusterMetadata

Incarnations = dict[int, str]  # SPU id -> the session of its process the controller last heard


class MetadataFile:
    """The controller's durable copy: one JSON file replaced atomically (fsynced) per change."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / "cluster.json"

    def load(self) -> tuple[ClusterMetadata, Incarnations]:
        """The metadata and the incarnations (none in a file written before they were kept:
        each registered SPU's next beat then counts as a restart, which is safe)."""
        if not self.path.exists():
            return ClusterMetadata(), {}
        data = orjson.loads(self.path.read_bytes())
        incarnations = {int(spu): str(session) for spu, session in data.get("incarnations", {}).items()}
        return ClusterMetadata.from_dict(data), incarnations

    def save(self, metadata: ClusterMetadata, incarnations: Incarnations) -> None:
        data = {
            **metadata.to_dict(),
            "incarnations": {str(spu): s for spu, s in sorted(incarnations.items())},
        }
        write_atomic(self.path, orjson.dumps(data, option=orjson.OPT_INDENT_2))
