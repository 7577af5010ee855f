"""Can a reader's Protobuf schema read what a writer's schema wrote? Rules on field numbers and types.

Protobuf finds a field by its number, never its name, and skips numbers it
does not know, so most changes are safe. What breaks a reader, following the
rules Confluent's registry applies to Protobuf:

- a message of the writer that the reader lacks (a record names its message
  by its index in the file, so an added message breaks readers of the old
  file, a removed one readers of the new);
- a changed package (messages are named within it);
- a field number whose type changed across wire-compatible groups (the
  varints int32/uint32/int64/uint64/bool, the zigzag sint32/sint64,
  string/bytes, fixed32/sfixed32, fixed64/sfixed64; a message or enum must
  keep its name), or that went between repeated and single;
- a proto2 `required` field of the reader that the writer does not have.

Removed fields, added optional fields and renamed fields are compatible.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.protobuf.descriptor_pb2 import DescriptorProto, FieldDescriptorProto, FileDescriptorProto

# Scalar types a reader may read in place of each other (descriptor.proto's type numbers).
_GROUPS = (
    frozenset({5, 13, 3, 4, 8}),  # int32, uint32, int64, uint64, bool: plain varints
    frozenset({17, 18}),  # sint32, sint64: zigzag varints
    frozenset({9, 12}),  # string, bytes
    frozenset({7, 15}),  # fixed32, sfixed32
    frozenset({6, 16}),  # fixed64, sfixed64
)
_NAMED = frozenset({11, 14})  # message, enum: compared by name
_REPEATED = 3
_REQUIRED = 2


def _messages(file: FileDescriptorProto) -> dict[str, DescriptorProto]:
    """Every message of the file, nested ones too, by its name within the package."""
    found: dict[str, DescriptorProto] = {}

    def walk(prefix: str, messages: list[DescriptorProto]) -> None:
        for message in messages:
            name = f"{prefix}{message.name}"
            found[name] = message
            walk(f"{name}.", list(message.nested_type))

    walk("", list(file.message_type))
    return found


def _local(type_name: str, package: str) -> str:
    """A field's type name without its leading dot and its file's package."""
    name = type_name.lstrip(".")
    return name.removeprefix(f"{package}.") if package else name


def _field_problems(
    where: str, reader: FieldDescriptorProto, writer: FieldDescriptorProto, packages: tuple[str, str]
) -> list[str]:
    if (reader.label == _REPEATED) != (writer.label == _REPEATED):
        return [f"{where}: field {writer.number} changed between repeated and single"]
    if reader.type in _NAMED or writer.type in _NAMED:
        same = reader.type == writer.type and _local(reader.type_name, packages[0]) == _local(
            writer.type_name, packages[1]
        )
        return [] if same else [f"{where}: field {writer.number} changed its type from {writer.type_name}"]
    if reader.type == writer.type or any({reader.type, writer.type} <= group for group in _GROUPS):
        return []
    return [f"{where}: field {writer.number} changed its type to one of another wire encoding"]


def read_problems(reader: FileDescriptorProto, writer: FileDescriptorProto) -> list[str]:
    """Why data written with `writer` cannot be read with `reader` (empty: it can)."""
    if reader.package != writer.package:
        return [f"the package changed from {writer.package!r} to {reader.package!r}"]
    packages = (reader.package, writer.package)
    readers = _messages(reader)
    problems: list[str] = []
    for name, written in _messages(writer).items():
        read = readers.get(name)
        if read is None:
            problems.append(f"message {name} of the writer is not in the reader")
            continue
        by_number = {field.number: field for field in written.field}
        for field in read.field:
            source = by_number.get(field.number)
            if source is not None:
                problems += _field_problems(name, field, source, packages)
            elif field.label == _REQUIRED:
                problems.append(f"{name}: required field {field.name} is not written")
    return problems
