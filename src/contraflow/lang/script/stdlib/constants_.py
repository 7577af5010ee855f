"""Library modules that hold only constants: `std::integer::signed`/`unsigned`,
`std::datetime::formats`, `tremor::mime`, `tremor::windows` (values as in Tremor's standard library)."""

from __future__ import annotations

from contraflow.lang.script.stdlib import tremor_const

tremor_const("integer::signed::MAX", 9_223_372_036_854_775_807)
tremor_const("integer::signed::MIN", -9_223_372_036_854_775_808)
tremor_const("integer::unsigned::MAX", 18_446_744_073_709_551_615)
tremor_const("integer::unsigned::MIN", 0)

tremor_const("datetime::formats::RFC3339", "%Y-%m-%dT%H:%M:%S%.f%:z")
tremor_const("datetime::formats::RFC2822", "%a, %d %b %Y %H:%M:%S %z")
tremor_const("datetime::formats::RFC5322", "%a, %d %b %Y %H:%M:%S %z")

tremor_const(
    "mime::MIME_TO_CODEC",
    {
        "application/json": "json",
        "application/yaml": "yaml",
        "text/csv": "csv",
        "text/plain": "string",
        "text/html": "string",
        "text/syslog": "syslog",
        "application/msgpack": "msgpack",
        "application/x-msgpack": "msgpack",
        "application/vnd.msgpack": "msgpack",
        "application/octet-stream": "binary",
    },
)
tremor_const(
    "mime::CODEC_TO_MIME",
    {
        "json-sorted": "application/json",
        "json": "application/json",
        "csv": "text/csv",
        "string": "text/plain",
        "msgpack": "application/msgpack",
        "yaml": "application/yaml",
        "binary": "application/octet-stream",
        "syslog": "text/plain",
        "influx": "text/plain",
        "binflux": "application/octet-stream",
        "statsd": "text/plain",
        "dogstatsd": "text/plain",
    },
)
tremor_const("mime::ANY", "*/*")
tremor_const("mime::AMY", "*/*")  # Tremor keeps this misspelling for compatibility

# Answers of a state window's script (Tremor 0.13's `tremor::windows`).
tremor_const("windows::EMIT_AND_INCLUDE", [True, True])
tremor_const("windows::EMIT_AND_EXCLUDE", [True, False])
tremor_const("windows::DONT_EMIT", False)
