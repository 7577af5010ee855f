"""The Lark grammars of Troy, Trickle and tremor-script, and where their parse tables are cached.

Building an LALR table takes a second or more of CPU (script.lark alone ~1.5 s), paid by
every `contraflow run`, `check` and flow deploy in a fresh process; lark loads a cached
table in milliseconds. The cache file is named after a hash of every grammar file, since
lark does not notice a change in an imported grammar (trickle.lark imports script.lark).
"""

from __future__ import annotations

import hashlib
import tempfile
from functools import cache
from pathlib import Path

GRAMMAR_DIR = Path(__file__).resolve().parent


def parse_table_cache(name: str) -> str:
    """The file lark caches grammar `name`'s parse tables in (temp dir; a stale one is never read)."""
    return str(Path(tempfile.gettempdir()) / f"contraflow-{name}-{_grammars_digest()}.lark-cache")


@cache
def _grammars_digest() -> str:
    digest = hashlib.sha256()
    for file in sorted(GRAMMAR_DIR.glob("*.lark")):
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]
