"""Running the `contraflow` command line (or any Python child) in a child process: one helper for every test.

The child imports this checkout's sources (`SRC` first on its PYTHONPATH),
whatever `contraflow` the interpreter may have installed, and gets the
parent's environment plus what a test adds (`clean=True`: only PATH and
PYTHONPATH, for tests about what a bare shell sees).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import contraflow

SRC = str(Path(contraflow.__file__).resolve().parents[1])
ROOT = str(Path(__file__).resolve().parents[1])  # the checkout: `import tests.…` works from here


def child_env(
    extra: Mapping[str, str] | None = None, *, clean: bool = False, tests: bool = False
) -> dict[str, str]:
    """The environment of a child Python that imports this checkout's contraflow (and, with
    `tests`, the test helpers: worker scripts that import `tests.…`)."""
    base = {"PATH": "/usr/bin:/bin"} if clean else dict(os.environ)
    env = {**base, **(extra or {})}
    paths = [SRC, ROOT if tests else "", env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def contraflow_args(*args: str | os.PathLike[str]) -> list[str]:
    return [sys.executable, "-m", "contraflow", *map(str, args)]


def run_cli(
    *args: str | os.PathLike[str],
    stdin: str | bytes | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    clean: bool = False,
    timeout: float = 60,
) -> subprocess.CompletedProcess[Any]:
    """Run `contraflow ARGS` to the end; text in and out unless `stdin` is bytes."""
    return subprocess.run(
        contraflow_args(*args),
        input=stdin,
        capture_output=True,
        text=not isinstance(stdin, bytes),
        cwd=cwd,
        env=child_env(env, clean=clean),
        timeout=timeout,
    )


def start_cli(
    *args: str | os.PathLike[str], env: Mapping[str, str] | None = None, **popen: Any
) -> subprocess.Popen[Any]:
    """Start `contraflow ARGS` and return at once (the caller reads, signals and waits)."""
    return subprocess.Popen(contraflow_args(*args), env=child_env(env), **popen)


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1, made by the openssl command, for TLS tests."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    return cert, key
