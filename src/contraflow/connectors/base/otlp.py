"""OTLP export requests as Tremor's otel events, and back (otel_server, otel_client).

Tremor gives each export request as one event keyed by its signal:
`{"logs": [resource_logs...]}`, `{"metrics": [resource_metrics...]}`,
`{"trace": [resource_spans...]}`, each message a record of its proto fields
under their proto names (every field, defaults included), with these
spellings of its own, which a pipeline reads more easily than proto JSON:

- attributes (`KeyValue` lists: `attributes`, `filtered_attributes`) are a
  record `{key: value}`, and an `AnyValue` is the plain value it holds (a
  string, number, bool, list, record, bytes or null);
- trace and span ids are lower-case hex strings;
- a oneof of numbers (`NumberDataPoint.value`, `Exemplar.value`: `as_int` or
  `as_double`) is the number under the oneof's name, its type choosing the
  field on the way back; a oneof of messages (`Metric.data`) is
  `{"data": {"gauge": {...}}}`;
- enums are their numbers, a message field not set is null, and proto3
  `optional` fields (a histogram point's `sum`, `min`, `max`) are left out
  when not set.

The mapping walks the messages' descriptors, so every field of the OTLP
version `opentelemetry-proto` generates is carried, both ways, without a
hand-written case per message. Going back, keys the message has no field for
are ignored (as Tremor does), OTLP's names before 0.15 are read where the
current ones are absent (`instrumentation_library_spans` for `scope_spans`,
`instrumentation_library` for `scope`: Tremor 0.12's events), and a value of
the wrong type is an `OtlpShapeError` naming where it is
(`trace[0].scope_spans[0].spans[1].span_id`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor, OneofDescriptor
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2

ANY_VALUE = common_pb2.AnyValue.DESCRIPTOR.full_name
KEY_VALUE = common_pb2.KeyValue.DESCRIPTOR.full_name
KEY_VALUE_LIST = common_pb2.KeyValueList.DESCRIPTOR.full_name
ARRAY_VALUE = common_pb2.ArrayValue.DESCRIPTOR.full_name
HEX_FIELDS = frozenset({"trace_id", "span_id", "parent_span_id"})
# OTLP's names before 0.15 (Tremor 0.12's events), read when the current name is absent.
LEGACY_NAMES = {
    "scope_spans": "instrumentation_library_spans",
    "scope_logs": "instrumentation_library_logs",
    "scope_metrics": "instrumentation_library_metrics",
    "scope": "instrumentation_library",
}
_INTEGERS = frozenset(
    {
        FieldDescriptor.CPPTYPE_INT32,
        FieldDescriptor.CPPTYPE_INT64,
        FieldDescriptor.CPPTYPE_UINT32,
        FieldDescriptor.CPPTYPE_UINT64,
        FieldDescriptor.CPPTYPE_ENUM,
    }
)
_FLOATS = frozenset({FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT})


class OtlpShapeError(ValueError):
    """An event that is not an OTLP request in Tremor's shape; the message says where and why."""


@dataclass(frozen=True)
class Signal:
    """One OTLP signal: its event key, its request's repeated field, the gRPC service's pieces."""

    key: str  # Tremor's event key and config switch: "logs", "metrics", "trace"
    field: str  # the request's repeated field: resource_logs, resource_metrics, resource_spans
    request: type[Message]
    response: type[Message]
    stub: Callable[[Any], Any]  # channel -> client stub with `Export`
    service: str  # the gRPC service's full name, whose one method is `Export`


SIGNALS: tuple[Signal, ...] = (
    Signal(
        "logs",
        "resource_logs",
        logs_service_pb2.ExportLogsServiceRequest,
        logs_service_pb2.ExportLogsServiceResponse,
        logs_service_pb2_grpc.LogsServiceStub,
        logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"].full_name,
    ),
    Signal(
        "metrics",
        "resource_metrics",
        metrics_service_pb2.ExportMetricsServiceRequest,
        metrics_service_pb2.ExportMetricsServiceResponse,
        metrics_service_pb2_grpc.MetricsServiceStub,
        metrics_service_pb2.DESCRIPTOR.services_by_name["MetricsService"].full_name,
    ),
    Signal(
        "trace",
        "resource_spans",
        trace_service_pb2.ExportTraceServiceRequest,
        trace_service_pb2.ExportTraceServiceResponse,
        trace_service_pb2_grpc.TraceServiceStub,
        trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name,
    ),
)


def request_to_event(signal: Signal, request: Message) -> dict[str, Any]:
    """An export request as Tremor's event: `{signal.key: [resource records]}`."""
    return {signal.key: [message_to_value(item) for item in getattr(request, signal.field)]}


