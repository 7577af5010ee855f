"""Names to implementations: what Troy's `codec`, `preprocessors` and `postprocessors` resolve to."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contraflow.codecs.avro_codec import AvroCodec
from contraflow.codecs.binary_codec import BinaryCodec
from contraflow.codecs.binflux_codec import BinfluxCodec
from contraflow.codecs.codec import Codec
from contraflow.codecs.config import Spec, resolve
from contraflow.codecs.csv_codec import CsvCodec
from contraflow.codecs.dogstatsd_codec import DogstatsdCodec
from contraflow.codecs.errors import ConfigError
from contraflow.codecs.influx_codec import InfluxCodec
from contraflow.codecs.json_codec import JsonCodec, JsonSortedCodec
from contraflow.codecs.json_schema_codec import JsonSchemaCodec
from contraflow.codecs.msgpack_codec import MsgpackCodec
from contraflow.codecs.null_codec import NullCodec
from contraflow.codecs.processors.base64_processor import Base64Postprocessor, Base64Preprocessor
from contraflow.codecs.processors.chain import Postprocessors, Preprocessors
from contraflow.codecs.processors.compress import CompressPostprocessor, DecompressPreprocessor
from contraflow.codecs.processors.gelf_chunking import GelfChunkingPostprocessor, GelfChunkingPreprocessor
from contraflow.codecs.processors.ingest_ns import IngestNsPostprocessor, IngestNsPreprocessor
from contraflow.codecs.processors.length_prefixed import (
    LengthPrefixedPostprocessor,
    LengthPrefixedPreprocessor,
)
from contraflow.codecs.processors.processor import Processor
from contraflow.codecs.processors.remove_empty import RemoveEmptyPreprocessor
from contraflow.codecs.processors.separate import SeparatePostprocessor, SeparatePreprocessor
from contraflow.codecs.processors.stream_compress import StreamCompressPostprocessor
from contraflow.codecs.processors.textual_length_prefixed import (
    TextualLengthPrefixedPostprocessor,
    TextualLengthPrefixedPreprocessor,
)
from contraflow.codecs.protobuf_codec import ProtobufCodec
from contraflow.codecs.statsd_codec import StatsdCodec
from contraflow.codecs.string_codec import StringCodec
from contraflow.codecs.syslog_codec import SyslogCodec
from contraflow.codecs.tremor_codec import TremorCodec
from contraflow.codecs.yaml_codec import YamlCodec

Factory = Callable[[Mapping[str, Any]], Any]


def _by_name(*classes: Any) -> dict[str, Factory]:
    """Name -> factory, for classes that carry their Troy `name` and a `from_config`."""
    return {cls.name: cls.from_config for cls in classes}


CODECS = _by_name(
    JsonCodec,
    JsonSortedCodec,
    StringCodec,
    BinaryCodec,
    MsgpackCodec,
    CsvCodec,
    YamlCodec,
    InfluxCodec,
    BinfluxCodec,
    StatsdCodec,
    DogstatsdCodec,
    SyslogCodec,
    NullCodec,
    TremorCodec,
    AvroCodec,
    ProtobufCodec,
    JsonSchemaCodec,
)
PREPROCESSORS = _by_name(
    SeparatePreprocessor,
    LengthPrefixedPreprocessor,
    Base64Preprocessor,
    DecompressPreprocessor,
    RemoveEmptyPreprocessor,
    TextualLengthPrefixedPreprocessor,
    GelfChunkingPreprocessor,
    IngestNsPreprocessor,
)
POSTPROCESSORS = _by_name(
    SeparatePostprocessor,
    LengthPrefixedPostprocessor,
    Base64Postprocessor,
    CompressPostprocessor,
    StreamCompressPostprocessor,
    TextualLengthPrefixedPostprocessor,
    GelfChunkingPostprocessor,
    IngestNsPostprocessor,
)


# `lines` is Tremor's older name of `separate`.
PREPROCESSORS["lines"] = SeparatePreprocessor.from_config
POSTPROCESSORS["lines"] = SeparatePostprocessor.from_config
# `stream-compress` is what Tremor's docs call `streaming-compress` (its code's name).
POSTPROCESSORS["stream-compress"] = StreamCompressPostprocessor.from_config


def codec(spec: Spec) -> Codec:
    """The codec `spec` names: `"json"` or `{"name": "json", "config": {"mode": "sorted"}}`."""
    built: Codec = resolve(spec, "codec", CODECS)
    return built


def preprocessors(chain: Sequence[Spec] | None) -> Preprocessors:
    """A fresh preprocessor chain (one per stream) from a list of names or name/config records."""
    return Preprocessors(_stages(chain, "preprocessor", PREPROCESSORS))


def postprocessors(chain: Sequence[Spec] | None) -> Postprocessors:
    """A fresh postprocessor chain (one per outgoing stream) from a list of names or records."""
    return Postprocessors(_stages(chain, "postprocessor", POSTPROCESSORS))


def _stages(chain: object, kind: str, registry: Mapping[str, Factory]) -> list[Processor]:
    if chain is None:
        return []
    if isinstance(chain, str | bytes) or not isinstance(chain, Sequence):
        raise ConfigError(
            f"{kind}s must be a list of names or records, got {type(chain).__name__} {chain!r}", kind=kind
        )
    return [resolve(spec, kind, registry) for spec in chain]
