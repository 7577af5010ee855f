"""ApiVersions: which requests and versions this listener answers.

Clients send their newest ApiVersions first; one this listener does not know
is answered in version 0 with UNSUPPORTED_VERSION and the supported ranges, so
the client can retry with a version both sides know (KIP-511).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contraflow.spu.kafka.apis.base import THROTTLE_NONE, KafkaRequest
from contraflow.spu.kafka.broker import Broker
from contraflow.spu.kafka.errors import KafkaErrorCode
from contraflow.spu.kafka.wire import Writer

if TYPE_CHECKING:
    from contraflow.spu.kafka.apis.base import Api

_RANGES: list[tuple[int, int, int]] = []


def register(apis: dict[int, Api]) -> None:
    _RANGES[:] = sorted((key, api.min_version, api.max_version) for key, api in apis.items())


def versions_response(version: int, error: KafkaErrorCode = KafkaErrorCode.NONE) -> Writer:
    out = Writer().int16(error)
    if version >= 3:
        out.compact_array(_RANGES, lambda w, r: w.int16(r[0]).int16(r[1]).int16(r[2]).empty_tagged_fields())
        return out.int32(THROTTLE_NONE).empty_tagged_fields()
    out.array(_RANGES, lambda w, r: w.int16(r[0]).int16(r[1]).int16(r[2]))
    if version >= 1:
        out.int32(THROTTLE_NONE)
    return out


async def api_versions(broker: Broker, request: KafkaRequest) -> Writer:
    if request.version >= 3:  # client software name and version: only logged by Kafka
        request.body.compact_nullable_string()
        request.body.compact_nullable_string()
        request.body.skip_tagged_fields()
    return versions_response(request.version)
