"""The `avro` and `json_schema` codecs against the SPU's registry and confluent-kafka's serializers."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contraflow.codecs import CodecError, ConfigError, codec

EVENT = {
    "type": "record",
    "name": "Event",
    "namespace": "example",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "ratio", "type": "double"},
        {"name": "name", "type": "string"},
        {"name": "payload", "type": "bytes"},
        {"name": "ok", "type": "boolean"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "int"}},
        {"name": "parent", "type": ["null", "long"], "default": None},
        {"name": "level", "type": {"type": "enum", "name": "Level", "symbols": ["LOW", "HIGH"]}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
CONTEXT = SerializationContext("events", MessageField.VALUE)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
EVENTS = st.fixed_dictionaries(
    {
        "id": INT64,
        "ratio": st.floats(allow_nan=False),
        "name": st.text(),
        "payload": st.binary(),
        "ok": st.booleans(),
        "tags": st.lists(st.text(), max_size=4),
        "counts": st.dictionaries(st.text(), INT32, max_size=4),
        "parent": st.none() | INT64,
        "level": st.sampled_from(["LOW", "HIGH"]),
        "at": INT64,
    }
)


def avro_codec(url: str, **config: Any) -> Any:
    return codec({"name": "avro", "config": {"registry": url, **config}})


@pytest.fixture()
def events_codec(registry_url: str) -> Any:
    return avro_codec(registry_url, subject="events-value", schema=EVENT)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=EVENTS)
def test_avro_decode_of_encode_is_the_value(events_codec: Any, value: dict[str, Any]) -> None:
    assert events_codec.decode(events_codec.encode(value)) == value


def test_avro_frames_are_confluent_s_wire_format_both_ways(registry_url: str, events_codec: Any) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    value = {
        "id": 1,
        "ratio": 0.5,
        "name": "a",
        "payload": b"\x00",
        "ok": True,
        "tags": [],
        "counts": {},
        "parent": None,
        "level": "HIGH",
        "at": 1_700_000_000_000,
    }
    ours = events_codec.encode(value)
    schema_id = client.get_latest_version("events-value").schema_id
    assert ours[:5] == b"\x00" + schema_id.to_bytes(4, "big")
    # Confluent's deserializer applies the logical type; the codec keeps the plain long.
    theirs = AvroDeserializer(client)(ours, CONTEXT)
    assert {**theirs, "at": value["at"]} == value and theirs["at"].year == 2023
    written = AvroSerializer(client, json.dumps(EVENT), conf={"auto.register.schemas": False})(
        {**value, "name": "from confluent"}, CONTEXT
    )
    assert avro_codec(registry_url).decode(written) == {**value, "name": "from confluent"}


def test_avro_bad_frames_and_values_are_codec_errors(registry_url: str, events_codec: Any) -> None:
    good = events_codec.encode(
        {
            "id": 1,
            "ratio": 0.5,
            "name": "a",
            "payload": b"",
            "ok": True,
            "tags": [],
            "counts": {},
            "level": "LOW",
            "at": 0,
        }
    )
    decoder = avro_codec(registry_url)
    unknown = b"\x00" + (10_000).to_bytes(4, "big") + good[5:]
    for frame, reason in [
        (unknown, "Schema 10000 not found"),
        (b"\x01" + good[1:], "magic byte 1"),
        (good[:3], "too short"),
        (good + b"\x00", "1 bytes after the record"),
        (good[:-2], "not a record of schema"),
    ]:
        with pytest.raises(CodecError, match=reason):
            decoder.decode(frame)
    with pytest.raises(CodecError, match="cannot encode dict"):
        events_codec.encode({"id": "not a long"})
    with pytest.raises(CodecError, match="needs the config key 'subject'"):
        decoder.encode({"id": 1})
    with pytest.raises(CodecError, match="unreachable"):
        avro_codec("http://127.0.0.1:1").decode(good)


def test_json_schema_codec_checks_documents_both_ways(registry_url: str) -> None:
    order = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    json_codec = codec(
        {
            "name": "json_schema",
            "config": {"registry": registry_url, "subject": "orders-value", "schema": order},
        }
    )
    frame = json_codec.encode({"n": 3})
    assert json_codec.decode(frame) == {"n": 3}
    with pytest.raises(CodecError, match="breaks its schema at n"):
        json_codec.encode({"n": "three"})
    client = SchemaRegistryClient({"url": registry_url})
    written = JSONSerializer(json.dumps(order), client, conf={"auto.register.schemas": False})(
        {"n": 4}, SerializationContext("orders", MessageField.VALUE)
    )
    assert json_codec.decode(written) == {"n": 4}
    with pytest.raises(CodecError, match="breaks its schema at n"):
        json_codec.decode(frame[:5] + b'{"n": 1.5}')


def test_codec_configs_are_checked_and_codecs_pickle_as_their_config() -> None:
    with pytest.raises(ConfigError, match="'registry' must be an http"):
        codec({"name": "avro", "config": {"registry": "127.0.0.1:8081"}})
    with pytest.raises(ConfigError, match="'schema' needs a 'subject'"):
        codec({"name": "json_schema", "config": {"schema": "{}"}})
    built = codec({"name": "avro", "config": {"subject": "s", "schema": EVENT}})
    assert pickle.loads(pickle.dumps(built)).options == built.options


def order_class() -> Any:
    """A Protobuf message class built from a descriptor: `shop.Order`, the file's second message,
    with a nested message, an enum, repeated and 64-bit fields."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="shop/orders.proto", package="shop", syntax="proto3")
    item = file.message_type.add(name="Item")
    item.field.add(name="sku", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    order = file.message_type.add(name="Order")
    order.enum_type.add(name="Status").value.add(name="NEW", number=0)
    order.enum_type[0].value.add(name="PAID", number=1)
    note = order.nested_type.add(name="Note")
    note.field.add(name="text", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    for number, (name, kind, label, type_name) in enumerate(
        [
            ("id", field.TYPE_STRING, field.LABEL_OPTIONAL, ""),
            ("amount", field.TYPE_INT64, field.LABEL_OPTIONAL, ""),
            ("tags", field.TYPE_STRING, field.LABEL_REPEATED, ""),
            ("items", field.TYPE_MESSAGE, field.LABEL_REPEATED, ".shop.Item"),
            ("status", field.TYPE_ENUM, field.LABEL_OPTIONAL, ".shop.Order.Status"),
            ("note", field.TYPE_MESSAGE, field.LABEL_OPTIONAL, ".shop.Order.Note"),
            ("raw", field.TYPE_BYTES, field.LABEL_OPTIONAL, ""),
        ],
        start=1,
    ):
        added = order.field.add(name=name, number=number, type=kind, label=label)
        if type_name:
            added.type_name = type_name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def test_protobuf_codec_reads_and_writes_what_confluent_s_serializers_do(registry_url: str) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    order = order_class()
    client = SchemaRegistryClient({"url": registry_url})
    context = SerializationContext("orders", MessageField.VALUE)
    conf = {"use.deprecated.format": False}
    written = ProtobufSerializer(order, client, conf)(
        order(id="o-1", amount=2**40, tags=["a", "b"], items=[{"sku": "x"}], status=1, raw=b"\x00"), context
    )
    assert written[5:7] == b"\x02\x02"  # one message index (zigzag 1), and it is 1: the second message
    value = {
        "id": "o-1",
        "amount": 2**40,
        "tags": ["a", "b"],
        "items": [{"sku": "x"}],
        "status": "PAID",
        "raw": b"\x00",
    }
    config = {"registry": registry_url, "subject": "orders-value", "message": "shop.Order"}
    proto = codec({"name": "protobuf", "config": config})
    assert proto.decode(written) == value
    ours = proto.encode({**value, "note": {"text": "gift"}})
    assert ours[:7] == written[:7]
    theirs = ProtobufDeserializer(order, conf)(ours, context)
    assert (theirs.note.text, theirs.amount, theirs.status, list(theirs.tags)) == (
        "gift",
        2**40,
        1,
        ["a", "b"],
    )
    assert proto.decode(ours) == {**value, "note": {"text": "gift"}}
    with pytest.raises(CodecError, match="has no field 'nope'"):
        proto.encode({"nope": 1})
    with pytest.raises(CodecError, match="not a shop.Order"):
        proto.decode(written[:7] + b"\xff\xff")
