"""Protobuf `.proto` text, compatibility beyond Avro, and schema references, through confluent-kafka's
`SchemaRegistryClient` and deserializers and the codecs."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from contraflow.codecs import codec

ITEM_PROTO = """syntax = "proto3";
package shop;
message Item { string sku = 1; int32 count = 2; }
"""
# What a Java client registers: .proto text, importing a reference and a well-known file.
ORDER_PROTO = """syntax = "proto3";
package shop;
import "shop/item.proto";
import "google/protobuf/timestamp.proto";

message Order {
  string id = 1;
  int64 amount = 2;
  repeated Item items = 3;
  google.protobuf.Timestamp at = 4;
}
"""
ITEM_REFERENCE = SchemaReference("shop/item.proto", "item-value", 1)


def refusal(call: Any) -> tuple[int, str]:
    """(the registry's error code, its message) of a call the registry refuses."""
    with pytest.raises(SchemaRegistryError) as caught:
        call()
    return caught.value.error_code, caught.value.error_message


def proto(text: str, references: list[SchemaReference] | None = None) -> Schema:
    return Schema(text, "PROTOBUF", references or [])


def serialized(url: str) -> Any:
    return httpx.get(url, params={"format": "serialized"}).raise_for_status().json()


def message_class(registry_url: str, schema_id: int, name: str) -> Any:
    """The message class a consumer would generate, built from the registry's serialized form."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    answer = serialized(f"{registry_url}/schemas/ids/{schema_id}")
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    for reference in answer["references"]:
        found = serialized(f"{registry_url}/subjects/{reference['subject']}/versions/{reference['version']}")
        imported = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(found["schema"]))
        imported.name = reference["name"]  # what the importing file calls it
        pool.Add(imported)
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(answer["schema"])))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def test_proto_text_with_an_import_and_a_reference_is_compiled_and_coded(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    client.register_schema("item-value", proto(ITEM_PROTO))
    order_id = client.register_schema("orders-value", proto(ORDER_PROTO, [ITEM_REFERENCE]))
    assert client.get_schema(order_id).schema_str == ORDER_PROTO  # kept as sent
    config = {"registry": registry_url, "subject": "orders-value", "message": "shop.Order"}
    orders = codec({"name": "protobuf", "config": config})
    value = {
        "id": "o-1",
        "amount": 2**40,
        "items": [{"sku": "a", "count": 2}],
        "at": {"seconds": 1_700_000_000, "nanos": 5},
    }
    frame = orders.encode(value)
    assert frame[:6] == b"\x00" + order_id.to_bytes(4, "big") + b"\x00"
    theirs = ProtobufDeserializer(
        message_class(registry_url, order_id, "shop.Order"), {"use.deprecated.format": False}
    )(frame, SerializationContext("orders", MessageField.VALUE))
    assert (theirs.items[0].sku, theirs.amount, theirs.at.nanos) == ("a", 2**40, 5)
    reader = codec({"name": "protobuf", "config": {"registry": registry_url}})
    assert reader.decode(frame) == {**value, "items": [{"sku": "a", "count": 2}]}

    code, message = refusal(
        lambda: client.register_schema(
            "bad-value", proto('syntax = "proto3";\nmessage X { strin id = 1; }\n')
        )
    )
    assert code == 42201 and '"strin" is not defined' in message
    code, message = refusal(lambda: client.register_schema("orders-value", proto(ORDER_PROTO)))
    assert code == 42201 and "shop/item.proto" in message  # the import without its reference


def test_protobuf_compatibility_follows_field_numbers_and_messages(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    client.register_schema("items-value", proto(ITEM_PROTO))
    added_and_renamed = ITEM_PROTO.replace("int32 count = 2;", "int64 quantity = 2; string note = 3;")
    assert client.test_compatibility("items-value", proto(added_and_renamed)) is True
    retyped = ITEM_PROTO.replace("int32 count", "string count")
    assert client.test_compatibility("items-value", proto(retyped)) is False
    assert refusal(lambda: client.register_schema("items-value", proto(retyped)))[0] == 409
    extra_message = ITEM_PROTO + "message Box { repeated Item items = 1; }\n"
    assert client.test_compatibility("items-value", proto(extra_message)) is True  # BACKWARD: new reads old
    client.set_compatibility("items-value", "FULL")
    code, message = refusal(lambda: client.register_schema("items-value", proto(extra_message)))
    assert code == 409 and "FORWARD: message Box of the writer is not in the reader" in message
    client.register_schema(
        "items-value", proto(ITEM_PROTO.replace("int32 count = 2;", ""))
    )  # a removed field


def json_schema(document: dict[str, Any]) -> Schema:
    return Schema(json.dumps(document), "JSON")


def test_json_schema_compatibility_follows_open_and_closed_content_models(registry_url: str) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    n = {"n": {"type": "integer"}}
    note = {"note": {"type": "string"}}
    client.register_schema("open-value", json_schema({"type": "object", "properties": n}))
    closed = {"type": "object", "properties": n, "additionalProperties": False}
    client.register_schema("closed-value", json_schema(closed))

    def compatible(subject: str, document: dict[str, Any]) -> bool:
        return bool(client.test_compatibility(subject, json_schema(document)))

    # Open model: the old documents may carry any `note`, so a new typed `note` is refused; removing is safe.
    assert not compatible("open-value", {"type": "object", "properties": {**n, **note}})
    assert compatible("open-value", {"type": "object", "properties": {}})
    assert compatible("open-value", {"type": "object", "properties": {"n": {"type": "number"}}})
    assert not compatible("open-value", {"type": "object", "properties": n, "required": ["n"]})
    # Closed model: no old document has `note`, so adding it is safe; removing `n` is not.
    assert compatible("closed-value", {**closed, "properties": {**n, **note}})
    assert not compatible("closed-value", {**closed, "properties": {}})
    assert not compatible("closed-value", {**closed, "properties": {"n": {"type": "integer", "maximum": 9}}})
    code, message = refusal(
        lambda: client.register_schema("closed-value", json_schema({**closed, "properties": {}}))
    )
    assert code == 409 and "$.n" in message
    client.set_compatibility("closed-value", "FORWARD")  # the old schema must read the new one's documents
    client.register_schema("closed-value", json_schema({**closed, "properties": {}}))


ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "example",
    "fields": [{"name": "city", "type": "string"}],
}
PERSON = {
    "type": "record",
    "name": "Person",
    "namespace": "example",
    "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "example.Address"}],
}


def test_avro_references_resolve_named_types_for_the_registry_the_codec_and_confluent(
    registry_url: str,
) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    client.register_schema("address-value", Schema(json.dumps(ADDRESS), "AVRO"))
    reference = SchemaReference("example.Address", "address-value", 1)
    person = Schema(json.dumps(PERSON), "AVRO", [reference])
    person_id = client.register_schema("people-value", person)
    code, _ = refusal(lambda: client.register_schema("lonely-value", Schema(json.dumps(PERSON), "AVRO")))
    assert code == 42201  # example.Address is unknown without its reference
    people = codec({"name": "avro", "config": {"registry": registry_url, "subject": "people-value"}})
    value = {"name": "ada", "home": {"city": "London"}}
    frame = people.encode(value)
    assert frame[:5] == b"\x00" + person_id.to_bytes(4, "big")
    assert people.decode(frame) == value
    assert AvroDeserializer(client)(frame, SerializationContext("people", MessageField.VALUE)) == value
    code, message = refusal(lambda: client.delete_version("address-value", 1))
    assert code == 42206 and "people-value version 1" in message  # its readers still need it
    client.delete_subject("people-value")
    assert client.delete_version("address-value", 1) == 1


@pytest.mark.parametrize(
    ("reader", "writer", "readable"),
    [
        ({"enum": ["a", "b"]}, {"enum": ["a"]}, True),
        ({"enum": ["a"]}, {"enum": ["a", "b"]}, False),
        ({"type": ["string", "null"]}, {"type": "string", "maxLength": 3}, True),
        ({"type": "string", "maxLength": 2}, {"type": "string", "maxLength": 3}, False),
        ({"type": "string", "pattern": "^a"}, {"type": "string"}, False),
        (
            {"type": "array", "items": {"type": "number"}},
            {"type": "array", "items": {"type": "integer"}},
            True,
        ),
        (
            {"type": "array", "items": {"type": "integer"}},
            {"type": "array", "items": {"type": "number"}},
            False,
        ),
        ({"anyOf": [{"type": "string"}]}, {"anyOf": [{"type": "integer"}]}, False),  # not provable: refused
        ({"title": "any document"}, {"type": "integer"}, True),
    ],
)
def test_json_schema_rules_keyword_by_keyword(reader: Any, writer: Any, readable: bool) -> None:
    from contraflow.spu.registry.json_schema_compatibility import read_problems

    assert (not read_problems(reader, writer)) is readable
