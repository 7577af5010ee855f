"""Codecs and pre/postprocessors: how connectors turn bytes into events and back (Tremor's set).

    from contraflow.codecs import codec, preprocessors, postprocessors

    json = codec("json")                          # or {"name": "json", "config": {"mode": "sorted"}}
    pre = preprocessors(["separate"])             # one chain per stream (TCP connection, file)
    for frame in pre.process(chunk): event = json.decode(frame)
    ...; pre.finish()                             # at end of stream: flush the last frame

Config mistakes raise `ConfigError` (a `UserError`) when building; bad data
raises `CodecError` (`FrameErrors` from chains, carrying the good frames too).
"""

from contraflow.codecs.codec import NO_EVENT, Codec
from contraflow.codecs.config import Spec
from contraflow.codecs.errors import CodecError, ConfigError, FrameErrors
from contraflow.codecs.processors.chain import Postprocessors, Preprocessors
from contraflow.codecs.registry import (
    CODECS,
    POSTPROCESSORS,
    PREPROCESSORS,
    codec,
    postprocessors,
    preprocessors,
)

__all__ = [
    "CODECS",
    "NO_EVENT",
    "POSTPROCESSORS",
    "PREPROCESSORS",
    "Codec",
    "CodecError",
    "ConfigError",
    "FrameErrors",
    "Postprocessors",
    "Preprocessors",
    "Spec",
    "codec",
    "postprocessors",
    "preprocessors",
]
