"""The registry's REST API driven by confluent-kafka's own `SchemaRegistryClient`, serializers and raw HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from tests.cli_process import start_cli

from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.registry import ThreadedRegistry

USER_V1 = {
    "type": "record",
    "name": "User",
    "namespace": "example",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
# BACKWARD-compatible: the new field has a default, so v2 reads what v1 wrote.
USER_V2 = {**USER_V1, "fields": [*USER_V1["fields"], {"name": "email", "type": "string", "default": ""}]}
# Not: v3 needs a field v1's data lacks.
USER_V3 = {**USER_V1, "fields": [{"name": "name", "type": "string"}, {"name": "zip", "type": "int"}]}
CONTEXT = SerializationContext("users", MessageField.VALUE)


def avro(schema: dict[str, Any]) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


def refusal(call: Any) -> tuple[int, int]:
    """(HTTP status, the registry's error code) of a call the registry refuses."""
    with pytest.raises(SchemaRegistryError) as caught:
        call()
    return caught.value.http_status_code, caught.value.error_code


def test_confluent_client_registers_versions_and_refuses_an_incompatible_schema(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    first = client.register_schema("users-value", avro(USER_V1))
    assert client.register_schema("users-value", avro(USER_V1)) == first  # the same schema: the same id
    assert client.register_schema("other-value", avro(USER_V1)) == first  # one schema, one id everywhere
    second = client.register_schema("users-value", avro(USER_V2))
    assert second != first
    assert client.get_subjects() == ["other-value", "users-value"]
    assert client.get_versions("users-value") == [1, 2]
    latest = client.get_latest_version("users-value")
    assert (latest.version, latest.schema_id, json.loads(latest.schema.schema_str)) == (2, second, USER_V2)
    assert client.lookup_schema("users-value", avro(USER_V1)).version == 1

    assert client.test_compatibility("users-value", avro(USER_V3)) is False
    assert refusal(lambda: client.register_schema("users-value", avro(USER_V3))) == (409, 409)
    # FORWARD asks the other way round: v1 must read v3's data, which it cannot either (no `age`).
    client.set_compatibility("users-value", "FORWARD")
    assert refusal(lambda: client.register_schema("users-value", avro(USER_V3))) == (409, 409)
    client.set_compatibility("users-value", "NONE")
    assert client.get_compatibility("users-value") == "NONE"
    third = client.register_schema("users-value", avro(USER_V3))
    assert client.get_versions("users-value") == [1, 2, 3] and third == second + 1


def test_serializers_write_the_wire_format_and_read_it_back(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    encoded = AvroSerializer(client, json.dumps(USER_V1))({"name": "ada", "age": 36}, CONTEXT)
    schema_id = client.get_latest_version("users-value").schema_id
    assert encoded[:5] == b"\x00" + schema_id.to_bytes(4, "big")
    assert AvroDeserializer(client)(encoded, CONTEXT) == {"name": "ada", "age": 36}

    order = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    json_context = SerializationContext("orders", MessageField.VALUE)
    written = JSONSerializer(json.dumps(order), client)({"n": 7}, json_context)
    assert JSONDeserializer(json.dumps(order), schema_registry_client=client)(written, json_context) == {
        "n": 7
    }
    assert client.get_latest_version("orders-value").schema.schema_type == "JSON"


def test_soft_then_hard_deletes_and_the_error_codes(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    first = client.register_schema("users-value", avro(USER_V1))
    client.register_schema("users-value", avro(USER_V2))
    assert refusal(lambda: client.delete_version("users-value", 1, permanent=True)) == (404, 40407)
    assert client.delete_version("users-value", 1) == 1
    assert client.get_versions("users-value") == [2]
    assert refusal(lambda: client.get_version("users-value", 1)) == (404, 40402)
    assert client.get_schema(first).schema_str  # a soft-deleted version's schema id still resolves
    assert refusal(lambda: client.delete_subject("users-value", permanent=True)) == (404, 40405)
    assert client.delete_subject("users-value") == [2]
    assert client.get_subjects() == []
    assert refusal(lambda: client.get_versions("users-value")) == (404, 40401)
    assert client.delete_subject("users-value", permanent=True) == [1, 2]

    def raw(method: str, path: str, body: Any = None) -> tuple[int, Any]:
        response = httpx.request(method, registry_url + path, json=body)
        return response.status_code, response.json()

    # (asked by hand: the client would answer from its cache)
    assert raw("GET", f"/schemas/ids/{first}")[1]["error_code"] == 40403

    assert raw("POST", "/subjects/x/versions", {"schema": '{"type": "recrd"}'})[1]["error_code"] == 42201
    assert raw("GET", "/subjects/x/versions/zero")[1]["error_code"] == 42202
    assert raw("PUT", "/config", {"compatibility": "SIDEWAYS"})[1]["error_code"] == 42203
    assert raw("GET", "/config/x")[1]["error_code"] == 40408
    assert raw("GET", "/config/x?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})
    assert raw("GET", "/schemas/types")[1] == ["AVRO", "JSON", "PROTOBUF"]


@contextmanager
def spu_with_registry(data_dir: Path, token: str) -> Iterator[str]:
    """`contraflow spu run --registry-addr` in a child process: yields the registry's URL."""
    proc: subprocess.Popen[str] = start_cli(
        *(
            "spu",
            "run",
            "--data-dir",
            data_dir,
            "--public-addr",
            "127.0.0.1:0",
            "--private-addr",
            "127.0.0.1:0",
        ),
        *("--registry-addr", "127.0.0.1:0", "--token", token, "--no-scrub"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert " registry=" in line, proc.communicate(timeout=10)[1]
    try:
        yield "http://" + line.split(" registry=")[1].split()[0]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_spu_run_serves_the_registry_behind_its_token_and_it_keeps_its_data_across_a_restart(
    tmp_path: Path,
) -> None:
    with spu_with_registry(tmp_path, "s3cret") as url:
        assert httpx.get(url + "/subjects").status_code == 401
        wrong = SchemaRegistryClient({"url": url, "basic.auth.user.info": "anyone:guess"})
        assert refusal(wrong.get_subjects) == (401, 40101)
        client = SchemaRegistryClient({"url": url, "basic.auth.user.info": "anyone:s3cret"})
        first = client.register_schema("users-value", avro(USER_V1))
        second = client.register_schema("users-value", avro(USER_V2))
        client.set_compatibility("users-value", "FULL")
        client.delete_version("users-value", 1)
    # the restart: the same data directory, served this time by an SPU and a registry in this process
    with EmbeddedSpu(tmp_path) as spu:
        registry = ThreadedRegistry(spu.addr)
        try:
            client = SchemaRegistryClient({"url": registry.url})
            assert client.get_versions("users-value") == [2]
            assert client.get_latest_version("users-value").schema_id == second
            assert json.loads(client.get_schema(first).schema_str) == USER_V1  # soft-deleted, resolvable
            assert client.get_compatibility("users-value") == "FULL"
            other = {**USER_V1, "name": "Other"}
            assert client.register_schema("other-value", avro(other)) == second + 1  # ids are never reused
        finally:
            registry.stop()


def test_records_the_registry_did_not_write_are_skipped(registry_spu: EmbeddedSpu) -> None:
    with SpuClient(registry_spu.addr) as spu:
        spu.create_topic("schemas-foreign")
        good = avro(USER_V1).schema_str
        key = b'{"keytype":"SCHEMA","subject":"s","version":1}'
        record = json.dumps({"subject": "s", "version": 1, "id": 1, "schema": good}).encode()
        spu.produce("schemas-foreign", 0, [b"not json", b"{}", record], [None, b"[1]", key])
    registry = ThreadedRegistry(registry_spu.addr, topic="schemas-foreign")
    try:
        assert SchemaRegistryClient({"url": registry.url}).get_versions("s") == [1]
    finally:
        registry.stop()
