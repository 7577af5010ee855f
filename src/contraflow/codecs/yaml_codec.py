"""The `yaml` codec, on PyYAML's safe (libyaml when present) loader and dumper.

Only plain values come out: timestamps are left as strings (YAML 1.1 would
otherwise turn `2020-01-01` into a `date` no pipeline or JSON codec expects),
a `!!set` becomes a list of its members, `!!binary` maps to `bytes` both ways. Each frame is one YAML document.
"""

from __future__ import annotations

from typing import Any

import yaml

from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class PlainLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """The safe loader minus implicit timestamps, so dates stay strings."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
        for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
    }


def _set_as_list(loader: yaml.SafeLoader, node: yaml.MappingNode) -> list[Any]:
    """`!!set` has no plain value (and no JSON form): its members become a list."""
    return list(loader.construct_mapping(node))


PlainLoader.add_constructor("tag:yaml.org,2002:set", _set_as_list)


def _short(err: yaml.YAMLError) -> str:
    """PyYAML's message without the quoted source: the problem, where, and in what."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem is None:
        return " ".join(str(err).split())
    where = ""
    if err.problem_mark is not None:
        where = f" at line {err.problem_mark.line + 1}, column {err.problem_mark.column + 1}"
    context = f" ({err.context})" if err.context else ""
    return f"{err.problem}{where}{context}"


class YamlCodec(Codec):
    name = "yaml"
    mime_types = ("application/yaml", "application/x-yaml", "text/yaml")

    def decode(self, data: bytes) -> Any:
        try:
            return yaml.load(data, Loader=PlainLoader)  # noqa: S506 - PlainLoader is a SafeLoader
        except yaml.YAMLError as err:
            raise CodecError("yaml", _short(err)) from None

    def encode(self, value: Any) -> bytes:
        try:
            out: bytes = yaml.dump(
                value, Dumper=_BaseDumper, encoding="utf-8", allow_unicode=True, sort_keys=False
            )
        except yaml.YAMLError as err:
            raise CodecError("yaml", f"cannot encode value: {err}") from None
        return out
