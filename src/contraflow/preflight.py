"""Checks `contraflow run` makes before anything slow starts, each failing as one line.

Spark takes seconds to start; a port already taken, a data directory that
cannot be written or a missing Java would otherwise surface only after it
(or as a JVM stack trace). Each check raises `UserError` with what to do.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from contraflow.errors import UserError

MIN_JAVA = 17
_RELEASE_VERSION = re.compile(r'^JAVA_VERSION="(?P<version>[^"]+)"', re.MULTILINE)
_VERSION_OUTPUT = re.compile(r'version "(?P<version>[^"]+)"')


def check_port_free(address: str, what: str, option: str) -> None:
    """`address` (HOST:PORT) can be listened on; port 0 always can."""
    host, _, port_text = address.rpartition(":")
    port = int(port_text)
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]") or "127.0.0.1", port))
        except OSError as err:
            raise UserError(
                f"{what} cannot listen on {address}: {err.strerror or err} "
                f"(another contraflow run? stop it, or choose another with {option})"
            ) from None


def check_data_dir(data_dir: Path) -> None:
    """`data_dir` exists (or can be created) and a file can be written in it."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=data_dir):
            pass
    except OSError as err:
        raise UserError(
            f"data directory {data_dir} is not writable: {err.strerror or err} (choose another with --data-dir)"
        ) from None


def java_executable() -> Path:
    """The `java` Spark will run: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file():
            return candidate
        raise UserError(f"JAVA_HOME is {home} but {candidate} does not exist; install Java {MIN_JAVA}+")
    found = shutil.which("java")
    if found is None:
        raise UserError(
            f"Java is not installed (Spark needs Java {MIN_JAVA} or newer on PATH or in JAVA_HOME)"
        )
    return Path(found)


def java_version(java: Path) -> str:
    """The version string, from the JDK's `release` file when there is one (no JVM start), else `java -version`."""
    release = java.resolve().parent.parent / "release"
    if release.is_file():
        match = _RELEASE_VERSION.search(release.read_text(errors="replace"))
        if match:
            return match["version"]
    try:
        shown = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UserError(f"cannot run {java}: {err}") from None
    match = _VERSION_OUTPUT.search(shown)
    if match is None:
        raise UserError(f"cannot tell the version of {java} (`java -version` said: {shown.strip()[:200]})")
    return match["version"]


def java_major(version: str) -> int:
    """17 for "17.0.15", 8 for "1.8.0_392"."""
    parts = version.split(".")
    return int(parts[1] if parts[0] == "1" else re.match(r"\d+", parts[0])[0])  # type: ignore[index]


def check_java() -> None:
    """A Java Spark can run on is installed."""
    java = java_executable()
    version = java_version(java)
    if java_major(version) < MIN_JAVA:
        raise UserError(f"Spark needs Java {MIN_JAVA} or newer; {java} is Java {version}")