def event_to_request(signal: Signal, value: Any) -> Message:
    """The export request of `value[signal.key]` (a list of resource records)."""
    items = value.get(signal.key) if isinstance(value, dict) else None
    if not isinstance(items, list):
        raise OtlpShapeError(f"{signal.key}: expected a list of resource records, got {_shown(items)}")
    request = signal.request()
    target = getattr(request, signal.field)
    for index, item in enumerate(items):
        _fill(target.add(), item, f"{signal.key}[{index}]")
    return request


# ---------------------------------------------------------------------------------------- to values


def message_to_value(message: Message) -> Any:
    """One message as a Tremor value (see the module's doc)."""
    desc = message.DESCRIPTOR
    if desc.full_name == ANY_VALUE:
        return _any_to_value(message)
    if desc.full_name == KEY_VALUE_LIST:
        return _attributes_to_value(message.values)
    if desc.full_name == ARRAY_VALUE:
        return [_any_to_value(item) for item in message.values]
    out: dict[str, Any] = {}
    for oneof in desc.oneofs:
        if not _synthetic(oneof):
            out[oneof.name] = _oneof_to_value(message, oneof)
    for field in desc.fields:
        oneof = field.containing_oneof
        if oneof is not None and not _synthetic(oneof):
            continue
        if oneof is not None and not message.HasField(field.name):
            continue  # a proto3 `optional` not set
        out[field.name] = _field_to_value(field, getattr(message, field.name), message)
    return out


def _field_to_value(field: FieldDescriptor, raw: Any, parent: Message) -> Any:
    if field.is_repeated:
        if field.message_type is not None and field.message_type.full_name == KEY_VALUE:
            return _attributes_to_value(raw)
        return [_scalar_or_message(field, item) for item in raw]
    if field.message_type is not None and not parent.HasField(field.name):
        return None
    return _scalar_or_message(field, raw)


def _scalar_or_message(field: FieldDescriptor, raw: Any) -> Any:
    if field.message_type is not None:
        return message_to_value(raw)
    if field.type == FieldDescriptor.TYPE_BYTES and field.name in HEX_FIELDS:
        return raw.hex()
    return raw


def _oneof_to_value(message: Message, oneof: OneofDescriptor) -> Any:
    chosen = message.WhichOneof(oneof.name)
    if chosen is None:
        return None
    field = oneof.containing_type.fields_by_name[chosen]
    value = _scalar_or_message(field, getattr(message, chosen))
    return {chosen: value} if field.message_type is not None else value


def _any_to_value(any_value: common_pb2.AnyValue) -> Any:
    chosen = any_value.WhichOneof("value")
    if chosen is None:
        return None
    if chosen == "array_value":
        return [_any_to_value(item) for item in any_value.array_value.values]
    if chosen == "kvlist_value":
        return _attributes_to_value(any_value.kvlist_value.values)
    return getattr(any_value, chosen)


def _attributes_to_value(pairs: Any) -> dict[str, Any]:
    return {pair.key: _any_to_value(pair.value) for pair in pairs}


def _synthetic(oneof: OneofDescriptor) -> bool:
    """The oneof protoc makes for a proto3 `optional` field (`_sum` around `sum`)."""
    fields = oneof.fields
    return len(fields) == 1 and oneof.name == f"_{fields[0].name}"


# ---------------------------------------------------------------------------------------- to messages


def _fill(message: Message, value: Any, where: str) -> None:
    """Set `message`'s fields from the record `value`."""
    desc = message.DESCRIPTOR
    if not isinstance(value, dict):
        raise OtlpShapeError(f"{where}: expected a record, got {_shown(value)}")
    for oneof in desc.oneofs:
        if not _synthetic(oneof) and value.get(oneof.name) is not None:
            _fill_oneof(message, oneof, value[oneof.name], f"{where}.{oneof.name}")
    for field in desc.fields:
        name = field.name if field.name in value else LEGACY_NAMES.get(field.name, field.name)
        if value.get(name) is None:
            continue
        oneof = field.containing_oneof
        if oneof is not None and not _synthetic(oneof):
            continue
        _fill_field(message, field, value[name], f"{where}.{name}")


def _fill_field(message: Message, field: FieldDescriptor, value: Any, where: str) -> None:
    if field.is_repeated:
        target = getattr(message, field.name)
        if field.message_type is not None and field.message_type.full_name == KEY_VALUE:
            _fill_attributes(target, value, where)
            return
        if not isinstance(value, list):
            raise OtlpShapeError(f"{where}: expected a list, got {_shown(value)}")
        for index, item in enumerate(value):
            if field.message_type is not None:
                _fill_message(target.add(), item, f"{where}[{index}]")
            else:
                _store(target.append, _scalar(field, item, f"{where}[{index}]"), f"{where}[{index}]")
        return
    if field.message_type is not None:
        _fill_message(getattr(message, field.name), value, where)
    else:
        _store(functools.partial(setattr, message, field.name), _scalar(field, value, where), where)


