"""Protobuf schemas as the registry holds them: `.proto` text or a serialized descriptor, compiled.

A Protobuf schema arrives in one of two forms: `.proto` text (what Java
clients and people send) or a `FileDescriptorProto` serialized and in base64
(what confluent-kafka's Python serializer sends). Both are turned into a
`FileDescriptorProto` here: the text by protoc (grpcio-tools ships it as a
library, so no binary is fetched), with the files the schema's `references`
name written beside it and the well-known files grpcio-tools ships on the
include path. The descriptor is what compatibility is judged on and what
`?format=serialized` answers, so a codec never needs a `.proto` compiler.
"""

from __future__ import annotations

import base64
import binascii
import functools
import importlib.resources
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from contraflow.spu.registry.errors import INVALID_SCHEMA, RegistryError

if TYPE_CHECKING:
    from google.protobuf.descriptor_pb2 import FileDescriptorProto

MAIN_FILE = "schema.proto"
"""The name the schema's own file gets when it is compiled (references keep their own names)."""

_protoc = threading.Lock()  # protoc runs in this process: one compile at a time


def serialized(proto: FileDescriptorProto) -> str:
    """The base64 of the serialized descriptor: the `serialized` format of Confluent's registry."""
    return base64.b64encode(proto.SerializeToString()).decode()


def descriptor(text: str, imports: tuple[tuple[str, str], ...] = ()) -> FileDescriptorProto:
    """The schema's descriptor; `imports` are (file name, schema text) of the files it may import
    (its references, each already compiled once). A schema that does not compile is 42201."""
    from_bytes = _from_serialized(text)
    if from_bytes is not None:
        return from_bytes
    return _compiled(text, imports)


def _from_serialized(text: str) -> FileDescriptorProto | None:
    """The descriptor when `text` is a serialized one in base64; None when it is `.proto` text."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    stripped = text.strip()
    if not stripped or "\n" in stripped or " " in stripped:
        return None  # .proto text has blanks; base64 has none
    try:
        found = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(stripped, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        return None
    return found if found.name else None


@functools.lru_cache(maxsize=256)
def _compiled(text: str, imports: tuple[tuple[str, str], ...]) -> FileDescriptorProto:
    """`.proto` text through protoc into a descriptor (cached: a schema's text never changes)."""
    from google.protobuf import descriptor_pb2
    from grpc_tools import _protoc_compiler, protoc

    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory(prefix="contraflow-proto-") as root, _protoc:
        for name, imported in ((MAIN_FILE, text), *imports):
            path = Path(root, name)
            if not path.resolve().is_relative_to(Path(root).resolve()):
                raise RegistryError(
                    INVALID_SCHEMA, f"Invalid schema: reference name {name!r} leaves its folder"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(_source(imported, name))
        out = Path(root, "descriptor.pb")
        args = ["protoc", f"-I{root}", f"-I{well_known}", f"--descriptor_set_out={out}", MAIN_FILE]
        if protoc.main(args) != 0:
            try:  # the same compile again, for its errors as values (main only prints them)
                _protoc_compiler.get_protos(MAIN_FILE.encode(), [root.encode(), well_known.encode()])
            except _protoc_compiler.ProtocErrors as err:
                raise RegistryError(INVALID_SCHEMA, f"Invalid schema: {_reasons(err)}") from None
            raise RegistryError(INVALID_SCHEMA, "Invalid schema: protoc refused it") from None
        found = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return found.file[-1]


def _source(text: str, name: str) -> str:
    """A file's `.proto` text: protoc reads only text, so a reference must be `.proto` text."""
    if name != MAIN_FILE and _from_serialized(text) is not None:
        raise RegistryError(
            INVALID_SCHEMA,
            f"Invalid schema: the reference {name} is a serialized descriptor, not .proto text",
        )
    return text


def _reasons(err: object) -> str:
    """protoc's errors as `line:column: message` (lines and columns from 1)."""
    found = []
    for one in err.errors():  # type: ignore[attr-defined]
        message = one.message.decode() if isinstance(one.message, bytes) else str(one.message)
        found.append(f"{one.line + 1}:{one.column + 1}: {message}")
    return "; ".join(found)
