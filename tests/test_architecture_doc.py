"""docs/architecture.md stays true to the code: every package has a row, every module path it names exists.

The "Moved modules" section names old paths on purpose and is left out.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PAGE = ROOT / "docs" / "architecture.md"


def _current_text() -> str:
    text = PAGE.read_text()
    return text.split("\n## Moved modules", 1)[0]


def _code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def _module_file(dotted: str) -> Path | None:
    path = SRC.joinpath(*dotted.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _defines(module: Path, name: str) -> bool:
    source = module.read_text()
    pattern = rf"^(?:async def|def|class) {name}\b|^{name}\s*[:=]|^from \S+ import .*\b{name}\b|^    {name},$"
    return re.search(pattern, source, re.MULTILINE) is not None


def test_every_dotted_name_is_a_module_or_a_name_defined_in_one() -> None:
    missing = []
    for span in _code_spans(_current_text()):
        token = span.split("(")[0].split(" ")[0].rstrip(".,:")
        if not re.fullmatch(r"contraflow(\.\w+)+", token):
            continue
        parts = token.split(".")
        for end in range(len(parts), 0, -1):
            module = _module_file(".".join(parts[:end]))
            if module is not None:
                rest = parts[end:]
                if rest and not _defines(module, rest[0]):
                    missing.append(token)
                break
        else:
            missing.append(token)
    assert missing == []


def test_every_file_path_exists() -> None:
    missing = []
    for span in _code_spans(_current_text()):
        token = span.split(".")[0] + ".py" if span.endswith(".py") else span
        if not re.fullmatch(r"[\w/]+/[\w]+\.py", token):
            continue
        if not any((base / token).exists() for base in (ROOT, SRC, SRC / "contraflow")):
            missing.append(token)
    assert missing == []


def test_every_package_has_a_row() -> None:
    text = _current_text()
    packages = sorted(
        ".".join(init.parent.relative_to(SRC).parts) for init in (SRC / "contraflow").rglob("__init__.py")
    )
    named = set()
    for row in re.findall(r"^\| `([^|]+)\|", text, re.MULTILINE):
        first = re.findall(r"`?(contraflow[\w.]*)`?", row)
        subs = re.findall(r"\(`\.(\w+)`\)", row)
        named.update(first)
        named.update(f"{first[0]}.{sub}" for sub in subs if first)
    assert [p for p in packages if p != "contraflow" and p not in named] == []