def _fill_message(message: Message, value: Any, where: str) -> None:
    name = message.DESCRIPTOR.full_name
    if name == ANY_VALUE:
        _fill_any(message, value, where)
    elif name == KEY_VALUE_LIST:
        _fill_attributes(message.values, value, where)
    elif name == ARRAY_VALUE:
        _fill_array(message.values, value, where)
    else:
        _fill(message, value, where)
        message.SetInParent()  # an empty record is a message set, not a field left out


def _fill_oneof(message: Message, oneof: OneofDescriptor, value: Any, where: str) -> None:
    fields = oneof.fields
    if fields[0].message_type is not None:
        members = {f.name: f for f in fields}
        if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in members:
            names = ", ".join(members)
            raise OtlpShapeError(f"{where}: expected a record with one of {names}, got {_shown(value)}")
        ((chosen, inner),) = value.items()
        _fill_message(getattr(message, chosen), inner, f"{where}.{chosen}")
        return
    for field in fields:  # numbers: the first member the value's type fits (as_double for a float)
        if _fits(field, value):
            _store(functools.partial(setattr, message, field.name), value, where)
            return
    raise OtlpShapeError(f"{where}: expected a number, got {_shown(value)}")


def _fits(field: FieldDescriptor, value: Any) -> bool:
    if isinstance(value, bool):
        return field.cpp_type == FieldDescriptor.CPPTYPE_BOOL
    if isinstance(value, int):
        return field.cpp_type in _INTEGERS
    if isinstance(value, float):
        return field.cpp_type in _FLOATS
    return False


def _scalar(field: FieldDescriptor, value: Any, where: str) -> Any:
    cpp = field.cpp_type
    if field.type == FieldDescriptor.TYPE_BYTES:
        if field.name in HEX_FIELDS and isinstance(value, str):
            try:
                return bytes.fromhex(value)
            except ValueError:
                raise OtlpShapeError(f"{where}: expected a hex string, got {_shown(value)}") from None
        if isinstance(value, bytes):
            return value
        raise OtlpShapeError(f"{where}: expected bytes or a hex string, got {_shown(value)}")
    if cpp == FieldDescriptor.CPPTYPE_STRING and isinstance(value, str):
        return value
    if cpp == FieldDescriptor.CPPTYPE_BOOL and isinstance(value, bool):
        return value
    if cpp in _INTEGERS and isinstance(value, int) and not isinstance(value, bool):
        return value
    if cpp in _FLOATS and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise OtlpShapeError(f"{where}: expected {_type_name(field)}, got {_shown(value)}")


def _fill_any(any_value: common_pb2.AnyValue, value: Any, where: str) -> None:
    if value is None:
        return
    if isinstance(value, bool):
        any_value.bool_value = value
    elif isinstance(value, int):
        _store(functools.partial(setattr, any_value, "int_value"), value, where)
    elif isinstance(value, float):
        any_value.double_value = value
    elif isinstance(value, str):
        any_value.string_value = value
    elif isinstance(value, bytes):
        any_value.bytes_value = value
    elif isinstance(value, list):
        any_value.array_value.SetInParent()
        _fill_array(any_value.array_value.values, value, where)
    elif isinstance(value, dict):
        any_value.kvlist_value.SetInParent()
        _fill_attributes(any_value.kvlist_value.values, value, where)
    else:
        raise OtlpShapeError(f"{where}: {_shown(value)} has no OTLP value")


def _store(put: Callable[[Any], None], value: Any, where: str) -> None:
    """`put(value)`, protobuf's refusal (a number out of the field's range) an `OtlpShapeError`."""
    try:
        put(value)
    except (ValueError, TypeError) as err:
        raise OtlpShapeError(f"{where}: {err}") from None


def _fill_array(target: Any, value: Any, where: str) -> None:
    if not isinstance(value, list):
        raise OtlpShapeError(f"{where}: expected a list, got {_shown(value)}")
    for index, item in enumerate(value):
        _fill_any(target.add(), item, f"{where}[{index}]")


def _fill_attributes(target: Any, value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise OtlpShapeError(f"{where}: expected a record of attributes, got {_shown(value)}")
    for key, item in value.items():
        pair = target.add()
        pair.key = key
        _fill_any(pair.value, item, f"{where}.{key}")


def _type_name(field: FieldDescriptor) -> str:
    cpp = field.cpp_type
    if cpp in _INTEGERS:
        return "an integer"
    if cpp in _FLOATS:
        return "a number"
    return {FieldDescriptor.CPPTYPE_BOOL: "a bool", FieldDescriptor.CPPTYPE_STRING: "a string"}.get(cpp, "?")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
