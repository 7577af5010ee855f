"""A class-data-sharing archive of Spark's classes, built on first use, to cut the JVM's cold start.

Most of a Spark session's start is the JVM loading and verifying some 15,000
classes. Java's dynamic class-data sharing writes the classes a run loaded to
an archive when the JVM exits (`-XX:ArchiveClassesAtExit`); later JVMs map it
(`-XX:SharedArchiveFile`) instead of parsing the jars again. Measured here
(2 cores, load ~15): a session 28 s -> 18 s, its first job 11 s -> 5 s
(medians of three).

The archive lives in the user's cache (`$XDG_CACHE_HOME/contraflow/jvm`, or
`~/.cache/...`), one per PySpark version, Java version and jar directory
(an archive only fits the classpath it was made from). The first run writes
it under a name of its own, since the JVM writes it as it exits, possibly
after Python is gone; a later run adopts it once it has not changed for
`SETTLED_S`. A run that finds another one creating it just starts without.
`CONTRAFLOW_JVM_CDS=0` turns it off. A stale or foreign archive costs
nothing but a warning in the log: the JVM then runs without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path

SETTLED_S = 60.0  # an archive unchanged this long is completely written
CLAIM_TTL_S = 600.0  # a creator that left no archive in this time died before its JVM exited


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "contraflow" / "jvm"


def archive_key(java_version: str) -> str:
    """Identifies the classpath: PySpark's version and jar directory, and the Java version."""
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    return hashlib.sha256(f"{pyspark.__version__}|{java_version}|{jars}".encode()).hexdigest()[:16]


def java_options(java_version: str, directory: Path | None = None) -> str:
    """The JVM options that use (or, the first time, create) the archive; "" when neither applies."""
    if os.environ.get("CONTRAFLOW_JVM_CDS", "1") == "0":
        return ""
    directory = directory or cache_dir()
    key = archive_key(java_version)
    archive = directory / f"spark-{key}.jsa"
    if archive.is_file() or _adopt_written(directory, key, archive):
        _remove_extra(directory, key)
        return f"-XX:SharedArchiveFile={archive}"
    if not _claim(directory / f"spark-{key}.creating"):
        return ""
    return f"-XX:ArchiveClassesAtExit={directory / f'spark-{key}.{os.getpid()}.jsa'}"


def existing_archive(java_version: str, directory: Path | None = None) -> Path | None:
    """The archive, if a driver made it already (for other JVMs on the same jars: never creates it)."""
    if os.environ.get("CONTRAFLOW_JVM_CDS", "1") == "0":
        return None
    archive = (directory or cache_dir()) / f"spark-{archive_key(java_version)}.jsa"
    return archive if archive.is_file() else None


def _adopt_written(directory: Path, key: str, archive: Path) -> bool:
    """Move a first run's archive to the shared name once its JVM has finished writing it."""
    for written in directory.glob(f"spark-{key}.*.jsa"):
        with contextlib.suppress(OSError):
            if time.time() - written.stat().st_mtime >= SETTLED_S:
                os.replace(written, archive)
                return True
    return False


def _remove_extra(directory: Path, key: str) -> None:
    """Archives more runs wrote at once than needed (each is some 150 MB): all but the shared one go."""
    for extra in directory.glob(f"spark-{key}.*.jsa"):
        with contextlib.suppress(OSError):
            if time.time() - extra.stat().st_mtime >= SETTLED_S:
                extra.unlink()


def _claim(marker: Path) -> bool:
    """Become the one run that creates the archive (a claim older than CLAIM_TTL_S is void)."""
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            if time.time() - marker.stat().st_mtime < CLAIM_TTL_S:
                return False
            marker.unlink()
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError:  # no cache directory to write, or another run claimed it first
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True
