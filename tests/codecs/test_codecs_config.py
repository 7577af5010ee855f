"""Config mistakes: a `ConfigError` (a `UserError`) naming the codec/processor, the bad key and the valid ones."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from codecs_support import EXAMPLE_VALUES

from contraflow.codecs import (
    CODECS,
    POSTPROCESSORS,
    PREPROCESSORS,
    ConfigError,
    codec,
    postprocessors,
    preprocessors,
)
from contraflow.errors import UserError


def config_error(build: Any, spec: Any) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        build(spec)
    assert isinstance(caught.value, UserError)
    return caught.value


def test_tremors_codecs_and_processors_are_registered() -> None:
    assert set(CODECS) == {
        *("json", "json-sorted", "string", "binary", "msgpack", "csv", "yaml"),
        *("influx", "binflux", "statsd", "dogstatsd", "syslog", "null", "tremor"),
        *("avro", "protobuf", "json_schema"),  # Confluent's wire format, schemas from a registry
    }
    assert set(PREPROCESSORS) == {
        *("separate", "lines", "length-prefixed", "textual-length-prefixed", "base64", "decompress"),
        *("remove-empty", "gelf-chunking", "ingest-ns"),
    }
    assert set(PREPROCESSORS) - set(POSTPROCESSORS) == {"decompress", "remove-empty"}
    assert set(POSTPROCESSORS) - set(PREPROCESSORS) == {"compress", "streaming-compress", "stream-compress"}


def test_specs_accept_a_name_or_a_record_with_optional_config() -> None:
    assert codec("json").name == "json"
    assert codec({"name": "json"}).name == "json"
    assert codec({"name": "json", "config": None}).name == "json"
    assert codec({"name": "json", "config": {"mode": "sorted"}}).name == "json"
    chain = preprocessors(
        ["separate", {"name": "base64"}, {"name": "decompress", "config": {"algorithm": "gzip"}}]
    )
    assert chain.names == ["separate", "base64", "decompress"]
    assert preprocessors(None).names == [] and postprocessors([]).names == []


def test_unknown_codec_lists_valid_names_and_suggests_one() -> None:
    err = config_error(codec, "jsn")
    names = ", ".join(sorted(CODECS))
    assert str(err) == f"unknown codec 'jsn' (did you mean 'json'?); valid codecs: {names}"
    assert err.kind == "codec" and err.name == "jsn"
    assert err.valid == tuple(sorted(CODECS))


def test_unknown_processors_name_their_kind() -> None:
    err = config_error(preprocessors, ["separate", "sep"])
    assert str(err).startswith("unknown preprocessor 'sep'; valid preprocessors: base64, decompress,")
    err = config_error(postprocessors, [{"name": "gzip"}])
    assert "unknown postprocessor 'gzip'" in str(err) and "compress" in str(err)


def test_unknown_config_key_names_codec_key_and_valid_keys() -> None:
    err = config_error(codec, {"name": "json", "config": {"mod": "sorted"}})
    assert (
        str(err) == "codec 'json': unknown config key 'mod' (did you mean 'mode'?); valid config keys: mode"
    )
    assert (err.kind, err.name, err.key, err.valid) == ("codec", "json", "mod", ("mode",))


def test_codecs_without_options_reject_every_key() -> None:
    err = config_error(codec, {"name": "string", "config": {"encoding": "latin1"}})
    assert str(err) == "codec 'string': unknown config key 'encoding'; valid config keys: none"


@pytest.mark.parametrize(
    ("build", "spec", "message"),
    [
        (
            codec,
            {"name": "json", "config": {"mode": "fast"}},
            "codec 'json': config key 'mode' must be one of 'sorted', 'unsorted', got 'fast'",
        ),
        (
            codec,
            {"name": "json", "config": {"mode": 1}},
            "codec 'json': config key 'mode' must be a string, got int 1",
        ),
        (
            preprocessors,
            [{"name": "separate", "config": {"separator": "\r\n"}}],
            "preprocessor 'separate': config key 'separator' must be exactly one byte, got '\\r\\n'",
        ),
        (
            preprocessors,
            [{"name": "separate", "config": {"max_length": -1}}],
            "preprocessor 'separate': config key 'max_length' must be 0 (no limit) or positive, got -1",
        ),
        (
            preprocessors,
            [{"name": "separate", "config": {"max_length": True}}],
            "preprocessor 'separate': config key 'max_length' must be an integer, got bool True",
        ),
        (
            preprocessors,
            [{"name": "separate", "config": {"buffered": "yes"}}],
            "preprocessor 'separate': config key 'buffered' must be a boolean, got str 'yes'",
        ),
        (
            preprocessors,
            [{"name": "length-prefixed", "config": {"length_bytes": 3}}],
            "preprocessor 'length-prefixed': config key 'length_bytes' must be one of 1, 2, 4, 8, got 3",
        ),
        (
            preprocessors,
            [{"name": "decompress", "config": {"algorithm": "lzo"}}],
            "preprocessor 'decompress': config key 'algorithm' must be one of 'autodetect', 'gzip', 'zlib', 'xz2', "
            "'lz4', 'zstd', 'snappy', 'br', 'bzip2', got 'lzo'",
        ),
        (
            postprocessors,
            ["compress"],
            "postprocessor 'compress': config key 'algorithm' is required: one of 'gzip', 'zlib', 'xz2', 'lz4', "
            "'zstd', 'snappy', 'br', 'bzip2'",
        ),
        (
            postprocessors,
            [{"name": "compress", "config": {"algorithm": "gzip", "level": 10}}],
            "postprocessor 'compress': config key 'level' must be between 0 and 9 for gzip, got 10",
        ),
        (
            postprocessors,
            [{"name": "compress", "config": {"algorithm": "zstd", "level": "max"}}],
            "postprocessor 'compress': config key 'level' must be an integer or null, got str 'max'",
        ),
    ],
)
def test_bad_values_name_the_key_and_what_is_allowed(build: Any, spec: Any, message: str) -> None:
    assert str(config_error(build, spec)).startswith(message)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (5, "a codec must be a name or a record with 'name' and 'config', got int 5"),
        ({"config": {}}, "codec record needs a string 'name', got NoneType None"),
        (
            {"name": "json", "cfg": {}},
            "codec record: unknown key 'cfg' (did you mean 'config'?); valid keys: config, name",
        ),
        ({"name": "json", "config": "sorted"}, "codec 'json': 'config' must be a record, got str 'sorted'"),
    ],
)
def test_malformed_specs(spec: Any, message: str) -> None:
    assert str(config_error(codec, spec)) == message


def test_processor_chains_must_be_lists() -> None:
    err = config_error(preprocessors, "separate")
    assert str(err) == "preprocessors must be a list of names or records, got str 'separate'"
    err = config_error(postprocessors, {"name": "separate"})
    assert str(err).startswith("postprocessors must be a list of names or records, got dict")


def test_each_chain_is_fresh_state() -> None:
    first, second = preprocessors(["separate"]), preprocessors(["separate"])
    assert first.process(b"half") == []
    assert second.process(b"other\n") == [b"other"]
    assert first.process(b" line\n") == [b"half line"]


# They need a schema registry to encode: tests/spu/registry/test_registry_codecs.py pickles them.
@pytest.mark.parametrize("name", sorted(set(CODECS) - {"avro", "protobuf", "json_schema"}))
def test_codecs_pickle_as_their_configuration(name: str) -> None:
    """Spark ships codecs to worker processes: a copy must work and keep its config."""
    original = codec(name)
    copy = pickle.loads(pickle.dumps(original))
    assert type(copy) is type(original) and copy.options == original.options
    value = EXAMPLE_VALUES[name]
    assert copy.decode(copy.encode(value)) == value


def test_processors_pickle_with_their_options() -> None:
    post = postprocessors([{"name": "compress", "config": {"algorithm": "zstd", "level": 5}}]).stages[0]
    copy = pickle.loads(pickle.dumps(post))
    assert copy.options == post.options and copy.options.level == 5
    sorted_json = pickle.loads(pickle.dumps(codec({"name": "json", "config": {"mode": "sorted"}})))
    assert sorted_json.encode({"b": 1, "a": 2}) == b'{"a":2,"b":1}'


def test_tremors_other_names_lines_and_json_sorted() -> None:
    assert codec("json-sorted").encode({"b": 1, "a": 2}) == b'{"a":2,"b":1}'
    assert codec({"name": "json-sorted", "config": {}}).encode({"b": 1, "a": 2}) == b'{"a":2,"b":1}'
    assert preprocessors(["lines"]).process(b"x\ny\nz") == [b"x", b"y"]
    assert postprocessors(["lines"]).process(b"x") == [b"x\n"]
