"""The `protobuf` codec: Protobuf messages in Confluent's wire format, schemas from a schema registry.

After the schema id come the message indexes (which message of the schema's
file: a zigzag varint count, then one zigzag varint per nesting level; the
first message is the single byte 0), then the message. Schemas are asked of
the registry in Confluent's `serialized` format (a `FileDescriptorProto` in
base64), so a schema registered as `.proto` text (as Java clients do) is
compiled once by the registry, not here; the files it imports are its
`references` and protobuf's well-known files.

Values: a message is a record of its fields (scalars with their default when
unset, message and `optional` fields only when set), repeated fields lists,
maps records, enums their names, bytes `bytes`, 64-bit integers plain ints.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError
from contraflow.codecs.schema_registry import (
    HEADER_SIZE,
    Imports,
    RegistryClient,
    RegistryOptions,
    frame_header,
    schema_id_of,
)

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
    from google.protobuf.descriptor_pb2 import FileDescriptorProto
    from google.protobuf.message import Message


@dataclass(frozen=True)
class ProtobufOptions(RegistryOptions):
    """`message`: the full name of the message encoding writes (default: the file's first)."""

    message: str | None = None


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _unzigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise ValueError("the message indexes end early")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def read_indexes(data: bytes, pos: int) -> tuple[tuple[int, ...], int]:
    """The message indexes at `pos` and where the message starts."""
    count, pos = _read_varint(data, pos)
    count = _unzigzag(count)
    if count == 0:
        return (0,), pos
    indexes = []
    for _ in range(count):
        index, pos = _read_varint(data, pos)
        indexes.append(_unzigzag(index))
    return tuple(indexes), pos


def write_indexes(indexes: tuple[int, ...]) -> bytes:
    if indexes == (0,):
        return b"\x00"
    return _varint(_zigzag(len(indexes))) + b"".join(_varint(_zigzag(i)) for i in indexes)


def load_file(codec: str, text: str, imports: Imports = ()) -> FileDescriptor:
    """The schema's file in a pool of its own, with the files it imports: its references (given,
    each after what it imports) and the well-known files protobuf ships."""
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    given = {name: _descriptor(codec, imported, name) for name, imported in imports}
    added: set[str] = set()

    def add(proto: FileDescriptorProto) -> None:
        for dependency in proto.dependency:
            if dependency in added:
                continue
            added.add(dependency)
            if dependency in given:
                add(given[dependency])
            else:
                pool.AddSerializedFile(_well_known(codec, dependency))
        pool.Add(proto)

    main = _descriptor(codec, text)
    add(main)
    return pool.FindFileByName(main.name)


def _descriptor(codec: str, text: str, name: str | None = None) -> FileDescriptorProto:
    """A serialized descriptor; `name`: the file name its importers know it by (a registry names
    each schema's own file alike, whatever it is imported as)."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    try:
        found = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        raise CodecError(
            codec, "the registry answered .proto text where a serialized descriptor was asked for"
        ) from None
    if name is not None:
        found.name = name
    return found


def _well_known(codec: str, name: str) -> bytes:
    """A well-known file (google/protobuf/timestamp.proto, ...) as protobuf's own modules hold it."""
    import importlib

    from google.protobuf import descriptor_pool

    module = name.removesuffix(".proto").replace("/", ".") + "_pb2"
    try:
        importlib.import_module(module)
        return bytes(descriptor_pool.Default().FindFileByName(name).serialized_pb)
    except (ImportError, KeyError):
        raise CodecError(
            codec, f"the schema imports {name}, neither a reference nor a well-known file"
        ) from None


def message_at(file: FileDescriptor, indexes: tuple[int, ...]) -> Descriptor:
    """The message the indexes name: the file's message, then nested ones."""
    found = list(file.message_types_by_name.values())[indexes[0]]
    for index in indexes[1:]:
        found = found.nested_types[index]
    return found


def indexes_of(message: Descriptor) -> tuple[int, ...]:
    path: list[int] = []
    while message.containing_type is not None:
        path.append(message.containing_type.nested_types.index(message))
        message = message.containing_type
    path.append(list(message.file.message_types_by_name.values()).index(message))
    return tuple(reversed(path))


def to_value(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        if field.has_presence and not message.HasField(field.name):
            continue
        value = getattr(message, field.name)
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {key: _single(value_field, item) for key, item in value.items()}
        elif field.is_repeated:
            out[field.name] = [_single(field, item) for item in value]
        else:
            out[field.name] = _single(field, value)
    return out


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _single(field: FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None:
        return to_value(value)
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)
        return value if known is None else known.name
    return value


def fill(message: Message, value: Any) -> None:
    """Set `message`'s fields from a record (unknown keys and wrong types raise ValueError/TypeError)."""
    if not isinstance(value, dict):
        raise TypeError(f"{message.DESCRIPTOR.full_name} needs a record, got {type(value).__name__}")
    fields = message.DESCRIPTOR.fields_by_name
    for key, item in value.items():
        field = fields.get(key)
        if field is None:
            raise ValueError(f"{message.DESCRIPTOR.full_name} has no field {key!r}")
        if item is None:
            continue
        target = getattr(message, key)
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            for map_key, map_item in item.items():
                if value_field.message_type is not None:
                    fill(target[map_key], map_item)
                else:
                    target[map_key] = _scalar(value_field, map_item)
        elif field.is_repeated:
            for element in item:
                if field.message_type is not None:
                    fill(target.add(), element)
                else:
                    target.append(_scalar(field, element))
        elif field.message_type is not None:
            fill(target, item)
        else:
            setattr(message, key, _scalar(field, item))


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    if field.enum_type is not None and isinstance(value, str):
        known = field.enum_type.values_by_name.get(value)
        if known is None:
            raise ValueError(f"{field.enum_type.full_name} has no value {value!r}")
        return known.number
    return value


class ProtobufCodec(Codec[ProtobufOptions]):
    name = "protobuf"
    mime_types = ("application/vnd.confluent.protobuf",)

    def setup(self) -> None:
        self._registry = RegistryClient(self.name, self.options, "PROTOBUF", form="serialized")
        self._files: dict[int, FileDescriptor] = {}
        self._classes: dict[tuple[int, tuple[int, ...]], Any] = {}
        self._writer: tuple[bytes, Any] | None = None  # (header with the indexes, message class)

    def _class(self, schema_id: int, indexes: tuple[int, ...]) -> Any:
        from google.protobuf import message_factory

        found = self._classes.get((schema_id, indexes))
        if found is None:
            file = self._files.get(schema_id)
            if file is None:
                file = self._files[schema_id] = load_file(self.name, *self._registry.resolved(schema_id))
            try:
                descriptor = message_at(file, indexes)
            except IndexError:
                raise CodecError(self.name, f"schema {schema_id} has no message at {list(indexes)}") from None
            found = self._classes[(schema_id, indexes)] = message_factory.GetMessageClass(descriptor)
        return found

    def decode(self, data: bytes) -> Any:
        from google.protobuf.message import DecodeError

        schema_id = schema_id_of(self.name, data)
        try:
            indexes, start = read_indexes(data, HEADER_SIZE)
        except ValueError as err:
            raise CodecError(self.name, str(err)) from None
        message = self._class(schema_id, indexes)()
        try:
            message.ParseFromString(data[start:])
        except DecodeError as err:
            raise CodecError(
                self.name, f"not a {message.DESCRIPTOR.full_name} of schema {schema_id}: {err}"
            ) from None
        return to_value(message)

    def encode(self, value: Any) -> bytes:
        if self._writer is None:
            schema_id = self._registry.writer_schema()
            file = self._files[schema_id] = load_file(self.name, *self._registry.resolved(schema_id))
            wanted = self.options.message
            try:
                descriptor = (
                    list(file.message_types_by_name.values())[0]
                    if wanted is None
                    else file.pool.FindMessageTypeByName(wanted)
                )
            except (KeyError, IndexError):
                raise CodecError(
                    self.name, f"schema {schema_id} has no message {wanted or '(none)'}"
                ) from None
            indexes = indexes_of(descriptor)
            self._writer = (frame_header(schema_id) + write_indexes(indexes), self._class(schema_id, indexes))
        header, message_class = self._writer
        message = message_class()
        try:
            fill(message, value)
        except (TypeError, ValueError, AttributeError) as err:
            raise CodecError(self.name, f"cannot encode as {message.DESCRIPTOR.full_name}: {err}") from None
        return header + message.SerializeToString()
