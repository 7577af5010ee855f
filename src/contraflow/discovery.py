"""Finding the runtime that runs from a data directory, so commands need no address flags.

`contraflow run` writes `DATA_DIR/runtime.json` once its SPU and REST API
listen (its pid, the SPU's and the API's addresses, its log file) and removes
it when it stops. The log commands (`topic`, `produce`, `consume`) run from
the same directory read it: while that runtime lives they talk to its SPU;
after it stopped (or was killed) they open its log files directly.

A data directory holds a log either directly (`contraflow spu run`:
`topics/`, `consumers/`) or, under `spu/`, as the runtime keeps it next to
its Spark checkpoints; `log_dir` tells which.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

RUNTIME_FILE = "runtime.json"
RUNTIME_LOG_SUBDIR = "spu"


@dataclass(frozen=True)
class RuntimeInfo:
    """What a running `contraflow run` tells other commands about itself."""

    pid: int
    spu: str
    api: str | None
    log_file: str | None = None


def write_runtime_info(data_dir: Path, info: RuntimeInfo) -> Path:
    """Publish `info` atomically (readers never see half a file)."""
    path = data_dir / RUNTIME_FILE
    temporary = path.with_name(f".{RUNTIME_FILE}.{os.getpid()}")
    temporary.write_bytes(orjson.dumps(asdict(info), option=orjson.OPT_INDENT_2))
    os.replace(temporary, path)
    return path


def remove_runtime_info(data_dir: Path) -> None:
    """Withdraw this process's file (only its own: a newer runtime's stays)."""
    info = read_runtime_info(data_dir)
    if info is not None and info.pid == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            (data_dir / RUNTIME_FILE).unlink()


def read_runtime_info(data_dir: Path) -> RuntimeInfo | None:
    """The file's content, or None when there is none or it is unreadable."""
    try:
        raw = orjson.loads((data_dir / RUNTIME_FILE).read_bytes())
        return RuntimeInfo(int(raw["pid"]), str(raw["spu"]), raw.get("api"), raw.get("log_file"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running_runtime(data_dir: Path) -> RuntimeInfo | None:
    """The runtime serving `data_dir` if its process is alive (a killed one leaves a stale file)."""
    info = read_runtime_info(data_dir)
    if info is None or not _alive(info.pid):
        return None
    return info


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def log_dir(data_dir: Path) -> Path:
    """Where the log of `data_dir` lives: `spu/` for a runtime's data directory, else the directory."""
    nested = data_dir / RUNTIME_LOG_SUBDIR
    if nested.is_dir() and not (data_dir / "topics").is_dir():
        return nested
    return data_dir
