"""What the `avro`, `protobuf` and `json_schema` codecs share: Confluent's wire format and registry lookups.

A record in the wire format is the magic byte 0, the schema id as a 4-byte
big-endian integer, then the body in the schema's encoding. The codecs ask a
schema registry (the SPU's, or any Confluent-compatible one) for a schema by
id once and keep it: ids never change their schema. Encoding takes the schema
of a configured subject, registering the configured `schema` there first when
one is given (as Confluent's serializers do with auto-registration). A schema's
`references` (Avro named types, Protobuf imports) are fetched with it, by
subject and version, before it is parsed.

A registry that cannot be reached, or answers that it has no such schema, is
a `CodecError`: the frame becomes an `err` event, as any bad data does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import orjson

from contraflow.codecs.config import BadValue
from contraflow.codecs.errors import CodecError
from contraflow.security import client_tls, client_token

if TYPE_CHECKING:
    import httpx

MAGIC = 0
HEADER = struct.Struct(">bI")
HEADER_SIZE = HEADER.size
TIMEOUT_S = 10.0
MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_REFERENCE_DEPTH = 32

Imports = tuple[tuple[str, str], ...]
"""(reference name, schema text) of what a schema refers to, each after what it refers to itself."""


@dataclass(frozen=True)
class RegistryOptions:
    """`registry`: the registry's URL; `subject`: where encoding finds its schema (its latest
    version), `schema`: registered under `subject` first, then encoded with."""

    registry: str = "http://127.0.0.1:8081"
    subject: str | None = None
    schema: str | dict | None = field(
        default=None, hash=False
    )  # a bare `dict`: the config check calls isinstance

    def __post_init__(self) -> None:
        if not self.registry.startswith(("http://", "https://")):
            raise BadValue("registry", f"must be an http:// or https:// URL, got {self.registry!r}")
        if self.schema is not None and self.subject is None:
            raise BadValue("schema", "needs a 'subject' to be registered under")

    def schema_text(self) -> str | None:
        """The configured schema as registry text (Troy may write it as a record)."""
        if self.schema is None or isinstance(self.schema, str):
            return self.schema
        return orjson.dumps(self.schema).decode()


def schema_id_of(codec: str, data: bytes | memoryview) -> int:
    """The schema id of a wire-format record (its body starts at HEADER_SIZE); a `CodecError`
    when it is not one."""
    if len(data) < HEADER.size:
        raise CodecError(codec, f"a record of {len(data)} bytes is too short for the wire format's header")
    magic, schema_id = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CodecError(codec, f"unknown magic byte {magic} (the wire format starts with 0)")
    return int(schema_id)


def frame_header(schema_id: int) -> bytes:
    return HEADER.pack(MAGIC, schema_id)


class RegistryClient:
    """Synchronous lookups with a cache; one per codec instance (codecs are not shared by threads)."""

    def __init__(
        self, codec: str, options: RegistryOptions, schema_type: str, form: str | None = None
    ) -> None:
        self.codec = codec
        self.options = options
        self.schema_type = schema_type
        self.form = form  # `serialized`: Protobuf schemas as descriptors, whatever form they came in
        self._http: httpx.Client | None = None
        self._by_id: dict[int, tuple[str, Imports]] = {}

    def _client(self) -> httpx.Client:
        if self._http is None:  # opened on first use: building a codec to check a config costs nothing
            import httpx  # imported here: `contraflow check` builds codecs, and needs no HTTP client

            token = client_token()
            headers = {"Accept": MEDIA_TYPE, **({"Authorization": f"Bearer {token}"} if token else {})}
            self._http = httpx.Client(
                base_url=self.options.registry,
                headers=headers,
                timeout=TIMEOUT_S,
                verify=client_tls() or True,
            )
        return self._http

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        import httpx

        try:
            response = self._client().request(
                method,
                path,
                content=None if body is None else orjson.dumps(body),
                headers={"Content-Type": MEDIA_TYPE},
            )
        except httpx.HTTPError as err:
            raise CodecError(
                self.codec, f"schema registry {self.options.registry} unreachable: {err}"
            ) from None
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise CodecError(self.codec, f"schema registry: {message} (HTTP {response.status_code})")
        return response.json()

    def _get(self, path: str) -> Any:
        """A GET of the registry, in the schema form the codec reads (`format`)."""
        return self._call("GET", path if self.form is None else f"{path}?format={self.form}")

    def schema(self, schema_id: int) -> str:
        """The text of schema `schema_id` (asked once, then cached)."""
        return self.resolved(schema_id)[0]

    def resolved(self, schema_id: int) -> tuple[str, Imports]:
        """The text of schema `schema_id` and what it refers to (asked once, then cached)."""
        found = self._by_id.get(schema_id)
        if found is None:
            answer = self._get(f"/schemas/ids/{schema_id}")
            if (answer.get("schemaType") or "AVRO") != self.schema_type:
                raise CodecError(
                    self.codec, f"schema {schema_id} is {answer.get('schemaType')}, not {self.schema_type}"
                )
            imports: dict[str, str] = {}
            self._add_imports(answer.get("references") or (), imports, depth=0)
            found = self._by_id[schema_id] = (str(answer["schema"]), tuple(imports.items()))
        return found

    def _add_imports(self, references: Any, found: dict[str, str], depth: int) -> None:
        """The schemas `references` name, each after the ones it refers to itself."""
        if depth > MAX_REFERENCE_DEPTH:
            raise CodecError(self.codec, "schema references nest too deep (a cycle?)")
        for reference in references:
            if reference["name"] in found:
                continue
            subject = quote(reference["subject"], safe="")
            answer = self._get(f"/subjects/{subject}/versions/{reference['version']}")
            self._add_imports(answer.get("references") or (), found, depth + 1)
            found[reference["name"]] = str(answer["schema"])

    def writer_schema(self) -> int:
        """The id of the schema encoding uses: the configured one, registered, else the subject's latest."""
        subject = self.options.subject
        if subject is None:
            raise CodecError(self.codec, "encoding needs the config key 'subject'")
        path = f"/subjects/{quote(subject, safe='')}"
        text = self.options.schema_text()
        if text is not None:
            answer = self._call("POST", f"{path}/versions", {"schema": text, "schemaType": self.schema_type})
        else:
            answer = self._call("GET", f"{path}/versions/latest")
        return int(answer["id"])

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None
